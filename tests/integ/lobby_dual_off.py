#!/usr/bin/env python3
"""tpf2mp_tcp_backup.txt switches the dual TCP link off, and then the loss
shows: lobby_dual.py's setting (netsim loss=0.2 on what both sides send,
game bridges both ways) with the file saying "0" in the host's io dir and
" off\\n" in the joiner's (netpunch strips the text and compares). Both
lobbies say the link is off, no link comes up, no frame arrives twice
(nothing is replayed), and of 300 game frames each way about a fifth are
lost: the link is what saved them in lobby_dual.py."""

import os
import re

from harness import Bridge, Lobby, check, run

FRAMES = 300


def io_dir(env, name, switch):
    d = os.path.join(env.dir, "io-" + name)
    os.makedirs(d)
    with open(os.path.join(d, "tpf2mp_netsim.txt"), "w") as f:
        f.write("loss=0.2\n")
    with open(os.path.join(d, "tpf2mp_tcp_backup.txt"), "w") as f:
        f.write(switch)
    return d


def scenario(env):
    hb = Bridge(env, 1, send=FRAMES, rate=100, duration_ms=8000, name="bridge-alice",
                wait_go=True)
    host = Lobby(env, "host", name="alice", io=io_dir(env, "alice", "0"),
                 args=["--game-local-port", str(hb.port)])
    hb.connect(host)
    code = host.wait_code()
    host.wait_line(r'dual-off reason="tpf2mp_tcp_backup\.txt says so"')
    jb = Bridge(env, 2, send=FRAMES, rate=100, duration_ms=8000, name="bridge-bob", wait_go=True)
    bob = Lobby(env, "join", code=code, name="bob", io=io_dir(env, "bob", " off\n"),
                args=["--game-local-port", str(jb.port)])
    jb.connect(bob)
    bob.wait_status("connected", "^joined the host$", timeout=30)
    bob.wait_line(r'dual-off reason="tpf2mp_tcp_backup\.txt says so"')
    hb.go()
    jb.go()
    rh, rj = hb.result(), jb.result()
    got_h, got_j = rh["from"].get(2, {}), rj["from"].get(1, {})
    env.log("frames joiner->host %s, host->joiner %s (of %d)" % (got_h, got_j, FRAMES))
    check(rh.get("sent") == FRAMES and rj.get("sent") == FRAMES, "bridges sent %r %r" % (rh, rj))
    # 20 % loss over 300 frames: 240 expected, 300 all but impossible
    # (0.8^300), fewer than 180 as unlikely (over 8 standard deviations).
    for got, what in ((got_h, "bob's frames at the host"), (got_j, "alice's frames at bob")):
        check(got.get("dup") == 0, "%s came twice: %r" % (what, got))
        check(180 <= got.get("frames", 0) < FRAMES, "%s: %r" % (what, got))
    for who in (host, bob):
        check(not who.grep(r"dual-link-up|dual-stats"), "%s has a link" % who.name)
    bob.command(cmd="quit")
    check(bob.wait_exit(10) == 0, "bob's exit status")
    host.command(cmd="quit")
    check(host.wait_exit(10) == 0, "the host's exit status")
    for who in (host, bob):
        m = who.grep(r"exit status=\d+ .* replayed=(\d+)")
        check(m and re.search(r"replayed=0$", m[-1]), "%s replayed something: %r" % (who.name, m))
        check(not who.grep(r"dual-exit"), "%s ran a dual link" % who.name)


run(scenario)
