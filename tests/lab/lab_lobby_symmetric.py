#!/usr/bin/python3
"""Lab: symmetric NATs, where only the master's relay port gets through.

Site a is a port-restricted cone, sites s and t symmetric NATs (nftables
`masquerade fully-random`: a new port per destination). Three lobbies run
side by side, each with one joiner:

    cone host (a)      x symmetric joiner (s)
    symmetric host (s) x cone joiner (a)
    symmetric host (t) x symmetric joiner (s)

In every pair a direct punch cannot work (LAB-NOTES), so each joiner must
get in through the relay port the master hands out: the joiner knows from
the host's code and its own STUN profile that one side is symmetric, so its
first knock, sent at once, asks for it (netpunch waits 4 s and asks from the
second knock; --schedule netpunch). Both ends bind it with TRLB from their game socket and the sealed
frames go through it. Checks the path each joiner took, that both ends of
each pair bound the relay, each side's NAT profile (symmetric seen by two
STUN addresses), game frames both ways over a relayed pair, chat, and that
every namespace is deleted.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from lab import Lab  # noqa: E402
from harness import check, run, wait_for  # noqa: E402
from lobbylab import (bridge, close_lab, host_lobby, join_lobby, observed,  # noqa: E402
                      path_of, wait_joined)


def scenario(env):
    lab = Lab(env, deadline=150)
    a = lab.site("a", kind="cone")
    s = lab.site("s", kind="symmetric")
    t = lab.site("t", kind="symmetric")
    pairs = [  # (name, host's site, joiner's site)
        ("cone-sym", a, s),
        ("sym-cone", s, a),
        ("sym-sym", t, s),
    ]
    hosts, joins, bridges = {}, {}, {}
    for i, (name, hs, js) in enumerate(pairs):
        hh, jh = hs.host("h%d" % i), js.host("j%d" % i)
        bh = bridge(lab, hh, 10 + i, send=150, rate=100, duration_ms=5000, wait_go=True)
        bj = bridge(lab, jh, 20 + i, send=150, rate=100, duration_ms=5000, wait_go=True)
        bridges[name] = (bh, bj)
        hosts[name] = host_lobby(lab, hh, "host-%s" % name, bridge=bh)
    for name, hs, js in pairs:
        prof = observed(hosts[name])
        want = "1" if hs.kind == "symmetric" else "0"
        check(prof["symmetric"] == want and prof["stun"] == "2/2",
              "%s host profile %r (symmetric=%s expected)" % (name, prof, want))
    # All three joiners at once: the master relays three pairs side by side.
    for i, (name, hs, js) in enumerate(pairs):
        jh = [h for h in js.hosts if h.what.endswith("-j%d" % i)][0]
        joins[name] = join_lobby(lab, jh, hosts[name].code, "join-%s" % name,
                                 bridge=bridges[name][1])
    for name, hs, js in pairs:
        j, h = joins[name], hosts[name]
        ip, port, secs, after_ms = wait_joined(j, 40)
        path = path_of(lab, h, ip)
        check(path == "relay", "%s: the joiner got in over %s (%s:%d), wanted the relay port" % (
            name, path, ip, port))
        check(j.grep(r"\brelay-bound relay=") and h.grep(r"\brelay-bound relay="),
              "%s: both ends bound the relay port" % name)
        check(j.grep(r"\bknock n=1 relay=yes"), "%s: the first knock asked for a relay" % name)
        # The record is written just after "joined the host": wait for it.
        j.wait_line(r"\btraversal result=connected path=relay .*why=\"[^\"]*symmetric", 5)
        prof = observed(j)
        want = "1" if js.kind == "symmetric" else "0"
        check(prof["symmetric"] == want, "%s joiner profile %r" % (name, prof))
        env.log("%s: in after %.2f s through the relay port %s:%d" % (name, secs, ip, port))

    for name, _, _ in pairs:
        h, j = hosts[name], joins[name]
        wait_for(lambda: (h.roster() or {}).get("players") == ["host-" + name, "join-" + name], 10,
                 "%s roster" % name)
        j.command(cmd="chat", text="via relay " + name)
        h.wait_event(lambda e: e.get("type") == "chat" and e.get("text") == "via relay " + name,
                     10, "chat over the relay")

    # Game frames both ways over every relayed pair.
    for bh, bj in bridges.values():
        bh.go()
        bj.go()
    for i, (name, _, _) in enumerate(pairs):
        bh, bj = bridges[name]
        rh, rj = bh.result(), bj.result()
        got_j = rj["from"].get(10 + i, {}).get("frames", 0)
        got_h = rh["from"].get(20 + i, {}).get("frames", 0)
        check(got_j >= 140 and got_h >= 140,
              "%s frames over the relay: joiner got %d, host got %d of 150" % (name, got_j, got_h))
        env.log("%s frames: joiner got %d/150, host %d/150" % (name, got_j, got_h))

    for name, _, _ in pairs:
        hosts[name].command(cmd="quit")
    for name, _, _ in pairs:
        check(hosts[name].wait_exit(10) == 0, "%s host exit" % name)
        check(joins[name].wait_exit(15) == 0, "%s joiner exit" % name)
    close_lab(lab)


if __name__ == "__main__":
    run(scenario)
