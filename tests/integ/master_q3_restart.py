#!/usr/bin/env python3
"""A restart does not empty the Q3 list: listed servers go into the
registry snapshot (address, game, protocol, gametype, clients) and come back
listed, with their filters, before any of them heartbeats again; their age
carries over, so they expire when --q3-ttl has passed since their last
infoResponse before the restart, and a restored server refreshes and
flatlines like any other."""

import json
import os
import time

from harness import FakeQ3Server, Master, check, q3_getservers, run, wait_for

TTL_MS = 8000


def scenario(env):
    state = os.path.join(env.dir, "state")
    args = ["--q3-ttl", str(TTL_MS), "--q3-challenge", "1000"]
    m = Master(env, args=args, state_dir=state)
    q3 = FakeQ3Server(env, info={"protocol": "71", "sv_maxclients": "8", "clients": "0",
                                 "gametype": "4"})
    et = FakeQ3Server(env, info={"protocol": "84", "sv_maxclients": "20", "clients": "20"})
    q3.heartbeat(m.udp_addr, "QuakeArena-1")
    et.heartbeat(m.udp_addr, "EnemyTerritory-1")
    wait_for(lambda: m.metrics()["rally_master_q3_servers"] == 2, 5, "both listed")
    t_listed = time.monotonic()
    check(m.stop() == 0, "master exit status")

    with open(os.path.join(state, "registry.json")) as f:
        snap = json.load(f)
    rows = {r["addr"]: r for r in snap["kinds"]["q3"]}
    check(set(rows) == {"127.0.0.1:%d" % q3.addr[1], "127.0.0.1:%d" % et.addr[1]},
          "snapshot rows: %r" % rows)
    r = rows["127.0.0.1:%d" % et.addr[1]]
    check(r["game"] == "et" and r["protocol"] == 84 and r["clients"] == 20 and
          r["maxclients"] == 20 and r["anon"] is True and r["gametype"] == "0", "et row: %r" % r)

    n_q3, n_et = len(q3.challenges), len(et.challenges)
    m2 = Master(env, args=args, state_dir=state, name="master2")
    m2.wait_line(r"snapshot-loaded file=\S+ entries=2")
    c = env.udp("127.0.0.111")
    for req, want in (("getservers 71 empty ctf", [q3.addr]),   # gametype kept
                      ("getservers 84", [et.addr]),             # ET, full, anonymous
                      ("getserversExt Quake3Arena 71 empty", [q3.addr])):
        got, _ = q3_getservers(c, m2.udp_addr, req)
        check(got == want, "after restart, %s: %r" % (req, got))
    check(len(q3.challenges) == n_q3 and len(et.challenges) == n_et,
          "the restored servers were challenged again")

    # The ET one flatlines for real; the Q3 one stays silent and expires
    # when the TTL has passed since its listing before the restart.
    et.answer = False
    et.heartbeat(m2.udp_addr, "ETFlatline-1")
    m2.wait_line(r"q3-delisted server=127\.0\.0\.1:%d game=et reason=flatline" % et.addr[1], 5)
    m2.wait_line(r"q3-delisted server=127\.0\.0\.1:%d game=Quake3Arena reason=expired" %
                 q3.addr[1], TTL_MS / 1000.0 + 3)
    gone = time.monotonic() - t_listed
    check(TTL_MS / 1000.0 - 0.5 <= gone <= TTL_MS / 1000.0 + 2.5,
          "restored listing expired %.2fs after it was listed" % gone)
    env.daemons_alive(m2)


run(scenario)
