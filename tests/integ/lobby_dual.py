#!/usr/bin/env python3
"""The dual TCP backup link saves what a lossy path loses (netpunch-wire.md
§13, §14).

A host and a joiner on loopback, each with netsim dropping 20 % of what it
sends (tpf2mp_netsim.txt loss=0.2 in both io dirs), game bridges on both
sides. The link comes up (both sides log it; it is on by default in a
sealed session), then 300 game frames each way and 10 chats each way all
arrive, exactly once: the frames are single copies, so without the link
about 60 each way would be lost (lobby_dual_off.py shows that), and the
joiner's chats are single copies too. The stats lines say why: on each
side frames that came over TCP only (tcp_only: UDP lost them), the copy
that came second dropped by the replay window (replayed in the exit
counters), no queue drops."""

import os
import re

from harness import Bridge, Lobby, check, run, wait_for

FRAMES = 300
CHATS = 10
LOSS = 0.2


def io_dir(env, name):
    d = os.path.join(env.dir, "io-" + name)
    os.makedirs(d)
    with open(os.path.join(d, "tpf2mp_netsim.txt"), "w") as f:
        f.write("loss=%s\n" % LOSS)
    return d


def stats(lobby, name):
    """The counters of the last dual-stats line about name, or None."""
    lines = lobby.grep(r'dual-stats .* name="%s" ' % re.escape(name))
    if not lines:
        return None
    return {k: int(v) for k, v in re.findall(r" (\w+)=(\d+)(?= |$)", lines[-1])}


def exit_counters(lobby):
    m = lobby.grep(r"exit status=\d+ .* replayed=(\d+)")
    check(m, "%s printed no exit counters" % lobby.name)
    return int(re.search(r"replayed=(\d+)", m[-1]).group(1))


def scenario(env):
    hb = Bridge(env, 1, send=FRAMES, rate=100, duration_ms=8000, name="bridge-alice",
                wait_go=True)
    host = Lobby(env, "host", name="alice", io=io_dir(env, "alice"),
                 args=["--game-local-port", str(hb.port)])
    hb.connect(host)
    code = host.wait_code()
    host.wait_line(r"netsim loss=0\.200")
    host.wait_line(r"dual-on side=host")
    jb = Bridge(env, 2, send=FRAMES, rate=100, duration_ms=8000, name="bridge-bob", wait_go=True)
    bob = Lobby(env, "join", code=code, name="bob", io=io_dir(env, "bob"),
                args=["--game-local-port", str(jb.port)])
    jb.connect(bob)
    # 20 % of the host's HELLO answers, welcomes and rosters are lost:
    # joining may take a ping period or two.
    bob.wait_status("connected", "^joined the host$", timeout=30)
    bob.wait_line(r"netsim loss=0\.200")
    up_h = host.wait_line(r'dual-link-up peer=\S+ name="bob" tcp=\S+ how="(joiner|host) connected"',
                          timeout=10)
    up_j = bob.wait_line(r'dual-link-up peer=\S+ name="alice" tcp=\S+ how="(joiner|host) connected"',
                         timeout=10)
    # Both ends name the same attempt: whoever connected made it.
    check(up_h.group(1) == up_j.group(1), "the two ends disagree on how: %s / %s" % (
        up_h.group(0), up_j.group(0)))

    hb.go()
    jb.go()
    for i in range(CHATS):
        host.command(cmd="chat", text="alice %d" % i)
        bob.command(cmd="chat", text="bob %d" % i)
    rh, rj = hb.result(), jb.result()
    env.log("frames joiner->host %s, host->joiner %s" % (rh["from"].get(2), rj["from"].get(1)))
    check(rh.get("sent") == FRAMES and rj.get("sent") == FRAMES, "bridges sent %r %r" % (rh, rj))
    check(rh["from"].get(2) == {"frames": FRAMES, "dup": 0},
          "the host's game got %r of bob's %d frames" % (rh["from"].get(2), FRAMES))
    check(rj["from"].get(1) == {"frames": FRAMES, "dup": 0},
          "bob's game got %r of alice's %d frames" % (rj["from"].get(1), FRAMES))

    for who in (host, bob):
        for sender in ("alice", "bob"):
            for i in range(CHATS):
                text = "%s %d" % (sender, i)
                wait_for(lambda: [e for e in who.events("chat") if e["text"] == text], 10,
                         "%s to see %r" % (who.name, text))
    # Every chat once (a joiner's chat is one datagram; the host's three
    # copies are one cid), on both sides.
    for who in (host, bob):
        texts = [e["text"] for e in who.events("chat")]
        check(sorted(texts) == sorted("%s %d" % (s, i) for s in ("alice", "bob")
                                      for i in range(CHATS)),
              "%s chats: %r" % (who.name, texts))

    # The stats line (every 10 s; a frame counts as one-path 3 s after it
    # came): each side got a fifth of the other's frames over TCP only.
    def covered(lobby, name):
        s = stats(lobby, name)
        return s if s and s["tcp_only"] >= FRAMES // 10 else None
    sh = wait_for(lambda: covered(host, "bob"), 25, "the host's stats line with tcp_only")
    sj = wait_for(lambda: covered(bob, "alice"), 25, "bob's stats line with tcp_only")
    env.log("host: %s" % host.grep(r'dual-stats .* name="bob"')[-1].split(" ", 1)[1])
    env.log("bob:  %s" % bob.grep(r'dual-stats .* name="alice"')[-1].split(" ", 1)[1])
    for s, who in ((sh, "host"), (sj, "bob")):
        check(s["udp_first"] + s["tcp_first"] >= FRAMES, "%s counted %r" % (who, s))
        check(s["tcp_only"] <= s["tcp_first"] and s["udp_only"] <= s["udp_first"],
              "%s: one-path counts beyond first counts %r" % (who, s))
        check(s["queue_drops"] == 0, "%s dropped queued frames %r" % (who, s))
        # Loopback: the second copy of almost every frame made it.
        check(s["tcp_later_n"] + s["udp_later_n"] > FRAMES // 2, "%s: second copies %r" % (
            who, s))
    check(host.grep(r'dual-stats .* name="bob" link=up') and
          bob.grep(r'dual-stats .* name="alice" link=up'), "link down in the stats")
    check(not host.grep(r"dual-link-closed") and not bob.grep(r"dual-link-closed"),
          "a link closed during the session")

    env.daemons_alive(host, bob)
    bob.command(cmd="quit")
    check(bob.wait_exit(10) == 0, "bob's exit status")
    host.wait_line(r'peer-gone .* name="bob" reason=left')
    host.wait_line(r'dual-link-closed peer=\S+ name="bob" .* reason="the peer left"')
    host.command(cmd="quit")
    check(host.wait_exit(10) == 0, "the host's exit status")
    # The second copies were dropped by the seal's replay window.
    rep_h, rep_j = exit_counters(host), exit_counters(bob)
    env.log("replayed: host %d, bob %d" % (rep_h, rep_j))
    check(rep_h >= FRAMES // 2 and rep_j >= FRAMES // 2, "replayed %d / %d" % (rep_h, rep_j))
    check(host.grep(r"dual-exit links_up=1 refused=0 ") and bob.grep(r"dual-exit links_up=1 "),
          "dual-exit lines")


run(scenario)
