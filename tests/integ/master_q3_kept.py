#!/usr/bin/env python3
"""getservers / getserversExt answered from kept datagrams (master_q3.c),
with --verify-lists so each kept answer is also compared with a fresh build
inside the master (a difference ends it). A real OpenArena server (empty,
registered through the challenge), 300 scripted Quake 3 servers (empty,
occupied, full) and 12 ET servers; several protocols and filters, each
asked twice from different client addresses: the same datagrams, and the
servers the filter wants. A server that registers shows in the next answer
at once; an ET server that stops answering and flatlines, and servers past
--q3-ttl, are gone from it."""

import itertools

from harness import FakeQ3Server, Master, OAServer, check, q3_getservers, run, wait_for

_client_ip = itertools.count(1)


def info(proto, clients, maxc, gametype="0"):
    return {"protocol": str(proto), "sv_maxclients": str(maxc), "clients": str(clients),
            "gametype": gametype}


def ask(env, m, req):
    # A fresh client address per request: the throttle allows 4 in a row.
    n = next(_client_ip)
    c = env.udp("127.0.6.%d" % n)
    got, dgrams = q3_getservers(c, m.udp_addr, req)
    check(got is not None, "%s: no complete answer" % req)
    return sorted(got), dgrams


def scenario(env):
    m = Master(env, args=["--verify-lists", "--q3-challenge", "500", "--q3-ttl", "15000"],
               debug=False)
    oa = OAServer(env, dedicated=2, masters=["127.0.0.1:%d" % m.udp_addr[1]])
    m.wait_line(r"q3-listed server=127\.0\.0\.1:%d game=Quake3Arena protocol=71" % oa.addr[1], 20)
    q3 = []
    for i in range(300):
        clients = (0, 3, 8)[i % 3]
        s = FakeQ3Server(env, ip="127.0.5.%d" % (1 + i // 32), info=info(71, clients, 8))
        s.heartbeat(m.udp_addr)
        q3.append(s)
        if i % 60 == 59:
            wait_for(lambda: m.metrics()["rally_master_q3_servers"] == i + 2, 10,
                     "%d servers listed" % (i + 1))
    et = []
    for i in range(12):
        s = FakeQ3Server(env, ip="127.0.5.200", info=info(84, (0, 5, 20)[i % 3], 20,
                                                         ("2", "4")[i % 2]))
        s.heartbeat(m.udp_addr, "EnemyTerritory-1")
        et.append(s)
    wait_for(lambda: m.metrics()["rally_master_q3_servers"] == 313, 10, "313 servers listed")

    def addrs(servers):
        return sorted(s.addr for s in servers)
    occupied = [s for s in q3 if s.info["clients"] == "3"]
    empty = [s for s in q3 if s.info["clients"] == "0"] + [oa]  # OpenArena, no players
    full = [s for s in q3 if s.info["clients"] == "8"]
    cases = [
        ("getservers 71", occupied),
        ("getservers 71 empty", occupied + empty),
        ("getservers 71 empty full", q3 + [oa]),
        ("getservers 71 full ffa", occupied + full),
        ("getserversExt Quake3Arena 71", occupied),
        ("getserversExt Quake3Arena 71 ipv4 empty", occupied + empty),
        ("getserversExt Quake3Arena 71 ipv6", []),
        ("getservers 84", et),
        ("getservers 84 ctf", [s for s in et if s.info["gametype"] == "4"]),
        ("getservers 68", []),
    ]
    for req, want in cases:
        got1, d1 = ask(env, m, req)
        got2, d2 = ask(env, m, req)
        check(got1 == addrs(want), "%s: %d servers, want %d" % (req, len(got1), len(want)))
        check(d1 == d2, "%s: the two answers differ" % req)
    hits = m.metrics()['rally_master_q3_answers_kept_total{result="hit"}']
    check(hits >= len(cases), "kept answers used %d times" % hits)

    # A new server is in the next answer (the kept one is stale at once).
    new = FakeQ3Server(env, ip="127.0.5.201", info=info(71, 2, 8))
    new.heartbeat(m.udp_addr)
    wait_for(lambda: new.addr in ask(env, m, "getservers 71")[0], 5, "the new server listed")

    # An ET server that is gone: it stops answering, then flatlines.
    gone = et[1]
    gone.answer = False
    gone.heartbeat(m.udp_addr, "ETFlatline-1")
    wait_for(lambda: gone.addr not in ask(env, m, "getservers 84")[0], 5,
             "the flatlined server delisted")
    got, _ = ask(env, m, "getservers 84")
    check(got == addrs([s for s in et if s is not gone]), "ET after the flatline: %r" % got)

    # Past --q3-ttl: only the servers that heartbeat again stay.
    keep = q3[:5]
    def only_kept():
        for s in keep:
            s.heartbeat(m.udp_addr)
        return ask(env, m, "getservers 71 empty full")[0] == addrs(keep)
    wait_for(only_kept, 30, "the other servers to expire", interval=0.5)
    env.daemons_alive(m)


run(scenario)
