#!/usr/bin/env python3
"""Losing Redis (issue 12 section 2), against a real redis-server with an
ACL user allowed only the commands docs/master.md lists (the masters
authenticate as it, password from a file): two
masters share lobbies and a Q3 server; Redis is killed (SIGKILL) mid-run.
Both keep answering /list, /knock and getservers from what they hold,
/healthz says disconnected, each logs redis-down once (not per request or
per retry) and retries with backoff; a lobby announced meanwhile is served
by its master. Redis comes back empty: both log redis-up, write their own
state again and converge - every lobby, the Q3 server and a knock on both,
no lobby lost, nothing doubled - and a master started then gets it all
from its first sync. Then Redis answers slowly (DEBUG SLEEP 3): while it sleeps, HTTP and
UDP answers of both masters come back (they never wait on Redis), and a
lobby announced during the sleep reaches the other master once Redis is
awake. Last, Redis is frozen (SIGSTOP, its data kept): a lobby that leaves
through a master that gave up on Redis is dropped by the other master once
Redis is back (its own stale key found and deleted by the first sync)."""

import json
import os
import signal
import threading
import time

from harness import (FakeQ3Server, Master, RedisServer, check, http_raw, q3_getservers, run,
                     wait_for)

USER, PASSWORD = "rallym", "outage-pass-0123456789"


def names(m):
    st, data, _ = http_raw("GET", m.url("/list"), timeout=5)
    check(st == 200, "GET /list -> %s" % st)
    return sorted(s["name"] for s in json.loads(data)["servers"])


def announce(m, lid, name):
    st, data, _ = http_raw("POST", m.url("/announce"),
                           body=json.dumps({"id": lid, "code": "C-" + lid, "name": name}).encode(),
                           headers={"Content-Type": "application/json"})
    check(st == 200, "announce -> %s %r" % (st, data))


def knocks(m, tag):
    st, data, _ = http_raw("GET", m.url("/knock?s=" + tag))
    check(st == 200, "GET /knock -> %s" % st)
    return json.loads(data)["knocks"]


def health(m):
    st, data, _ = http_raw("GET", m.url("/healthz"))
    check(st == 200, "healthz -> %s" % st)
    return json.loads(data)["redis"]


def scenario(env):
    # docs/master.md's least ACL, less the optional CLIENT SETNAME.
    rs = RedisServer(env, users=["user %s on >%s ~rally:* &rally:* -@all +auth +select +ping "
                                 "+scan +get +set +del +rpush +ltrim +lrange +pexpire +publish "
                                 "+subscribe" % (USER, PASSWORD)])
    pwf = os.path.join(env.dir, "redis.pass")
    with open(pwf, "w") as f:
        f.write(PASSWORD + "\n")
    common = ["--redis", "redis://%s@%s" % (USER, rs.url()), "--redis-password-file", pwf,
              "--redis-timeout", "500"]
    a = Master(env, args=common + ["--redis-node", "a"],
               state_dir=os.path.join(env.dir, "state-a"), name="master-a")
    b = Master(env, args=common + ["--redis-node", "b"],
               state_dir=os.path.join(env.dir, "state-b"), name="master-b")
    for m in (a, b):
        m.wait_line(r"redis-synced ", 10)
        check(a.grep(r"redis-up .*node=a"), "no redis-up line")
    announce(a, "l1", "one")
    announce(b, "l2", "two")
    q = FakeQ3Server(env)
    q.heartbeat(a.udp_addr)
    client = env.udp()
    q3_on = lambda m: ("127.0.0.1", q.addr[1]) in (
        q3_getservers(client, m.udp_addr, "getservers 71 empty full", timeout=0.5)[0] or [])
    for m in (a, b):
        wait_for(lambda: names(m) == ["one", "two"], 2, "%s to list both lobbies" % m.name)
        wait_for(lambda: q3_on(m), 3, "%s to list the Q3 server" % m.name)

    tag = "0123456789abcdef01234567"
    st, _, _ = http_raw("POST", a.url("/knock"), body=b'{"s": "%s", "blob": "AAAA"}' % tag.encode(),
                        headers={"Content-Type": "application/json", "X-Real-IP": "10.1.1.1"})
    check(st == 200, "knock -> %s" % st)
    wait_for(lambda: len(knocks(b, tag)) == 1, 2, "B to get the knock posted to A")

    # ---- Redis killed ----
    rs.signal(signal.SIGKILL)
    rs.wait_exit(5)
    for m in (a, b):
        m.wait_line(r"redis-down redis=\S+ error=", 5)
        wait_for(lambda: health(m) == "disconnected", 2, "%s healthz to say disconnected" % m.name)
    # Still serving all it holds; what is announced now is served too.
    announce(a, "l3", "three")
    check(names(a) == ["one", "three", "two"], "A lists %r while Redis is down" % names(a))
    check(names(b) == ["one", "two"], "B lists %r while Redis is down" % names(b))
    check(q3_on(b), "B no longer lists the Q3 server while Redis is down")
    st, data, _ = http_raw("GET", b.url("/knock?s=0123456789abcdef01234567"))
    check(st == 200, "GET /knock while Redis is down -> %s" % st)
    # Several retries go by (debug lines), one redis-down line each.
    for m in (a, b):
        wait_for(lambda: len(m.grep(r"redis-retry-fail ")) >= 3, 10,
                 "%s to retry three times" % m.name)
        check(len(m.grep(r"redis-down ")) == 1, "%s logged redis-down %d times" % (
            m.name, len(m.grep(r"redis-down "))))
        check(m.metrics()["rally_master_redis_connected"] == 0, "metrics say connected")

    # ---- Redis back, empty: both write their state again and converge ----
    t0 = time.monotonic()
    rs.restart(env)
    for m in (a, b):
        m.wait_line(r"redis-up .*republish=yes", 10)
    for m in (a, b):
        wait_for(lambda: names(m) == ["one", "three", "two"], 3,
                 "%s to list every lobby after Redis came back" % m.name)
        check(health(m) == "connected", "%s healthz not connected" % m.name)
        check(m.metrics()["rally_master_redis_reconnects_total"] == 1, "reconnects")
    env.log("converged %.0f ms after redis-server restarted (backoff included)" %
            ((time.monotonic() - t0) * 1000))
    # The knock went back into Redis once, and nobody holds it twice.
    wait_for(lambda: rs.cmd("LLEN", "rally:knock:" + tag) == 1, 3, "the knock re-published")
    check(len(knocks(a, tag)) == 1 and len(knocks(b, tag)) == 1, "the knock doubled")
    # A master started now gets everything from its first sync.
    c = Master(env, args=common + ["--redis-node", "c"],
               state_dir=os.path.join(env.dir, "state-c"), name="master-c")
    c.wait_line(r"redis-synced .*remote=4 ", 10)
    check(names(c) == ["one", "three", "two"] and q3_on(c) and len(knocks(c, tag)) == 1,
          "the late master holds %r" % names(c))
    keys = rs.cmd("KEYS", "rally:reg:*")
    check(len([k for k in keys if k.startswith(b"rally:reg:lobbies:")]) == 3 and
          len([k for k in keys if k.startswith(b"rally:reg:q3:")]) == 1,
          "Redis holds %r after the re-publish" % keys)

    # ---- Redis answering slowly: nothing waits on it ----
    done = threading.Event()

    def sleeper():
        rs.cmd("DEBUG", "SLEEP", "3", timeout=10)
        done.set()
    th = threading.Thread(target=sleeper, daemon=True)
    th.start()
    # DEBUG SLEEP has begun once a PING on another connection goes
    # unanswered: wait for that, then ask the masters.
    def asleep():
        try:
            rs.cmd("PING", timeout=0.2)
            return False
        except OSError:
            return True
    wait_for(asleep, 3, "Redis to be asleep")
    t0 = time.monotonic()
    announce(a, "l4", "four")
    seen = (names(a), names(b), q3_on(b), health(a))
    answered = time.monotonic() - t0
    check(not done.is_set(), "Redis woke before the masters answered: they may have waited")
    env.log("while Redis slept: announce, two lists, getservers and healthz in %.1f ms" %
            (answered * 1000))
    check(seen[0] == ["four", "one", "three", "two"] and seen[1] == ["one", "three", "two"] and
          seen[2], "answers while Redis slept: %r" % (seen,))
    th.join(10)
    check(done.is_set(), "DEBUG SLEEP never returned")
    wait_for(lambda: names(b) == ["four", "one", "three", "two"], 10,
             "B to list the lobby announced while Redis slept")
    for m in (a, b):
        wait_for(lambda: health(m) == "connected", 10, "%s to be connected again" % m.name)

    # ---- Redis frozen (SIGSTOP, its data kept): a /leave while A cannot
    # reach it is not lost; once back, A deletes its stale key ----
    announce(a, "l5", "five")
    wait_for(lambda: "five" in names(b), 3, "B to list the fifth lobby")
    os.kill(rs.pid, signal.SIGSTOP)
    try:
        announce(a, "l6", "six")  # a command waiting: the watchdog fires
        wait_for(lambda: health(a) == "disconnected", 5, "A to give up on the frozen Redis")
        st, _, _ = http_raw("POST", a.url("/leave"), body=b'{"id": "l5"}',
                            headers={"Content-Type": "application/json"})
        check(st == 200, "leave -> %s" % st)
        check("five" not in names(a), "A still lists the lobby that left")
    finally:
        os.kill(rs.pid, signal.SIGCONT)
    wait_for(lambda: health(a) == "connected", 10, "A to reconnect")
    wait_for(lambda: "five" not in names(b) and "six" in names(b), 5,
             "B to drop the lobby that left while Redis was frozen, and list the sixth")
    check(rs.cmd("EXISTS", "rally:reg:lobbies:" + __import__("hashlib").blake2b(
        b"l5", digest_size=32).hexdigest()) == 0, "the stale key is still in Redis")
    env.daemons_alive(rs, a, b, c)


run(scenario)
