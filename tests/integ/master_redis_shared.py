#!/usr/bin/env python3
"""Two rally-masters on one real redis-server (issue 12 section 2): what
one registers the other lists within 1 s - a netpunch lobby (/list), a
Quake 3 server heartbeating one master (getservers on the other), a
Fugitive server (/servers) - and a /leave on the other takes the lobby off
both. A knock posted to one reaches the host polling the other; a relay
knock gets a port of the master that allocated it, the same (tag, nonce)
posted to the other master (which has no relay ports at all) is answered
with that allocation, and both ends bind and talk through it. A Fugitive
server expires through its Redis key's TTL (PX) on both masters. A third
master under another --redis-prefix shares the server and sees none of
it. The password comes from a file; /healthz and /metrics say connected,
published and merged."""

import json
import os
import socket
import time
from http.client import HTTPConnection

from harness import (FakeQ3Server, Master, PongServer, RedisServer, check, http_raw,
                     private_loopback, q3_getservers, run, wait_for)

PASSWORD = "integ-redis-0123456789"
TAG = "0123456789abcdef01234567"
FUG = {"name": "shared fugitive", "game_version": 3, "current_players": 1, "max_players": 8,
       "is_joinable": True}


def lobbies(m):
    st, data, _ = http_raw("GET", m.url("/list"))
    check(st == 200, "GET /list -> %s" % st)
    return json.loads(data)["servers"]


def names(m):
    return sorted(s["name"] for s in lobbies(m))


def announce(m, body):
    st, data, _ = http_raw("POST", m.url("/announce"), body=json.dumps(body).encode(),
                           headers={"Content-Type": "application/json"})
    check(st == 200, "announce -> %s %r" % (st, data))


def within(pred, what):
    """Waits for pred, at most the issue's 1 s; returns the seconds it took."""
    t0 = time.monotonic()
    wait_for(pred, 1.0, what, interval=0.005)
    return time.monotonic() - t0


def knock(m, body, ip):
    st, data, _ = http_raw("POST", m.url("/knock"), body=json.dumps(body).encode(),
                           headers={"X-Real-IP": ip, "Content-Type": "application/json"})
    return st, data


def poll(m, tag):
    st, data, _ = http_raw("GET", m.url("/knock?s=" + tag))
    check(st == 200, "GET /knock -> %s" % st)
    return json.loads(data)["knocks"]


def recv(sock, timeout=2.0):
    sock.settimeout(timeout)
    try:
        return sock.recvfrom(65535)
    except socket.timeout:
        return None


def scenario(env):
    rs = RedisServer(env, password=PASSWORD)
    pwf = os.path.join(env.dir, "redis.pass")
    with open(pwf, "w") as f:
        f.write(PASSWORD + "\n")
    rip = private_loopback()
    common = ["--redis", "redis://%s/1" % rs.url(), "--redis-password-file", pwf,
              "--redis-prefix", "integ", "--verify-lists"]
    a = Master(env, args=common + ["--redis-node", "a", "--relay-ip", rip, "--relay-bind", rip,
                                   "--relay-ports", "29600-29601", "--stale", "3"],
               state_dir=os.path.join(env.dir, "state-a"), name="master-a")
    b = Master(env, args=common + ["--redis-node", "b", "--stale", "3"],
               state_dir=os.path.join(env.dir, "state-b"), name="master-b")
    other = Master(env, args=["--redis", rs.url(), "--redis-password-file", pwf,
                              "--redis-prefix", "other"],
                   state_dir=os.path.join(env.dir, "state-o"), name="master-other")
    for m in (a, b, other):
        m.wait_line(r"redis-synced ", 10)
    for m in (a, b):
        st, data, _ = http_raw("GET", m.url("/healthz"))
        check((st, data) == (200, b'{"status":"ok","redis":"connected"}'),
              "healthz -> %s %r" % (st, data))

    # A lobby announced on A is listed by B, every field equal.
    announce(a, {"id": "lobby-1", "code": "CODE-ONE", "name": "first", "players": 2, "max": 6,
                 "type": "relay", "version": "1.2"})
    took = within(lambda: names(b) == ["first"], "B to list A's lobby")
    env.log("lobby announced on A listed by B after %.1f ms" % (took * 1000))
    ra, rb = lobbies(a)[0], lobbies(b)[0]
    ra.pop("age"), rb.pop("age")
    check(ra == rb, "A lists %r, B %r" % (ra, rb))
    keys = rs.cmd("KEYS", "integ:*", db=1)
    check(any(k.startswith(b"integ:reg:lobbies:") for k in keys), "keys: %r" % keys)
    # A re-announce on B (the name moved to it) is newer: A lists it too.
    announce(b, {"id": "lobby-1", "code": "CODE-ONE", "name": "moved", "players": 3, "max": 6,
                 "type": "relay"})
    within(lambda: names(a) == ["moved"], "A to take B's newer announce")
    # A second lobby on B, then /leave on A takes it off both.
    announce(b, {"id": "lobby-2", "code": "CODE-TWO", "name": "second"})
    within(lambda: names(a) == ["moved", "second"], "A to list B's second lobby")
    st, data, _ = http_raw("POST", a.url("/leave"), body=b'{"id": "lobby-2"}',
                           headers={"Content-Type": "application/json"})
    check(st == 200, "leave -> %s" % st)
    within(lambda: names(b) == ["moved"], "B to drop the lobby that left through A")

    # A Quake 3 server heartbeating A is in B's getservers.
    q = FakeQ3Server(env)
    q.heartbeat(a.udp_addr)
    wait_for(lambda: a.grep(r"q3-listed server=127\.0\.0\.1:%d" % q.addr[1]), 5, "A to list it")
    client = env.udp()

    def b_lists_q3():
        servers, _ = q3_getservers(client, b.udp_addr, "getservers 71 empty full", timeout=0.3)
        return servers is not None and ("127.0.0.1", q.addr[1]) in servers
    took = within(b_lists_q3, "B's getservers to list the server that heartbeat A")
    env.log("Q3 server listed by A in B's getservers after %.1f ms" % (took * 1000))
    st, data, _ = http_raw("GET", b.url("/q3/servers"))
    check(b'"game": "Quake3Arena"' in data or b'"game":"Quake3Arena"' in data,
          "/q3/servers on B: %r" % data[:300])

    # A Fugitive server registered on A (ping-back and all) is on B's /servers.
    gs = PongServer(env)
    sid = "127.0.0.1:%d" % gs.addr[1]
    st, data, _ = http_raw("POST", a.url("/servers/" + sid), body=json.dumps(FUG).encode(),
                           headers={"Content-Type": "application/json"})
    check(st == 200, "Fugitive POST -> %s %r" % (st, data))
    fug_b = lambda: [s for s in json.loads(http_raw("GET", b.url("/servers"))[1])
                     if s.get("name") == "shared fugitive"]
    took = within(fug_b, "B to list A's Fugitive server")
    env.log("Fugitive server on A listed by B after %.1f ms" % (took * 1000))
    # Its key expires in Redis (PX = --stale 3 s); both masters drop it then.
    fkey = rs.cmd("KEYS", "integ:reg:fugitive:*", db=1)
    check(len(fkey) == 1, "fugitive keys %r" % fkey)
    pttl = rs.cmd("PTTL", fkey[0], db=1)
    check(0 < pttl <= 3000, "the Fugitive key's PTTL is %r, want 1..3000" % pttl)
    wait_for(lambda: rs.cmd("EXISTS", fkey[0], db=1) == 0,
             6, "Redis to expire the Fugitive key")
    wait_for(lambda: not fug_b(), 2, "B to drop the expired Fugitive server")
    check(b"shared fugitive" not in http_raw("GET", a.url("/servers"))[1],
          "A still lists the expired Fugitive server")

    # Knocks: posted to A, polled on B; posted to B, polled on A.
    st, data = knock(a, {"s": TAG, "blob": "AAAA"}, "10.9.0.1")
    check(st == 200, "knock on A -> %s %r" % (st, data))
    took = within(lambda: [n["blob"] for n in poll(b, TAG)] == ["AAAA"],
                  "the host polling B to get the knock posted to A")
    env.log("knock posted to A polled on B after %.1f ms" % (took * 1000))
    check(poll(a, TAG)[0]["t"] == poll(b, TAG)[0]["t"], "the note's t differs")
    st, data = knock(b, {"s": TAG, "blob": "BBBB"}, "10.9.0.2")
    within(lambda: [n["blob"] for n in poll(a, TAG)] == ["AAAA", "BBBB"],
           "A to get the knock posted to B, in order")

    # A relay knock on A: one of A's ports, its address in the note on B;
    # the same (tag, nonce) on B, which has no relay ports, is that port.
    rtag = "fedcba9876543210fedcba98"
    st, data = knock(a, {"s": rtag, "blob": "CCCC", "relay": 1, "j": "0123456789ab"}, "10.9.0.3")
    check(st == 200, "relay knock on A -> %s %r" % (st, data))
    relay = json.loads(data)["relay"]
    check(relay["ip"] == rip and 29600 <= relay["port"] <= 29601, "relay %r" % relay)
    within(lambda: [n.get("relay") for n in poll(b, rtag)] == [relay],
           "the host polling B to see A's relay allocation")
    within(lambda: b.metrics().get('rally_master_redis_remote_entries{kind="relay"}') == 1,
           "B to hold A's allocation")
    st, data2 = knock(b, {"s": rtag, "blob": "DDDD", "relay": 1, "j": "0123456789ab"},
                      "10.9.0.4")
    check(st == 200 and json.loads(data2)["relay"] == relay,
          "the same relay knock on B -> %s %r, want %r" % (st, data2, relay))
    # Both ends bind A's port and talk through it.
    ra_addr = (rip, relay["port"])
    rid = bytes.fromhex(relay["id"])
    joiner, host = env.udp(), env.udp()
    for sock, role in ((joiner, b"J"), (host, b"H")):
        sock.sendto(b"TRLB" + rid + role, ra_addr)
        check(recv(sock) == (b"TRLA" + rid, ra_addr), "bind %s on A's relay port" % role)
    for src, dst, payload in ((joiner, host, b"from the joiner"), (host, joiner, b"x" * 900)):
        src.sendto(payload, ra_addr)
        check(recv(dst) == (payload, ra_addr), "%r did not cross A's relay port" % payload[:20])

    # The other prefix saw nothing of all this (and is still connected).
    check(lobbies(other) == [], "the other prefix lists %r" % lobbies(other))
    check(poll(other, TAG) == [], "the other prefix has the knocks")
    mo = other.metrics()
    check(mo["rally_master_redis_connected"] == 1 and
          sum(v for k, v in mo.items() if k.startswith("rally_master_redis_merged_total")) == 0,
          "the other prefix merged something")

    # 400 lobbies at once on A (one keep-alive connection): B lists them all.
    c = HTTPConnection(*a.http_addr, timeout=10)
    t0 = time.monotonic()
    for i in range(400):
        c.request("POST", "/announce", body=json.dumps({"id": "bulk-%d" % i, "code": "B%d" % i,
                                                         "name": "bulk %03d" % i}),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        check(r.status == 200, "bulk announce %d -> %s" % (i, r.status))
    t1 = time.monotonic()
    wait_for(lambda: len(lobbies(b)) == 401, 10, "B to list the 400 lobbies", interval=0.01)
    env.log("400 announces on A in %.0f ms; all listed by B %.0f ms after the last" %
            ((t1 - t0) * 1000, (time.monotonic() - t1) * 1000))
    c.close()

    ma, mb = a.metrics(), b.metrics()
    for k in ("lobbies", "q3", "fugitive", "knock", "relay"):
        check(ma['rally_master_redis_published_total{kind="%s"}' % k] >= 1,
              "A published no %s" % k)
    for k in ("lobbies", "q3", "fugitive", "knock", "relay"):
        check(mb['rally_master_redis_merged_total{kind="%s"}' % k] >= 1, "B merged no %s" % k)
    for mm in (ma, mb):
        check(mm["rally_master_redis_connected"] == 1 and mm["rally_master_redis_synced"] == 1,
              "not connected")
        check(mm['rally_master_redis_commands_total{result="failed"}'] == 0,
              "commands failed: %r" % mm)
        check(sum(v for k, v in mm.items() if k.startswith("rally_master_redis_refused")) == 0,
              "values refused")
    env.daemons_alive(rs, a, b, other)


run(scenario)
