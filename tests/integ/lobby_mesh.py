#!/usr/bin/env python3
"""Mesh links (netpunch-wire.md §10): a host and four joiners, three of them
mesh joiners and one a star joiner (--no-mesh), every session sealed.

1. On loopback: the mesh joiners punch each other on their lobby sockets and
   name the links (each reports the other two to the host); every bridge's
   frames reach every other bridge exactly once (netpunch's --selftest-mesh
   property), mesh to mesh directly, to and from the star joiner through
   the host (envelopes unwrapped for it, its frames forwarded).
2. In a network namespace of the test's own: an nftables rule drops bob <->
   carol, so their dials fail after 8 s and their frames go as envelopes
   through the host; still exactly once. Then the rule also cuts an
   established link (bob <-> dave): after 30 s unheard it is dead, and the
   frames sent after that go through the host again, exactly once.

Only loopback candidates; no STUN, no UPnP, no master."""

import os

from harness import Bridge, Lobby, Netns, check, mesh_links, mesh_stats as stats, run, wait_for

FRAMES = 200


def start_lobby(env, prefix, ports):
    """Host alice, mesh joiners bob, carol, dave, star joiner erin, each with
    a bridge that waits for go. ports: the joiners' lobby ports (fixed, so
    nftables can name them)."""
    bridges, lobbies = {}, {}
    ident = {"alice": 1, "bob": 2, "carol": 3, "dave": 4, "erin": 5}
    for name in ("alice", "bob", "carol", "dave", "erin"):
        bridges[name] = Bridge(env, ident[name], send=FRAMES, rate=100, duration_ms=4000,
                               name="bridge-" + name, wait_go=True, argv_prefix=prefix)
    host = Lobby(env, "host", name="alice", argv_prefix=prefix,
                 args=["--game-local-port", str(bridges["alice"].port)])
    bridges["alice"].connect(host)
    lobbies["alice"] = host
    code = host.wait_code()
    for name in ("bob", "carol", "dave", "erin"):
        args = ["--game-local-port", str(bridges[name].port), "--local-port", str(ports[name])]
        if name == "erin":
            args.append("--no-mesh")
        j = Lobby(env, "join", code=code, name=name, args=args, argv_prefix=prefix)
        bridges[name].connect(j)
        lobbies[name] = j
    for name in ("bob", "carol", "dave", "erin"):
        lobbies[name].wait_status("connected", "^joined the host$")
    everyone = ["alice", "bob", "carol", "dave", "erin"]
    for lb in lobbies.values():
        wait_for(lambda: (lb.roster() or {}).get("players") == everyone, 10,
                 "%s's roster" % lb.name)
    return host, lobbies, bridges


def check_once(bridges, what, expect=FRAMES):
    """Every bridge heard every other bridge's frames exactly once."""
    ident = {"alice": 1, "bob": 2, "carol": 3, "dave": 4, "erin": 5}
    res = {n: b.result(timeout=60) for n, b in bridges.items()}
    for n, r in res.items():
        check(r.get("sent") == expect, "%s: %s's bridge sent %r" % (what, n, r.get("sent")))
        for m, i in ident.items():
            if m == n:
                check(i not in r["from"], "%s: %s heard its own frames" % (what, n))
                continue
            got = r["from"].get(i, {"frames": 0, "dup": 0})
            check(got["frames"] == expect and got["dup"] == 0,
                  "%s: %s got %r of %s's %d frames" % (what, n, got, m, expect))


def quit_all(lobbies):
    for lb in lobbies.values():
        lb.command(cmd="quit")
    for lb in lobbies.values():
        lb.wait_exit(10)


def loopback(env):
    ports = {"bob": 29751, "carol": 29752, "dave": 29753, "erin": 29754}
    host, lobbies, bridges = start_lobby(env, (), ports)
    mesh = ("bob", "carol", "dave")
    for n in mesh:
        others = set(mesh) - {n}
        wait_for(lambda: mesh_links(lobbies[n]) == others, 15,
                 lambda: "%s's direct links (%r)" % (n, mesh_links(lobbies[n])))
    check(mesh_links(lobbies["erin"]) is None, "the star joiner reported links")
    for b in bridges.values():
        b.go()
    check_once(bridges, "loopback")
    quit_all(lobbies)
    for n in mesh:
        st = stats(lobbies[n])
        check(st is not None, "%s: no mesh-stats line" % n)
        # Two mesh peers directly (FRAMES each), erin through the host.
        check(st["direct"] == 2 * FRAMES and st["via_host"] == FRAMES and st["via_peer"] == 0 and
              st["unroutable"] == 0, "%s's mesh stats %r" % (n, st))
        check(st["frames_in"] == 2 * FRAMES and st["refused"] == 0,
              "%s's frames from peers %r" % (n, st))
    check(stats(lobbies["erin"]) is None, "the star joiner ran a mesh")


def nft(ns, *rules):
    ns.run("nft", "-f", "-", input="\n".join(rules) + "\n", text=True, check=True)


def drop_pair(a, b):
    return ["add rule inet meshcut out udp sport %d udp dport %d drop" % (a, b),
            "add rule inet meshcut out udp sport %d udp dport %d drop" % (b, a)]


def cut(env):
    ns = Netns(env, "mesh")
    ports = {"bob": 29761, "carol": 29762, "dave": 29763, "erin": 29764}
    nft(ns, "add table inet meshcut",
        "add chain inet meshcut out { type filter hook output priority 0; }",
        *drop_pair(ports["bob"], ports["carol"]))
    host, lobbies, bridges = start_lobby(env, ns.argv(), ports)
    # bob and carol cannot punch: each dial gives up after 8 s.
    for n in ("bob", "carol"):
        lobbies[n].wait_line(r"mesh-dial-failed peer=\"%s\"" % ("carol" if n == "bob" else "bob"),
                             20)
    wait_for(lambda: mesh_links(lobbies["bob"]) == {"dave"}, 15, "bob's links")
    wait_for(lambda: mesh_links(lobbies["carol"]) == {"dave"}, 15, "carol's links")
    wait_for(lambda: mesh_links(lobbies["dave"]) == {"bob", "carol"}, 15, "dave's links")
    for b in bridges.values():
        b.go()
    check_once(bridges, "bob-carol cut")
    quit_all(lobbies)
    st = stats(lobbies["bob"])
    check(st["direct"] == FRAMES and st["via_host"] == 2 * FRAMES and st["failed"] >= 1,
          "bob's stats with carol cut off %r" % st)


def dead(env):
    """An established link cut: dead after 30 s unheard, then the host."""
    ns = Netns(env, "meshd")
    ports = {"bob": 29771, "carol": 29772, "dave": 29773, "erin": 29774}
    nft(ns, "add table inet meshcut",
        "add chain inet meshcut out { type filter hook output priority 0; }")
    host, lobbies, bridges = start_lobby(env, ns.argv(), ports)
    for n in ("bob", "carol", "dave"):
        others = {"bob", "carol", "dave"} - {n}
        wait_for(lambda: mesh_links(lobbies[n]) == others, 15, "%s's links" % n)
    nft(ns, *drop_pair(ports["bob"], ports["dave"]))
    lobbies["bob"].wait_line(r'mesh-link-dead peer="dave"', 45)
    lobbies["dave"].wait_line(r'mesh-link-dead peer="bob"', 45)
    wait_for(lambda: mesh_links(lobbies["bob"]) == {"carol"}, 10, "bob's links after the cut")
    for b in bridges.values():
        b.go()
    check_once(bridges, "bob-dave dead")
    quit_all(lobbies)
    st = stats(lobbies["bob"])
    check(st["dead"] >= 1 and st["via_host"] == 2 * FRAMES,
          "bob's stats after the dead link %r" % st)


def scenario(env):
    loopback(env)
    if os.geteuid() != 0:
        env.log("SKIP the namespace parts: network namespaces need root (CI runs as root)")
        return
    cut(env)
    dead(env)


if __name__ == "__main__":
    run(scenario)
