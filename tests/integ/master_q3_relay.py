#!/usr/bin/env python3
"""rally-relay in front of an OpenArena server in LAN mode (it heartbeats
nobody), heartbeating rally-master with QuakeArena-1: the master challenges
the relay's front address, the relay carries getinfo to the server and the
server's infoResponse back out of its public port, and the master lists the
relay's address, end to end. qstat (-q3m,71) gets that address from the
master and reads the real server's status through it. When the relay stops
it sends its flatline (ETFlatline-1); the master's getinfo to the front then
goes unanswered and the listing is gone within the challenge's validity."""

import time

from harness import Master, OAServer, Relay, check, q3_getservers, quakestat, run


def scenario(env):
    m = Master(env, args=["--q3-challenge", "1500"])
    oa = OAServer(env, dedicated=1)
    relay = Relay(env, oa.addr, args=["--master", "127.0.0.1:%d" % m.udp_addr[1],
                                      "--heartbeat-tag", "QuakeArena-1",
                                      "--heartbeat-interval", "2"])
    check(relay.addr != oa.addr, "addresses")

    m.wait_line(r"q3-listed server=127\.0\.0\.1:%d game=Quake3Arena protocol=71" % relay.addr[1], 20)
    check(not m.grep(r"q3-listed server=127\.0\.0\.1:%d " % oa.addr[1]),
          "the server's own address got listed")
    check(m.grep(r"heartbeat peer=127\.0\.0\.1:%d tag=QuakeArena-1 " % relay.addr[1]),
          "heartbeat not from the relay's public port")

    # qstat: the master hands out the relay's address, and the status read
    # through it is the real server's.
    n, servers = quakestat("-q3m,71", m.udp_addr, srcip="127.0.0.31")
    check(n == 1, "master gave %d servers" % n)
    check(len(servers) == 1, "servers: %r" % servers)
    check(servers[0][1] == "127.0.0.1:%d" % relay.addr[1],
          "listed %s, not the relay's %s:%d" % (servers[0][1], *relay.addr))
    check(servers[0][1] != "127.0.0.1:%d" % oa.addr[1], "listed the server itself")
    check(servers[0][2] == oa.hostname, "status through the relay: %r" % servers[0])

    # The relay's periodic heartbeats refresh the listing (2 s interval).
    start = len(m.output())
    m.wait_line(r"inforesponse peer=127\.0\.0\.1:%d .* listed=refresh" % relay.addr[1], 10,
                start=start)

    # The relay stops: flatline, unanswered getinfo, delisted.
    env.daemons_alive(m, relay, oa)
    t_stop = time.monotonic()
    check(relay.stop() == 0, "relay exit status")
    m.wait_line(r"heartbeat peer=127\.0\.0\.1:%d tag=ETFlatline-1 .*flatline=1 listed=1" %
                relay.addr[1], 5)
    m.wait_line(r"q3-delisted server=127\.0\.0\.1:%d game=Quake3Arena reason=flatline" %
                relay.addr[1], 5)
    check(time.monotonic() - t_stop < 5, "delisting took too long")
    s = env.udp("127.0.0.32")
    servers, _ = q3_getservers(s, m.udp_addr, "getservers 71 empty full")
    check(servers == [], "still listed after the flatline: %r" % servers)
    met = m.metrics()
    check(met['rally_master_q3_delisted_total{reason="flatline"}'] == 1, "flatline count")
    env.daemons_alive(m, oa)


run(scenario)
