#!/usr/bin/env python3
"""A real OpenArena server (dedicated 2, sv_master1 = rally-master's loopback
UDP address, the other four "") registers through the challenge: it
heartbeats QuakeArena-1 at map load, rally-master answers getinfo with a
fresh challenge, the infoResponse echoing it lists the server. qstat lists it
(-q3m,71 and -openarenam: OpenArena speaks protocol 71; plain -q3m asks for
Quake 3's 68 and, as with dpmaster, gets nothing). "rcon heartbeat" forces a
heartbeat and so a refresh, which keeps the server listed past the (shortened)
--q3-ttl; once the server stops answering, it is delisted when that time has
passed since its last infoResponse, not before."""

import signal
import time

from harness import (Failure, Master, OAServer, check, q3_getservers, query, quakestat, run,
                     wait_for)

TTL_MS = 6000


def scenario(env):
    m = Master(env, args=["--q3-ttl", str(TTL_MS), "--q3-challenge", "2000"])
    oa = OAServer(env, dedicated=2, masters=["127.0.0.1:%d" % m.udp_addr[1]])

    # The heartbeat at map load, the challenge, the listing.
    line = m.wait_line(r"q3-listed server=127\.0\.0\.1:%d game=Quake3Arena protocol=71" % oa.addr[1], 20)
    t_listed = time.monotonic()
    check(m.grep(r"heartbeat peer=127\.0\.0\.1:%d tag=QuakeArena-1 " % oa.addr[1]),
          "no QuakeArena-1 heartbeat from the server")
    met = m.metrics()
    check(met["rally_master_q3_servers"] == 1, "servers: %r" % met["rally_master_q3_servers"])
    check(met['rally_master_q3_sent_total{type="getinfo"}'] >= 1, "no getinfo sent")

    # qstat lists it, with what the real server says about itself.
    for kind, src in (("-q3m,71", "127.0.0.21"), ("-openarenam", "127.0.0.22")):
        n, servers = quakestat(kind, m.udp_addr, srcip=src)
        check(n == 1, "%s: master gave %d servers" % (kind, n))
        check(len(servers) == 1 and servers[0][1] == "127.0.0.1:%d" % oa.addr[1],
              "%s: %r" % (kind, servers))
        check(servers[0][2] == oa.hostname and servers[0][3] == "oa_dm1",
              "%s: not the real server's status: %r" % (kind, servers))
    n, servers = quakestat("-q3m", m.udp_addr, srcip="127.0.0.23")
    check(n == 0 and servers == [], "-q3m (protocol 68) listed a protocol 71 server: %r" % servers)
    check(m.grep(r"getservers peer=127\.0\.0\.21:\d+ game=Quake3Arena protocol=71 empty=1 "
                 r"full=1 gametype=\(any\) servers=1 packets=1"), "qstat's request not logged")

    # rcon heartbeat: a new heartbeat, a new infoResponse, a refresh. Done
    # every second it keeps the server listed well past the TTL.
    c = env.udp()
    refreshes = 0
    while time.monotonic() - t_listed < TTL_MS / 1000.0 + 2:
        # A starved server (a "Hitch warning" on a loaded machine) may let
        # one getinfo go unanswered: heartbeat again, within the TTL.
        for attempt in range(3):
            start = len(m.output())
            check(query(c, oa.addr, "rcon %s heartbeat" % oa.rcon, timeout=2) is not None,
                  "no answer to rcon")
            try:
                m.wait_line(r"inforesponse peer=127\.0\.0\.1:%d game=Quake3Arena protocol=71 .* "
                            r"listed=refresh" % oa.addr[1], 1.5, start=start)
                break
            except Failure:
                if attempt == 2:
                    raise
        t_refresh = time.monotonic()
        refreshes += 1
        check(m.metrics()["rally_master_q3_servers"] == 1, "delisted while answering")
        wait_for(lambda: time.monotonic() - t_refresh >= 1.0, 2, "the next round")
    check(refreshes >= 6, "only %d refreshes" % refreshes)
    check(m.metrics()["rally_master_q3_listed_total"] == 1, "listed more than once")

    # The server stops answering: still listed until the TTL has passed
    # since the last infoResponse, then gone.
    oa.signal(signal.SIGSTOP)
    env.cleanups.append(lambda: oa.signal(signal.SIGCONT))
    s = env.udp("127.0.0.24")
    servers, _ = q3_getservers(s, m.udp_addr, "getservers 71 empty full")
    check(servers == [("127.0.0.1", oa.addr[1])], "not listed right after it stopped: %r" % servers)
    m.wait_line(r"q3-delisted server=127\.0\.0\.1:%d game=Quake3Arena reason=expired" % oa.addr[1],
                TTL_MS / 1000.0 + 3)
    gone = time.monotonic() - t_refresh
    check(gone >= TTL_MS / 1000.0 - 0.3, "delisted %.2fs after its last refresh (ttl %ds)" %
          (gone, TTL_MS // 1000))
    servers, _ = q3_getservers(s, m.udp_addr, "getservers 71 empty full")
    check(servers == [], "still listed: %r" % servers)
    n, _ = quakestat("-openarenam", m.udp_addr, srcip="127.0.0.25")
    check(n == 0, "qstat still gets %d servers" % n)
    met = m.metrics()
    check(met["rally_master_q3_servers"] == 0, "servers gauge")
    check(met['rally_master_q3_delisted_total{reason="expired"}'] == 1, "expired count")
    check(line is not None, "listing")
    oa.signal(signal.SIGCONT)
    env.daemons_alive(m, oa)


run(scenario)
