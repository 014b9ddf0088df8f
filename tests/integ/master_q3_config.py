#!/usr/bin/env python3
"""--q3-game declares more games. A bad spec stops the start with a message
naming the spec and what is wrong (no ready line, exit status 1); two games
claiming one heartbeat tag too. A good one works end to end: its heartbeat
tag lists servers under its name, its protocols map anonymous getservers to
it (taken over from the built-in Quake3Arena), its options apply."""

from harness import FakeQ3Server, Master, check, q3_getservers, run, wait_for


def scenario(env):
    bad = [
        ("nocolon", r'q3-game-invalid spec="nocolon" error="expected NAME:heartbeat=TAG'),
        ("g:protocols=71", r'error="heartbeat=TAG is required"'),
        ("g:heartbeat=G-1,protocols=7x", r"error=\"protocols: '7x' is not a number\""),
        ("g:heartbeat=G-1,options=send-all", r"error=\"options: 'send-all' is not"),
        ("g:heartbeat=G-1,colour=red", r"error=\"unknown property 'colour'"),
        ("g:heartbeat=DarkPlaces", r"error=\"heartbeat: DarkPlaces is the generic heartbeat"),
        ("g:heartbeat=QuakeArena-1", r'error="tag QuakeArena-1 is used by Quake3Arena and g"'),
    ]
    for spec, msg in bad:
        p = Master(env, args=["--q3-game", spec], wait_ready=False, name="bad")
        status = p.wait_exit(10)
        check(status == 1, "%s: exit status %s" % (spec, status))
        check(p.grep(msg), "%s: no message /%s/ in %r" % (spec, msg, p.output()))
        check(not p.grep(r"^ready "), "%s: it got ready" % spec)

    m = Master(env, args=["--q3-game", "openarena:heartbeat=OA-1,flatline=OA-0,protocols=71/72,"
                                        "options=send-empty-servers"])
    s = FakeQ3Server(env, info={"protocol": "71", "sv_maxclients": "8", "clients": "0"})
    s.heartbeat(m.udp_addr, "OA-1")
    m.wait_line(r"q3-listed server=127\.0\.0\.1:%d game=openarena protocol=71" % s.addr[1], 5)
    c = env.udp("127.0.0.101")
    for req, want in (("getservers 71", [s.addr]),  # mapped, empty sent unasked
                      ("getserversExt openarena 71", [s.addr]),
                      ("getserversExt Quake3Arena 71 empty full", []),
                      ("getservers 72 empty full", [])):
        got, _ = q3_getservers(c, m.udp_addr, req)
        check(got == want, "%s: %r, want %r" % (req, got, want))
    # Its flatline tag works like ET's.
    s.answer = False
    s.heartbeat(m.udp_addr, "OA-0")
    m.wait_line(r"q3-delisted server=127\.0\.0\.1:%d game=openarena reason=flatline" % s.addr[1], 5)
    wait_for(lambda: m.metrics()["rally_master_q3_servers"] == 0, 2, "the delisting")
    env.daemons_alive(m)


run(scenario)
