#!/usr/bin/env python3
"""getservers and getserversExt on the wire. 250 listed servers (8 IPs)
come back in datagrams of at most 1,400 bytes with the EOT mark only at the
end of the last (196 entries fit one); getserversExt carries the same in
its own header. ET clients get empty and full servers without asking, Quake
3 clients only when they ask; gametype filters and their shortcuts pick
servers; DarkPlaces games are asked by name. A master on [::1] lists IPv6
servers with '/' entries, to getserversExt only."""

import socket

from harness import FakeQ3Server, Master, check, q3_getservers, run, wait_for


def info(proto, clients, maxc, gametype=None, gamename=None):
    d = {"protocol": str(proto), "sv_maxclients": str(maxc), "clients": str(clients)}
    if gametype is not None:
        d["gametype"] = gametype
    if gamename is not None:
        d["gamename"] = gamename
    return d


def scenario(env):
    m = Master(env, debug=False)
    servers = []
    for i in range(250):
        s = FakeQ3Server(env, ip="127.0.3.%d" % (1 + i // 32), info=info(71, 1, 8))
        s.heartbeat(m.udp_addr)
        servers.append(s)
        if i % 50 == 49:
            wait_for(lambda: m.metrics()["rally_master_q3_servers"] == i + 1, 10,
                     "%d servers listed" % (i + 1))
    want = sorted(s.addr for s in servers)

    c = env.udp("127.0.0.91")
    got, dgrams = q3_getservers(c, m.udp_addr, "getservers 71")
    check(got is not None and sorted(got) == want, "getservers: %d of 250" % len(got or []))
    check(len(dgrams) == 2 and len(dgrams[0]) == 22 + 196 * 7 and
          len(dgrams[1]) == 22 + 54 * 7 + 7, "datagram sizes: %r" % [len(d) for d in dgrams])
    got, dgrams = q3_getservers(c, m.udp_addr, "getserversExt Quake3Arena 71")
    check(got is not None and sorted(got) == want, "getserversExt: %d of 250" % len(got or []))
    check(len(dgrams) == 2 and all(len(d) <= 1400 for d in dgrams), "ext sizes")

    # ET (send-empty-servers, send-full-servers) and Quake 3 (neither).
    et_empty = FakeQ3Server(env, ip="127.0.0.92", info=info(84, 0, 20, "2"))
    et_full = FakeQ3Server(env, ip="127.0.0.92", info=info(84, 20, 20, "4"))
    et_some = FakeQ3Server(env, ip="127.0.0.92", info=info(84, 5, 20, "4", "et"))
    q3_empty = FakeQ3Server(env, ip="127.0.0.93", info=info(68, 0, 8, "0"))
    q3_full = FakeQ3Server(env, ip="127.0.0.93", info=info(68, 8, 8, "4"))
    xon = FakeQ3Server(env, ip="127.0.0.93", info=info(3, 2, 16, "dm", "Xonotic"))
    for s in (et_empty, et_full, et_some):
        s.heartbeat(m.udp_addr, "EnemyTerritory-1")
    for s in (q3_empty, q3_full):
        s.heartbeat(m.udp_addr, "QuakeArena-1")
    xon.heartbeat(m.udp_addr, "DarkPlaces")
    wait_for(lambda: m.metrics()["rally_master_q3_servers"] == 256, 5, "the other games")

    c2 = env.udp("127.0.0.94")
    c3 = env.udp("127.0.0.95")
    cases = [
        (c2, "getservers 84", [et_empty, et_full, et_some]),
        (c2, "getservers 84 ctf", [et_full, et_some]),
        (c2, "getserversExt et 84 gametype=2", [et_empty]),
        (c2, "getservers 68", []),
        (c3, "getservers 68 empty", [q3_empty]),
        (c3, "getservers 68 empty full ffa", [q3_empty]),
        (c3, "getservers 68 full", [q3_full]),
        (c3, "getservers Xonotic 3", [xon]),
    ]
    for sock, req, expect in cases:
        got, _ = q3_getservers(sock, m.udp_addr, req)
        check(got is not None and sorted(got) == sorted(s.addr for s in expect),
              "%s: %r, want %r" % (req, got, [s.addr for s in expect]))
    c4 = env.udp("127.0.0.96")
    for req in ("getservers 3 empty full", "getserversExt Xonotic 4", "getservers 99 empty full"):
        got, _ = q3_getservers(c4, m.udp_addr, req)
        check(got == [], "%s: %r" % (req, got))

    # IPv6: a master on [::1].
    if not socket.has_ipv6:
        return
    m6 = Master(env, args=["--udp", "[::1]:0"], name="master6")
    check(m6.udp_addr[0] == "::1", "bound %r" % (m6.udp_addr,))
    s6 = FakeQ3Server(env, ip="::1", info=info(71, 1, 8, gamename="Quake3Arena"))
    s6.heartbeat(m6.udp_addr)
    wait_for(lambda: m6.metrics()["rally_master_q3_servers"] == 1, 5, "the IPv6 server")
    c6 = env.udp("::1", socket.AF_INET6)
    got, dgrams = q3_getservers(c6, m6.udp_addr, "getserversExt Quake3Arena 71")
    check(got == [("::1", s6.addr[1])], "getserversExt over IPv6: %r" % got)
    check(dgrams[0][len(b"\xff\xff\xff\xffgetserversExtResponse"):][:1] == b"/", "a '/' entry")
    got, _ = q3_getservers(c6, m6.udp_addr, "getserversExt Quake3Arena 71 ipv4")
    check(got == [], "ipv4 only: %r" % got)
    got, _ = q3_getservers(c6, m6.udp_addr, "getservers 71 empty full")
    check(got == [], "getservers carries no IPv6: %r" % got)
    env.daemons_alive(m, m6)


run(scenario)
