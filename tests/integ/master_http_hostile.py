#!/usr/bin/env python3
"""Hostile HTTP clients: 10,000 idle TCP connections while /list still
answers; bodies over 4 KiB (the netpunch API's MAX_BODY) are refused with its
400, a 1 MiB one too; garbage request lines, a slow sender and a flood of
requests do not stop the master from serving."""

import resource
import socket
import time

from harness import Master, check, run, wait_for


def timed_list(m):
    t0 = time.monotonic()
    st, body, _ = m.call("GET", "/list")
    return st, body, time.monotonic() - t0


def scenario(env):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 20000), hard))
    m = Master(env, debug=False)
    st, _, _ = m.call("POST", "/announce", {"id": "a", "code": "C", "name": "still here"})
    check(st == 200, "announce")

    # 10,000 idle connections that never send a byte, opened 500 at a time:
    # the kernel's accept queue holds 4,096, and a SYN it drops is resent
    # only after 1, 3, 7 ... s, so a burst of 10,000 on a loaded machine
    # could take minutes to be accepted in full.
    idle = []
    env.cleanups.append(lambda: [s.close() for s in idle])
    for batch in range(20):
        for i in range(500):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            try:
                s.connect(m.http_addr)
            except BlockingIOError:
                pass
            idle.append(s)
        # The master's own count (the metrics request is one more).
        want = len(idle)
        wait_for(lambda: m.metrics()["rally_master_http_connections"] >= want, 30,
                 lambda: "the master to hold %d connections" % want)
    st, body, took = timed_list(m)
    check(st == 200 and body["servers"][0]["name"] == "still here", "/list under 10,000 idle: %s" % st)
    check(took < 2.0, "/list took %.2fs with 10,000 idle connections" % took)
    for s in idle:
        s.close()
    idle.clear()

    # Bodies over 4 KiB: the reference's 400 bad request, before parsing.
    big = b'{"id": "x", "code": "' + b"y" * 5000 + b'"}'
    st, body, _ = m.call("POST", "/announce", raw=big)
    check(st == 400 and body == {"error": "bad request"}, "5 KB body -> %s %r" % (st, body))
    st, body, _ = m.call("POST", "/announce", raw=b"x" * (1 << 20))
    check(st == 400 and body == {"error": "bad request"}, "1 MiB body -> %s %r" % (st, body))
    exact = b'{"id": "x4096", "code": "' + b"c" * (4096 - 27) + b'"}'
    check(len(exact) == 4096, "test body length %d" % len(exact))
    st, body, _ = m.call("POST", "/announce", raw=exact)
    check(st == 200, "4,096-byte body refused: %s %r" % (st, body))

    # Garbage and half requests.
    for junk in (b"\x00\xff\xfe garbage\r\n\r\n", b"GET /list HTTP/9.9\r\n\r\n",
                 b"POST /announce HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n",
                 b"GET " + b"/a" * 20000 + b" HTTP/1.1\r\n\r\n"):
        s = socket.create_connection(m.http_addr)
        s.settimeout(3)
        try:
            s.sendall(junk)
            s.recv(4096)
        except OSError:
            pass
        s.close()
    # A slow sender holds one connection, not the server.
    slow = socket.create_connection(m.http_addr)
    slow.sendall(b"GET /li")
    st, _, took = timed_list(m)
    check(st == 200 and took < 2.0, "a slow sender blocked /list")
    slow.close()

    # A burst of requests.
    for i in range(300):
        st, _, _ = m.call("GET", "/health")
        check(st == 200, "health %d" % i)
    st, body, _ = m.call("GET", "/list")
    check(st == 200 and len(body["servers"]) == 2, "after the burst: %r" % body)
    env.daemons_alive(m)


run(scenario)
