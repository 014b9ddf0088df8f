#!/usr/bin/python3
"""Lab: the dual TCP link across two cone NATs, and what it saves there.

Sites a and b behind port-restricted cone NATs (nftables masquerade, the
router dropping unsolicited WAN packets); the host (alice, on a) has no
UPnP, so no TCP port of hers is open to the internet. bob on b gets in
through the knock. The link can then only come up as dual_tcp.py means
it to: both sides connect from their lobby port to the other's public
mapping, every second, until the two SYNs open both NATs and meet (a
simultaneous open; our host can dial beside its listener because the
listener has SO_REUSEPORT, which netpunch's lacks on Linux). Checks:
- the link comes up on both sides, each naming the other's public address;
- with netsim dropping 20 % of what both send (switched on once joined,
  with the netsim command), 200 game frames each way arrive exactly once;
- both stats lines show frames that came over the link only;
- every namespace is deleted.
"""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from lab import Lab  # noqa: E402
from harness import check, run, wait_for  # noqa: E402
from lobbylab import bridge, close_lab, host_lobby, join_lobby, wait_joined  # noqa: E402

FRAMES = 200


def tcp_only(lb, name):
    lines = lb.grep(r'dual-stats .* name="%s" ' % name)
    m = re.search(r" tcp_only=(\d+) ", lines[-1]) if lines else None
    return int(m.group(1)) if m else 0


def scenario(env):
    lab = Lab(env, deadline=140)
    a = lab.site("a", kind="cone")
    b = lab.site("b", kind="cone")
    ha, hb = a.host("alice"), b.host("bob")

    ba = bridge(lab, ha, 1, send=FRAMES, rate=100, duration_ms=6000, wait_go=True)
    host = host_lobby(lab, ha, "alice", bridge=ba)
    bb = bridge(lab, hb, 2, send=FRAMES, rate=100, duration_ms=6000, wait_go=True)
    j = join_lobby(lab, hb, host.code, "bob", bridge=bb)
    ip, port, secs, _ = wait_joined(j, 30)
    check(ip == a.public_ip, "bob's path goes to %s, not alice's public %s" % (ip, a.public_ip))
    env.log("bob in after %.2f s" % secs)

    up_h = host.wait_line(r'dual-link-up peer=\S+ name="bob" tcp=([\d.]+):\d+ how="([a-z ]+)"',
                          timeout=35)
    up_j = j.wait_line(r'dual-link-up peer=\S+ name="alice" tcp=([\d.]+):(\d+) how="([a-z ]+)"',
                       timeout=35)
    check(up_h.group(1) == b.public_ip, "alice's link goes to %s, not bob's public %s" % (
        up_h.group(1), b.public_ip))
    check(up_j.group(1) == a.public_ip and up_j.group(2) == "29471",
          "bob's link goes to %s:%s" % (up_j.group(1), up_j.group(2)))
    both = up_h.group(2) == "host connected" and up_j.group(3) == "joiner connected"
    env.log("link up: alice says %r, bob says %r%s" % (
        up_h.group(2), up_j.group(3), " (both connected: a simultaneous open)" if both else ""))

    for lb in (host, j):
        with open(os.path.join(lb.io, "tpf2mp_netsim.txt"), "w") as f:
            f.write("loss=0.2\n")
        mark = len(lb.output())
        lb.command(cmd="netsim")
        lb.wait_line(r"netsim loss=0\.200", start=mark)
    ba.go()
    bb.go()
    rh, rb = ba.result(), bb.result()
    env.log("frames under 20 %% loss: bob got %r, alice got %r" % (rb["from"].get(1),
                                                                   rh["from"].get(2)))
    check(rb["from"].get(1) == {"frames": FRAMES, "dup": 0}, "at bob: %r" % rb["from"])
    check(rh["from"].get(2) == {"frames": FRAMES, "dup": 0}, "at alice: %r" % rh["from"])
    wait_for(lambda: tcp_only(host, "bob") >= FRAMES // 10 and tcp_only(j, "alice") >= FRAMES // 10,
             25, "stats lines with frames that came over the link only")
    env.log("tcp_only: alice %d, bob %d" % (tcp_only(host, "bob"), tcp_only(j, "alice")))
    check(not host.grep(r"dual-link-closed") and not j.grep(r"dual-link-closed"),
          "the link closed")

    host.command(cmd="quit")
    check(host.wait_exit(10) == 0, "alice exit status")
    check(j.wait_exit(15) == 0, "bob's exit status after the host quit")
    close_lab(lab)


if __name__ == "__main__":
    run(scenario)
