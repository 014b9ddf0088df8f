#!/usr/bin/python3
"""Lab: mesh links across NATs (netpunch-wire.md §10).

The host alice sits behind a port-restricted cone (site a), bob and carol
behind two more cones (b, c), dave behind a symmetric NAT (s). bob and
carol get in through the knock, dave through the master's relay port.
Checks:

- bob and carol punch each other directly across their two cone NATs: each
  one's link goes to the other's public address (the port its NAT kept),
  and each reports exactly the other to the host;
- nobody reaches dave directly (a symmetric NAT gives each destination a
  new port, so the profile's public port is wrong for everyone but the
  STUN server): the dials toward him and his own give up after 8 s, he
  reports no links and stays on the host path;
- every bridge gets every other bridge's frames exactly once: bob <-> carol
  directly, anything to or from dave as envelopes and frames through the
  host (over its relay port);
- every namespace is deleted.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from lab import Lab  # noqa: E402
from harness import check, mesh_links, mesh_stats as stats, run, wait_for  # noqa: E402
from lobbylab import bridge, close_lab, host_lobby, join_lobby, path_of, wait_joined  # noqa: E402

FRAMES = 200
IDS = {"alice": 1, "bob": 2, "carol": 3, "dave": 4}


def scenario(env):
    lab = Lab(env, deadline=170)
    a = lab.site("a", kind="cone")
    b = lab.site("b", kind="cone")
    c = lab.site("c", kind="cone")
    s = lab.site("s", kind="symmetric")
    where = {"alice": a.host("alice"), "bob": b.host("bob"), "carol": c.host("carol"),
             "dave": s.host("dave")}
    br = {n: bridge(lab, where[n], IDS[n], send=FRAMES, rate=100, duration_ms=5000, wait_go=True)
          for n in IDS}
    host = host_lobby(lab, where["alice"], "alice", bridge=br["alice"])
    lobbies = {"alice": host}
    for n in ("bob", "carol", "dave"):
        lobbies[n] = join_lobby(lab, where[n], host.code, n, bridge=br[n])
    for n in ("bob", "carol", "dave"):
        ip, port, secs, _ = wait_joined(lobbies[n], 40)
        path = path_of(lab, host, ip)
        want = "relay" if n == "dave" else "direct"
        check(path == want, "%s got in over %s (%s:%d), wanted %s" % (n, path, ip, port, want))
        env.log("%s: in after %.2f s (%s)" % (n, secs, path))
    everyone = sorted(IDS)
    for lb in lobbies.values():
        wait_for(lambda: (lb.roster() or {}).get("players") == everyone, 15, "%s's roster" % lb.name)

    # bob <-> carol: direct, each at the other's public address.
    wait_for(lambda: mesh_links(lobbies["bob"]) == {"carol"}, 20,
             lambda: "bob's links (%r)" % mesh_links(lobbies["bob"]))
    wait_for(lambda: mesh_links(lobbies["carol"]) == {"bob"}, 20,
             lambda: "carol's links (%r)" % mesh_links(lobbies["carol"]))
    m = lobbies["bob"].wait_line(r'mesh-direct peer="carol" addr=(\S+):(\d+)', 5)
    check(m.group(1) == c.public_ip, "bob reaches carol at %s, not her NAT's %s" % (
        m.group(1), c.public_ip))
    m = lobbies["carol"].wait_line(r'mesh-direct peer="bob" addr=(\S+):(\d+)', 5)
    check(m.group(1) == b.public_ip, "carol reaches bob at %s, not his NAT's %s" % (
        m.group(1), b.public_ip))
    # dave: every dial gives up; nobody reports him.
    for n in ("bob", "carol"):
        lobbies[n].wait_line(r'mesh-dial-failed peer="dave"', 20)
    lobbies["dave"].wait_line(r'mesh-dial-failed peer="(bob|carol)"', 20)
    wait_for(lambda: mesh_links(lobbies["dave"]) == set(), 20,
             lambda: "dave's links (%r)" % mesh_links(lobbies["dave"]))
    check(mesh_links(lobbies["bob"]) == {"carol"} and mesh_links(lobbies["carol"]) == {"bob"},
          "links after the failed dials: bob %r carol %r" % (
              mesh_links(lobbies["bob"]), mesh_links(lobbies["carol"])))

    for x in br.values():
        x.go()
    res = {n: x.result(timeout=60) for n, x in br.items()}
    for n, r in res.items():
        check(r.get("sent") == FRAMES, "%s's bridge sent %r" % (n, r.get("sent")))
        for other, i in IDS.items():
            if other == n:
                continue
            got = r["from"].get(i, {"frames": 0, "dup": 0})
            env.log("%s <- %s: %d frames, %d duplicates" % (n, other, got["frames"], got["dup"]))
            check(got["frames"] == FRAMES and got["dup"] == 0,
                  "%s got %r of %s's %d frames" % (n, got, other, FRAMES))

    host.command(cmd="quit")
    check(host.wait_exit(10) == 0, "host exit")
    for n in ("bob", "carol", "dave"):
        check(lobbies[n].wait_exit(15) == 0, "%s exit" % n)
    for n in ("bob", "carol"):
        st = stats(lobbies[n])
        check(st["direct"] == FRAMES and st["via_host"] == FRAMES and st["unroutable"] == 0,
              "%s's mesh stats %r" % (n, st))
    st = stats(lobbies["dave"])
    check(st["direct"] == 0 and st["via_host"] == 2 * FRAMES, "dave's mesh stats %r" % st)
    close_lab(lab)


if __name__ == "__main__":
    run(scenario)
