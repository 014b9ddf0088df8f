#!/usr/bin/env python3
"""getstatus/getinfo are limited per source IP: a burst of 5, then 1/s. The
6th getstatus within a second from one IP goes unanswered, is answered again
after the refill, and another IP is unaffected meanwhile. Other commands are
not limited. Beyond the per-IP buckets, a budget caps the queries forwarded
per second from all sources together (--query-budget), which is what stops
a flood from many spoofed sources. Both are the forwarding path's, with the
query cache off (--query-cache off); the cache has byte budgets of its own
(relay_qcache_reflect)."""

import time

from harness import OAServer, Relay, check, drain, oob, query, run, wait_for


def burst(sock, addr, n, cmd="getstatus"):
    """Sends n queries back to back; returns how many were answered."""
    for _ in range(n):
        sock.sendto(oob(cmd), addr)
    return len(drain(sock, 0.5))


def scenario(env):
    oa = OAServer(env)
    relay = Relay(env, oa.addr, args=["--query-cache", "off"])
    a = env.udp("127.0.0.1")
    b = env.udp("127.0.0.2")

    t0 = time.monotonic()
    got = burst(a, relay.addr, 6)
    check(time.monotonic() - t0 < 1.0, "burst took too long to be meaningful")
    check(got == 5, "IP A: %d of 6 getstatus answered, want 5" % got)
    check(relay.drops("rate_limited") == 1, "rate_limited drops: %s" % relay.drops("rate_limited"))

    # Another IP is unaffected while A is empty.
    check(query(b, relay.addr, "getstatus", timeout=2) is not None, "IP B was limited too")
    # A's bucket is empty now: an immediate query is refused...
    check(query(a, relay.addr, "getinfo", timeout=0.3) is None, "A's 7th query was answered")
    # ...and a token comes back after a second: asked until answered (a
    # query refused meanwhile takes no token).
    wait_for(lambda: query(a, relay.addr, "getstatus", timeout=0.25) is not None, 5,
             "A to be answered after the refill")
    # getchallenge is not a query: not limited.
    answered = 0
    for _ in range(3):
        if query(a, relay.addr, "getchallenge", timeout=3):
            answered += 1
    check(answered == 3, "getchallenge limited: %d/3" % answered)
    m = relay.metrics()
    check(m["rally_relay_query_sources"] == 2, "limiter sources: %r" % m["rally_relay_query_sources"])
    env.daemons_alive(relay, oa)
    relay.stop()

    # The global budget: 3 queries a second from all sources together. A
    # fresh server: this one's own per-IP limiter has seen enough of the
    # relay's address for now.
    oa2 = OAServer(env, name="oa2")
    relay = Relay(env, oa2.addr, args=["--query-cache", "off", "--query-budget", "3"],
                  name="relay-budget")
    many = [env.udp("127.0.5.%d" % (i + 1)) for i in range(6)]
    for s in many:
        s.sendto(oob("getinfo"), relay.addr)
    answered = sum(len(drain(s, 0.3)) for s in many)
    check(answered == 3, "budget 3/s: %d of 6 sources answered" % answered)
    check(relay.drops("query_budget") == 3, "query_budget drops: %s" % relay.drops("query_budget"))
    wait_for(lambda: query(many[0], relay.addr, "getinfo", timeout=0.25), 5,
             "the budget to be refilled after a second")
    env.daemons_alive(relay, oa2)


run(scenario)
