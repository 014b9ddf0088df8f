#!/usr/bin/python3
"""Lab: players behind one NAT, with and without hairpinning, and behind a
double NAT that shares its outer NAT with the host's LAN.

Site h's router hairpins (lab.py _HAIRPIN), site c's does not (plain Linux
masquerade); site ih is a router whose WAN is a port on h's LAN, site ic
one on c's LAN (lab.site(..., inside=...)): a player there sits behind two
NATs, the outer one shared with the hosts on h's or c's LAN. Checks:

- two players behind h and two behind c: the joiner connects on the host's
  LAN address (path "lan"), hairpin or not - a joiner that sees its own
  public address in the code dials the LAN candidate only
  (joincode_targets);
- a joiner behind ih (c: ic) joins the host on h's (c's) LAN: its packets
  leave the inner router onto the host's own LAN, so the LAN path works
  here too;
- a host behind ih (ic) with a joiner on h's (c's) LAN: the host's LAN
  address is not reachable from the outer LAN and both ends share one
  public address. The host's punch reaches the joiner's LAN address from
  the inner router's address on the outer LAN, and the joiner (fast
  schedule) dials that source at once: the path is that address, or,
  behind the NAT that hairpins, the outer public address when the
  joiner's dial through the hairpin answers first - never the relay;
- every namespace is deleted.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from lab import Lab  # noqa: E402
from harness import Failure, check, run  # noqa: E402
from lobbylab import close_lab, host_lobby, join_lobby, path_of, wait_joined  # noqa: E402


def joined(lab, host, j, what, timeout=40):
    """(path, seconds) of joiner j into host, or a Failure naming what it
    tried."""
    try:
        ip, port, secs, _ = wait_joined(j, timeout)
    except Failure as e:
        tried = [ln.split("target=")[1] for ln in j.grep(r"\bdial-target target=")]
        raise Failure("%s: the joiner did not get in within %d s (dialled %s; knocks %d, "
                      "host punches %d): %s" % (what, timeout, tried, len(j.grep(r"\bknock n=")),
                                                len(host.grep(r"\bpunch to=")), e))
    return path_of(lab, host, ip), port, secs


def scenario(env):
    lab = Lab(env, deadline=120)
    h = lab.site("h", kind="cone", hairpin=True)
    c = lab.site("c", kind="cone")
    ih = lab.site("ih", kind="cone", inside=h)
    ic = lab.site("ic", kind="cone", inside=c)
    check(ih.public_ip == h.public_ip and ic.public_ip == c.public_ip, "inner public addresses")

    # ---- one NAT, hairpin or not; and a joiner behind the inner NAT ----
    hosts, joins = {}, []
    for site, inner in ((h, ih), (c, ic)):
        hl = host_lobby(lab, site.host("host"), "host-%s" % site.name)
        hosts[site.name] = hl
        joins.append((hl, join_lobby(lab, site.host("joiner"), hl.code, "lan-%s" % site.name),
                      "same NAT (%s, hairpin=%s)" % (site.name, site.router.hairpin)))
        joins.append((hl, join_lobby(lab, inner.host("joiner"), hl.code, "inner-%s" % inner.name),
                      "inner NAT %s -> host on %s's LAN" % (inner.name, site.name)))
    for hl, j, what in joins:
        path, port, secs = joined(lab, hl, j, what)
        check(path == "lan" and port == 29471, "%s: path %s port %d, wanted the host's LAN "
              "address %s:29471" % (what, path, port, hl.where.addr))
        env.log("%s: in on the LAN path after %.2f s" % (what, secs))

    # ---- a host behind the inner NAT, the joiner on the outer LAN ----
    joins = []
    for site, inner in ((h, ih), (c, ic)):
        hl = host_lobby(lab, inner.host("host"), "host-%s" % inner.name)
        joins.append((hl, join_lobby(lab, site.host("outer"), hl.code, "outer-%s" % site.name),
                      "host behind %s, joiner on %s's LAN (hairpin=%s)" % (
                          inner.name, site.name, site.router.hairpin), site, inner))
    for hl, j, what, site, inner in joins:
        path, port, secs = joined(lab, hl, j, what)
        env.log("%s: in on path %s (port %d) after %.2f s" % (what, path, port, secs))
        punched = inner.router.wan_ip
        want = (punched, "direct") if site.router.hairpin else (punched,)
        check(path in want, "%s: path %s port %d, wanted %s (the inner router's address on "
              "the outer LAN%s)" % (what, path, port, " or ".join(want),
                                    ", or the hairpinned public one" if site.router.hairpin
                                    else ""))
        tr = j.wait_event(lambda e: e.get("type") == "traversal", 5, "the traversal event")
        check(tr.get("path") in ("punched", "public"), "%s: traversal path %r" % (
            what, tr.get("path")))
        env.log("%s: the joiner's traversal record says %s" % (what, tr.get("path")))
    close_lab(lab)


if __name__ == "__main__":
    run(scenario)
