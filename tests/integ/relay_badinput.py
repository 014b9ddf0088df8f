#!/usr/bin/env python3
"""Bad datagrams: empty, 1 byte, the four 0xff bytes alone, the largest UDP
datagram IPv4 carries (65,507 bytes), and thousands of random ones. Each has a
counted outcome and the relay keeps serving real queries."""

import os
import random
import socket

from harness import OAServer, Relay, check, drain, query, run, wait_rx_drained


def scenario(env):
    oa = OAServer(env)
    relay = Relay(env, oa.addr, debug=False)
    c = env.udp()

    base = relay.metrics()

    def delta(name):
        return relay.metrics().get(name, 0) - base.get(name, 0)

    c.sendto(b"", relay.addr)
    c.sendto(b"\x01", relay.addr)
    c.sendto(b"\xff\xff\xff", relay.addr)
    c.sendto(b"\xff\xff\xff\xff", relay.addr)          # empty command
    c.sendto(b"\xff\xff\xff\xff\n\n", relay.addr)      # empty line
    c.sendto(b"\xff\xff\xff\xff" + b"A" * 5000, relay.addr)  # one huge unknown token
    check(query(c, relay.addr, "getinfo", timeout=2) is not None, "relay stopped answering")
    check(delta('rally_relay_drops_total{reason="malformed"}') == 3,
          "malformed: %s" % delta('rally_relay_drops_total{reason="malformed"}'))
    check(delta('rally_relay_drops_total{reason="filtered"}') == 3,
          "filtered: %s" % delta('rally_relay_drops_total{reason="filtered"}'))

    # The largest datagram: in-game traffic passes as is (the server drops it).
    big = bytes([0x41]) * 65507
    c.sendto(big, relay.addr)
    # And one out-of-band getstatus padded to the maximum: still a query,
    # answered by the query cache (the line ends at the newline: no
    # challenge).
    answers0 = delta('rally_relay_query_cache_answers_total{kind="getstatus"}')
    c.sendto(b"\xff\xff\xff\xffgetstatus\n" + b"x" * (65507 - 14), relay.addr)
    got = drain(c, 0.5)
    check(any(d.startswith(b"\xff\xff\xff\xffstatusResponse\n\\") for d, _ in got),
          "the padded getstatus was not answered: %r" % [d[:30] for d, _ in got])
    check(delta('rally_relay_query_cache_answers_total{kind="getstatus"}') == answers0 + 1,
          "the padded getstatus was not answered by the cache")
    check(delta('rally_relay_bytes_total{direction="to_server"}') >= 65507,
          "65,507-byte datagram not forwarded: %s" % delta('rally_relay_bytes_total{direction="to_server"}'))

    # Random garbage from many sources, some with the OOB prefix.
    rnd = random.Random(20261130)
    socks = [env.udp() for _ in range(8)]
    for i in range(3000):
        n = rnd.choice([0, 1, 3, 4, 5, 17, 64, 300, 1400, 9000])
        payload = bytes(rnd.getrandbits(8) for _ in range(n))
        if i % 3 == 0:
            payload = b"\xff\xff\xff\xff" + payload
        socks[i % 8].sendto(payload, relay.addr)
        if i % 100 == 99:
            # Paced on the relay: a kernel buffer overflow would not be the relay's.
            wait_rx_drained(relay.addr, 10, "the relay to read the garbage so far")
    for s in socks:
        drain(s, 0.05)
    check(query(c, relay.addr, "getstatus", timeout=2) is not None, "relay stopped answering after garbage")
    m = relay.metrics()
    total_in = 3000 + 6 + 2 + 2
    # Every datagram went to the server, was dropped, or was a query the
    # cache answered or refused.
    accounted = (m['rally_relay_packets_total{direction="to_server"}'] +
                 sum(v for k, v in m.items() if k.startswith("rally_relay_drops_total")) +
                 sum(v for k, v in m.items() if k.startswith("rally_relay_query_cache_answers_total")) +
                 sum(v for k, v in m.items() if k.startswith("rally_relay_query_cache_refusals_total")))
    check(accounted >= total_in - 5, "datagrams unaccounted: %d of %d" % (accounted, total_in))
    env.daemons_alive(relay, oa)


run(scenario)
