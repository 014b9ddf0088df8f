#!/usr/bin/env python3
"""The listing check against an IPv6 master. rally-relay's front is on ::1
(the OpenArena server behind it stays on 127.0.0.1), rally-master's Q3
side on [::1]: the relay heartbeats it over IPv6, the master lists
[::1]:front, and the check asks "getserversExt Quake3Arena 71 empty full
ipv4 ipv6" (getservers would list IPv4 servers only; the game name comes
from the server's infoResponse) and finds the '/' entry. The master
forgets servers after 5 s: the loss and the regain show over IPv6 too."""

import re

from harness import Master, OAServer, Relay, check, http, run


def scenario(env):
    m = Master(env, args=["--udp", "[::1]:0", "--q3-challenge", "1500", "--q3-ttl", "5000"])
    check(m.udp_addr[0] == "::1", "master on ::1: %r" % (m.udp_addr,))
    oa = OAServer(env, dedicated=1)
    relay = Relay(env, oa.addr, args=[
        "--listen", "[::1]:0", "--master", "[::1]:%d" % m.udp_addr[1],
        "--heartbeat-tag", "QuakeArena-1", "--heartbeat-interval", "300",
        "--listing-interval", "3", "--listing-delay", "500", "--listing-timeout", "1000"])
    check(relay.addr[0] == "::1", "front on ::1: %r" % (relay.addr,))
    name = "::1:%d" % m.udp_addr[1]
    front = "[::1]:%d" % relay.addr[1]

    m.wait_line(r"q3-listed server=%s game=Quake3Arena protocol=71" % re.escape(front), 20)
    relay.wait_line(r"listing-confirmed master=%s match=bind_address seen-as=%s$" %
                    (re.escape(name), re.escape(front)), 20)
    st, body, _ = http("GET", relay.url("/healthz"))
    check(st == 200, "healthz %s" % st)
    row = body["listing"]["masters"][0]
    check(row["request"] == "getserversExt Quake3Arena 71 empty full ipv4 ipv6",
          "request: %r" % row)
    check(row["address"] == "[::1]:%d" % m.udp_addr[1], "address: %r" % row)
    check(row["listed"] is True and row["seen_as"] == front and row["servers"] == 1, "row: %r" % row)
    check(m.metrics()['rally_master_q3_packets_total{type="getserversext"}'] >= 1,
          "the master saw getserversExt")

    start = len(relay.output())
    m.wait_line(r"q3-delisted server=%s game=Quake3Arena reason=expired" % re.escape(front), 15)
    relay.wait_line(r"listing-lost master=%s reason=not_listed rule=bind_address" % re.escape(name),
                    10, start=start)
    relay.wait_line(r"listing-regained master=%s match=bind_address seen-as=%s " %
                    (re.escape(name), re.escape(front)), 15, start=start)
    met = relay.metrics()
    check(met['rally_relay_master_listed{master="%s"}' % name] in (0, 1), "listed metric")
    check(met['rally_relay_master_listing_checks_total{master="%s",outcome="not_listed"}' % name]
          >= 1, "not_listed counted")
    env.daemons_alive(m, relay, oa)
    check(relay.stop() == 0, "relay exit status")


run(scenario)
