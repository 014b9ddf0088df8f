#!/usr/bin/env python3
"""Flatline heartbeats. A flatline only delists a server once the getinfo
it triggers goes unanswered, so a spoofed one cannot delist a live server:
here an attacker with a raw socket sends ETFlatline-1 "from" a real
OpenArena server's address; the master's getinfo reaches the real server,
which answers, and it stays listed past the challenge's validity. A server
that really is gone (a scripted ET server that stops answering, then sends
its flatline) is delisted within that validity. A flatline from an address
that is not listed gets no getinfo at all."""

import time

from harness import (OOB, FakeQ3Server, Master, OAServer, check, q3_getservers, run,
                     udp_spoof, wait_for)

CHALLENGE_MS = 1500


def scenario(env):
    m = Master(env, args=["--q3-challenge", str(CHALLENGE_MS)])
    oa = OAServer(env, dedicated=2, masters=["127.0.0.1:%d" % m.udp_addr[1]])
    m.wait_line(r"q3-listed server=127\.0\.0\.1:%d " % oa.addr[1], 20)

    # The spoofed flatline: same source address and port as the server.
    start = len(m.output())
    udp_spoof(oa.addr, m.udp_addr, OOB + b"heartbeat ETFlatline-1\n")
    m.wait_line(r"heartbeat peer=127\.0\.0\.1:%d tag=ETFlatline-1 game=et flatline=1 listed=1" %
                oa.addr[1], 5, start=start)
    # The real server answers the getinfo that followed.
    m.wait_line(r"inforesponse peer=127\.0\.0\.1:%d game=Quake3Arena .* listed=refresh" %
                oa.addr[1], 5, start=start)
    t = time.monotonic()
    wait_for(lambda: time.monotonic() - t > CHALLENGE_MS / 1000.0 + 0.5, 5,
             "the challenge's validity to pass")
    check(m.metrics()['rally_master_q3_delisted_total{reason="flatline"}'] == 0,
          "a spoofed flatline delisted a live server")
    c = env.udp("127.0.0.71")
    servers, _ = q3_getservers(c, m.udp_addr, "getservers 71 empty full")
    check(servers == [oa.addr], "after the spoofed flatline: %r" % servers)

    # A real departure: listed, then silent, then its flatline.
    et = FakeQ3Server(env, ip="127.0.0.72", info={"protocol": "84", "sv_maxclients": "20",
                                                  "clients": "3", "gamename": "et"})
    et.heartbeat(m.udp_addr, "EnemyTerritory-1")
    wait_for(lambda: m.metrics()["rally_master_q3_servers"] == 2, 5, "the ET server listed")
    servers, _ = q3_getservers(c, m.udp_addr, "getservers 84")
    check(servers == [et.addr], "ET listing: %r" % servers)
    et.answer = False
    t_fl = time.monotonic()
    et.heartbeat(m.udp_addr, "ETFlatline-1")
    m.wait_line(r"q3-delisted server=127\.0\.0\.72:%d game=et reason=flatline" % et.addr[1],
                CHALLENGE_MS / 1000.0 + 2)
    took = time.monotonic() - t_fl
    check(took >= CHALLENGE_MS / 1000.0 - 0.3, "delisted after %.2fs, before the getinfo "
          "could have been answered" % took)
    check(len(et.challenges) == 2, "getinfos to the ET server: %r" % et.challenges)
    servers, _ = q3_getservers(env.udp("127.0.0.73"), m.udp_addr, "getservers 84")
    check(servers == [], "still listed: %r" % servers)

    # A flatline from an address that is not listed: ignored, no getinfo.
    stranger = FakeQ3Server(env, ip="127.0.0.74")
    stranger.heartbeat(m.udp_addr, "ETFlatline-1")
    wait_for(lambda: m.metrics()['rally_master_q3_drops_total{reason="flatline_unlisted"}'] == 1,
             5, "the stranger's flatline")
    check(not stranger.challenges, "getinfo sent to a stranger")
    met = m.metrics()
    check(met['rally_master_q3_delisted_total{reason="flatline"}'] == 1, "flatline delistings")
    check(met["rally_master_q3_servers"] == 1, "the OpenArena server is still listed")
    env.daemons_alive(m, oa)


run(scenario)
