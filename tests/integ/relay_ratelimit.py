#!/usr/bin/env python3
"""getstatus/getinfo are limited per source IP: a burst of 5, then 1/s. The
6th getstatus within a second from one IP goes unanswered, is answered again
after the refill, and another IP is unaffected meanwhile. Other commands are
not limited."""

import time

from harness import OAServer, Relay, check, drain, oob, query, run


def burst(sock, addr, n, cmd="getstatus"):
    """Sends n queries back to back; returns how many were answered."""
    for _ in range(n):
        sock.sendto(oob(cmd), addr)
    return len(drain(sock, 0.5))


def scenario(env):
    oa = OAServer(env)
    relay = Relay(env, oa.addr)
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
    # ...and a token comes back after a second.
    time.sleep(1.1)
    check(query(a, relay.addr, "getstatus", timeout=2) is not None,
          "A not answered after the refill")
    # getchallenge is not a query: not limited.
    answered = 0
    for _ in range(3):
        if query(a, relay.addr, "getchallenge", timeout=1):
            answered += 1
    check(answered == 3, "getchallenge limited: %d/3" % answered)
    m = relay.metrics()
    check(m["rally_relay_query_sources"] == 2, "limiter sources: %r" % m["rally_relay_query_sources"])
    env.daemons_alive(relay, oa)


run(scenario)
