#!/usr/bin/python3
"""Lab: hosts behind carrier-grade NAT (a home NAT behind a carrier's).

Site c: a home cone router behind a carrier NAT that maps every
destination to a new port (many CGNs do). Site d: a home router running
miniupnpd behind an endpoint-independent carrier NAT (RFC 6888's advice). Site a: a plain cone, where the joiners sit.

- the host on c is unreachable but for the relay: its joiner (on a) gets
  in through the master's relay port;
- the host on d finds the home router, which answers but has no external
  address to give and maps nothing (miniupnpd refuses its carrier-side
  private WAN address, as it would a real 100.64/10 one); with STUN seeing
  a public address, the host flags itself CGNAT; its joiner (on a) still
  gets in, over whichever path answers first (a punch through both
  endpoint-independent NATs, or the relay);
- game frames cross both pairs; every namespace is deleted.
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
    c = lab.site("c", kind="cgnat", cgn="symmetric")
    d = lab.site("d", kind="cgnat", cgn="cone", upnp=True)
    a = lab.site("a", kind="cone")
    hc, hd = c.host("hc"), d.host("hd")
    jc, jd = a.host("jc"), a.host("jd")

    bhc = bridge(lab, hc, 1, send=100, rate=100, duration_ms=4000, wait_go=True)
    bjc = bridge(lab, jc, 2, send=100, rate=100, duration_ms=4000, wait_go=True)
    bhd = bridge(lab, hd, 3, send=100, rate=100, duration_ms=4000, wait_go=True)
    bjd = bridge(lab, jd, 4, send=100, rate=100, duration_ms=4000, wait_go=True)
    host_c = host_lobby(lab, hc, "carrier-sym", bridge=bhc)
    host_d = host_lobby(lab, hd, "carrier-upnp", upnp=True, bridge=bhd)

    pc = observed(host_c)
    check(pc["public"].startswith(c.public_ip + ":") and pc["symmetric"] == "1",
          "host on c: the carrier's symmetric NAT is seen: %r" % pc)
    pd = observed(host_d)
    m = host_d.wait_line(r"\bupnp igd=(\d+) status=(\d+) udp=(\S+) tcp=(\S+) external=(\S+)", 15)
    check(m.group(1) == "1" and m.group(3) == "no" and m.group(5) == "-",
          "the home router behind the carrier NAT answers but has no external address and maps "
          "nothing (miniupnpd refuses its private WAN address %s): %r" % (d.wan_ip, m.group(0)))
    check(pd["public"].startswith(d.public_ip + ":") and pd["cgnat"] == "1" and pd["upnp"] == "none",
          "host on d: a router that is up without an external address means CGNAT: %r" % pd)
    check("29471" not in d.upnp_rules(), "no mapping on the home router:\n%s" % d.upnp_rules())

    j_c = join_lobby(lab, jc, host_c.code, "to-carrier-sym", bridge=bjc)
    j_d = join_lobby(lab, jd, host_d.code, "to-carrier-upnp", bridge=bjd)
    ip, port, secs, _ = wait_joined(j_c, 40)
    check(path_of(lab, host_c, ip) == "relay", "joiner of c got in over %s:%d, wanted the relay" % (
        ip, port))
    env.log("CGNAT (symmetric carrier) x cone: in after %.2f s through the relay" % secs)
    ip, port, secs, _ = wait_joined(j_d, 40)
    path = path_of(lab, host_d, ip)
    check(path in ("direct", "relay"), "joiner of d got in over %s (%s:%d)" % (path, ip, port))
    env.log("CGNAT (cone carrier, UPnP home router) x cone: in after %.2f s over %s" % (secs, path))

    for h, j in ((host_c, j_c), (host_d, j_d)):
        wait_for(lambda: len((h.roster() or {}).get("players", [])) == 2, 10, "%s roster" % h.name)
    for b in (bhc, bjc, bhd, bjd):
        b.go()
    for bh, bj, hid, jid in ((bhc, bjc, 1, 2), (bhd, bjd, 3, 4)):
        rh, rj = bh.result(), bj.result()
        got_j, got_h = rj["from"].get(hid, {}).get("frames", 0), rh["from"].get(jid, {}).get("frames", 0)
        check(got_j >= 95 and got_h >= 95, "frames %d<->%d: joiner got %d, host got %d of 100" % (
            hid, jid, got_j, got_h))

    for h in (host_c, host_d):
        h.command(cmd="quit")
        check(h.wait_exit(15) == 0, "%s exit" % h.name)
    for j in (j_c, j_d):
        check(j.wait_exit(15) == 0, "%s exit" % j.name)
    close_lab(lab)


if __name__ == "__main__":
    run(scenario)
