#!/usr/bin/env python3
"""A Fugitive registration whose game server never answers (its port not
forwarded: the pings vanish) gets 504 once the ping timeout passes, while
every other request is answered at once: the ping-back waits in the loop,
not in the handler. Ping-backs are bounded: a fifth one from the same
caller while four wait is refused with 412 straight away. A master stopped
with ping-backs pending answers them (503) and exits cleanly."""

import json
import signal
import threading
import time

from harness import Master, UdpPeer, check, http_raw, run, wait_for

BODY = json.dumps({"name": "silent server", "game_version": 1, "current_players": 0,
                   "max_players": 8, "is_joinable": True}).encode()
TIMEOUT_MS = 3000
NO_PONG = b'{"result":"no ping response received, is your port not properly forwarded?"}'


class Post(threading.Thread):
    """POST /servers/{sid} in the background; .result = (status, body, secs)."""

    def __init__(self, m, sid):
        super().__init__(daemon=True)
        self.m, self.sid, self.result = m, sid, None
        self.start()

    def run(self):
        t0 = time.monotonic()
        try:
            st, data, _ = http_raw("POST", self.m.url("/servers/" + self.sid), body=BODY,
                                   headers={"Content-Type": "application/json"}, timeout=20)
        except OSError as e:
            st, data = None, repr(e).encode()
        self.result = (st, data, time.monotonic() - t0)


def inflight(m):
    return m.metrics().get("rally_master_fugitive_pingbacks_in_flight", -1)


def scenario(env):
    m = Master(env, args=["--ping-timeout", str(TIMEOUT_MS)])
    silent = UdpPeer(env)  # records the pings, answers nothing
    sid = "127.0.0.1:%d" % silent.addr[1]

    post = Post(m, sid)
    wait_for(lambda: inflight(m) == 1, 5, "the ping-back to be in flight")
    wait_for(lambda: len(silent.packets()) == 10, 5, "ten pings at the silent server")

    # Meanwhile the master answers at once.
    worst = 0.0
    for path in ("/servers", "/reflection/ip", "/healthz", "/servers", "/metrics"):
        t0 = time.monotonic()
        st, data, _ = http_raw("GET", m.url(path))
        took = time.monotonic() - t0
        worst = max(worst, took)
        check(st == 200, "GET %s during the ping-back -> %s" % (path, st))
        check(post.result is None, "the POST finished before the other requests")
    print("GET during a pending ping-back: slowest %.1f ms" % (worst * 1000))
    check(worst < 0.5, "a GET took %.0f ms while a ping-back waited" % (worst * 1000))
    st, data, _ = http_raw("PUT", m.url("/servers/127.0.0.1:45677"), body=BODY)
    check(st == 201, "PUT during the ping-back -> %s %r" % (st, data))

    post.join(20)
    st, data, secs = post.result
    print("POST to the silent server: %s after %.2f s" % (st, secs))
    check(st == 504 and data == NO_PONG, "silent server -> %s %r" % (st, data))
    check(secs >= TIMEOUT_MS / 1000 - 0.3, "504 came after %.2f s, before the timeout" % secs)
    check(secs < TIMEOUT_MS / 1000 + 2, "504 came after %.2f s" % secs)
    check(inflight(m) == 0, "the ping-back is still counted")
    listed = [e["port"] for e in json.loads(http_raw("GET", m.url("/servers"))[1])]
    check(silent.addr[1] not in listed, "the silent server was listed")

    # The bound: four in flight for one caller, the fifth refused at once.
    silents = [UdpPeer(env) for _ in range(5)]
    posts = [Post(m, "127.0.0.1:%d" % s.addr[1]) for s in silents[:4]]
    wait_for(lambda: inflight(m) == 4, 5, "four ping-backs in flight")
    t0 = time.monotonic()
    st, data, _ = http_raw("POST", m.url("/servers/127.0.0.1:%d" % silents[4].addr[1]),
                           body=BODY)
    check(st == 412 and data == b'{"result":"Repository could not ping you."}' and
          time.monotonic() - t0 < 0.5, "fifth ping-back -> %s %r" % (st, data))
    check(silents[4].packets() == [], "the refused ping-back sent datagrams")
    check(m.metrics().get('rally_master_fugitive_requests_total{method="POST",outcome="busy"}')
          == 1, "busy not counted")
    for p in posts:
        p.join(20)
        check(p.result[0] == 504, "pending ping-back -> %r" % (p.result,))

    # Stopping with a ping-back pending: it is answered or closed, never
    # left hanging, and the master exits 0.
    late = Post(m, sid)
    wait_for(lambda: inflight(m) == 1, 5, "a ping-back in flight before SIGTERM")
    m.signal(signal.SIGTERM)
    rc = m.wait_exit(10)
    late.join(10)
    print("POST pending at SIGTERM: %r" % (late.result,))
    check(late.result is not None and late.result[2] < TIMEOUT_MS / 1000,
          "the pending POST hung: %r" % (late.result,))
    check(late.result[0] in (503, None), "pending POST at shutdown -> %r" % (late.result,))
    check(rc == 0, "master exited %s" % rc)
    check(m.grep(r"stopped entries="), "no clean stop line")


if __name__ == "__main__":
    run(scenario)
