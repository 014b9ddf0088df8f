#!/usr/bin/env python3
"""The per-address cap (dpmaster servers.c, 32 per IP, pending challenges
included): 33 servers on one IP heartbeat; 32 get a challenge and are
listed, the 33rd gets no getinfo at all and stays unlisted. The listed ones
still refresh, another IP is not affected, and a getservers returns all 33
that are listed. When one of the 32 goes (it stops answering and its
listing expires), the 33rd gets its slot."""

import time

from harness import FakeQ3Server, Master, check, q3_getservers, run, wait_for

TTL_MS = 4000


def scenario(env):
    m = Master(env, args=["--q3-ttl", str(TTL_MS)])
    servers = [FakeQ3Server(env, ip="127.0.0.60") for _ in range(33)]
    for s in servers[:32]:
        s.heartbeat(m.udp_addr)
    wait_for(lambda: m.metrics()["rally_master_q3_servers"] == 32, 5, "32 servers listed")
    servers[32].heartbeat(m.udp_addr)
    wait_for(lambda: m.metrics()['rally_master_q3_drops_total{reason="address_cap"}'] == 1, 5,
             "the 33rd refused")
    m.wait_line(r"reject peer=127\.0\.0\.60:%d msg=heartbeat reason=address_cap" %
                servers[32].addr[1])
    check(not servers[32].challenges, "the 33rd got a getinfo: %r" % servers[32].challenges)

    # The listed ones refresh; another IP lists.
    start = len(m.output())
    servers[0].heartbeat(m.udp_addr)
    m.wait_line(r"inforesponse peer=127\.0\.0\.60:%d .* listed=refresh" % servers[0].addr[1], 5,
                start=start)
    other = FakeQ3Server(env, ip="127.0.0.61")
    other.heartbeat(m.udp_addr)
    wait_for(lambda: m.metrics()["rally_master_q3_servers"] == 33, 5, "the other IP's server")
    got, dgrams = q3_getservers(env.udp("127.0.0.62"), m.udp_addr, "getservers 71 empty full")
    want = sorted([s.addr for s in servers[:32]] + [other.addr])
    check(sorted(got) == want, "getservers: %d servers, want 33" % len(got or []))
    check(len(dgrams) == 1, "33 entries fit one datagram")

    # Server 1 stops answering; the others keep refreshing; once its
    # listing expires its slot is free for the 33rd.
    servers[1].answer = False
    t0 = time.monotonic()
    while m.metrics()["rally_master_q3_servers"] == 33:
        check(time.monotonic() - t0 < TTL_MS / 1000.0 + 5, "server 1 never expired")
        t_round = time.monotonic()
        for s in servers[:32] + [other]:
            if s is not servers[1]:
                s.heartbeat(m.udp_addr)
        # A round a second: the others refresh well inside the TTL.
        wait_for(lambda: time.monotonic() - t_round >= 1.0 or
                 m.metrics()["rally_master_q3_servers"] < 33, 2, "the next round")
    m.wait_line(r"q3-delisted server=127\.0\.0\.60:%d game=Quake3Arena reason=expired" %
                servers[1].addr[1], 1)
    check(m.metrics()["rally_master_q3_servers"] == 32, "only server 1 expired")
    servers[32].heartbeat(m.udp_addr)
    wait_for(lambda: servers[32].challenges, 5, "the 33rd's challenge now")
    wait_for(lambda: m.metrics()["rally_master_q3_servers"] == 33, 5, "the 33rd listed")
    env.daemons_alive(m)


run(scenario)
