#!/usr/bin/python3
"""Lab: a host behind a NAT-PMP router (miniupnpd, enable_upnp=no) needs no knock.

Site n's router speaks NAT-PMP only (no SSDP, no HTTP); site u's is the
usual UPnP router (which speaks NAT-PMP too); site a is a plain cone, where
the joiner sits. Checks:

- the host's UPnP finds no router (igd=0), NAT-PMP maps its UDP and TCP
  port on n's router with external port = internal port (both appear as
  nft rules, `natpmp gateway=... udp=mapped tcp=mapped external=<n's WAN>
  port=29471`), the mapped address is its public candidate and it calls
  itself open;
- a joiner on a, with no master at all (--rendezvous off: only the mapping
  can let it in), gets in over that address (path "direct"), no knock;
- after the host quits, it logged natpmp-unmapped and the rules are gone;
- a host asking a 4 s lifetime (--natpmp-lifetime 4) renews it every 2 s:
  three renewals, the rules still there past the first lifetime, a
  master-less joiner in over the mapping then; gone after quit;
- a host behind the UPnP router still maps by UPnP and never asks NAT-PMP
  (observed upnp=mapped natpmp=unused, no natpmp line), and its mapping
  goes on exit too;
- a host with --natpmp off behind the NAT-PMP router gets no mapping
  (open=0, natpmp=off, no rule) and says why (mapping-none reason=...);
- every namespace is deleted.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from lab import Lab  # noqa: E402
from harness import check, run, wait_for  # noqa: E402
from lobbylab import (close_lab, host_lobby, join_lobby, observed, path_of,  # noqa: E402
                      punches, wait_joined)

UPNP_LINE = r"\bupnp igd=(\d+) status=(\d+) udp=(\S+) tcp=(\S+) external=(\S+)"
NATPMP_LINE = (r"\bnatpmp gateway=(\S+) udp=(\S+) tcp=(\S+) external=(\S+) port=(\d+) "
               r"lifetime=(\d+) error=\"(.*)\"")
PORT = 29471


def scenario(env):
    lab = Lab(env, deadline=120)
    n = lab.site("n", kind="natpmp")
    u = lab.site("u", kind="upnp")
    a = lab.site("a", kind="cone")
    hn, hn2, hu, ja = n.host("host"), n.host("off"), u.host("host"), a.host("joiner")

    # ---- NAT-PMP only: the mapping lets a master-less joiner in ----
    host = host_lobby(lab, hn, "natpmp-host", upnp=True)
    m = host.wait_line(UPNP_LINE, 15)
    check(m.group(1) == "0" and m.group(3) == "no", "no UPnP on a NAT-PMP-only router: %r" % (
        m.group(0)))
    m = host.wait_line(NATPMP_LINE, 15)
    check(m.group(1) == n.router.lan_ip and m.group(2) == "mapped" and m.group(3) == "mapped" and
          m.group(4) == n.public_ip and m.group(5) == str(PORT) and m.group(7) == "",
          "NAT-PMP mapped UDP and TCP %d on %s (gateway %s): %r" % (
              PORT, n.public_ip, n.router.lan_ip, m.group(0)))
    check(int(m.group(6)) > 1800, "lifetime granted: %s s" % m.group(6))
    prof = observed(host)
    check(prof["public"] == "%s:%d" % (n.public_ip, PORT) and prof["open"] == "1" and
          prof["cgnat"] == "0" and prof["upnp"] == "none" and prof["natpmp"] == "mapped",
          "the NAT-PMP mapping is the public candidate: %r" % prof)
    check(n.mapped(PORT) == ["tcp", "udp"], "nft rules for %d: %r\n%s" % (
        PORT, n.mapped(PORT), n.upnp_rules()))

    j = join_lobby(lab, ja, host.code, "joiner", rendezvous=False)
    ip, port, secs, after_ms = wait_joined(j, 15)
    check(path_of(lab, host, ip) == "direct" and port == PORT,
          "the joiner's path: %s:%d (wanted the mapping %s:%d)" % (ip, port, n.public_ip, PORT))
    check(not j.grep(r"\bknock n=") and not punches(host), "no knock, no punch was needed")
    env.log("NAT-PMP host x cone joiner, no master: in after %.2f s (%d ms after the first "
            "HELLO)" % (secs, after_ms))
    j.command(cmd="chat", text="through the NAT-PMP mapping")
    host.wait_event(lambda e: e.get("type") == "chat" and
                    e.get("text") == "through the NAT-PMP mapping", 10, "chat")

    host.command(cmd="quit")
    check(host.wait_exit(15) == 0, "host exit status after quit")
    check(host.grep(r"\bnatpmp-unmapped port=%d external=%d\b" % (PORT, PORT)),
          "the host logged the unmapping")
    check(n.mapped(PORT) == [], "mappings after quit: %r\n%s" % (n.mapped(PORT), n.upnp_rules()))
    check(j.wait_exit(15) == 0, "joiner exit status after the host quit")

    # ---- renewal: a 4 s lifetime renewed every 2 s outlives itself ----
    short = host_lobby(lab, hn, "natpmp-short", upnp=True, args=["--natpmp-lifetime", "4"])
    m = short.wait_line(NATPMP_LINE, 15)
    check(m.group(2) == "mapped" and m.group(6) == "4", "a 4 s mapping granted: %r" % m.group(0))
    t_map = time.monotonic()
    renewed = r"\bnatpmp-renewed port=%d lifetime=4$" % PORT
    wait_for(lambda: len(short.grep(renewed)) >= 3, 12, "three renewals of the 4 s mapping")
    check(time.monotonic() - t_map > 4, "three renewals in less than the first lifetime")
    check(n.mapped(PORT) == ["tcp", "udp"], "the renewed mapping after %.1f s: %r\n%s" % (
        time.monotonic() - t_map, n.mapped(PORT), n.upnp_rules()))
    j = join_lobby(lab, ja, short.code, "joiner-late", rendezvous=False)
    ip, port, secs, _ = wait_joined(j, 15)
    check(path_of(lab, short, ip) == "direct" and port == PORT,
          "the joiner's path %.1f s after a 4 s mapping: %s:%d" % (
              time.monotonic() - t_map, ip, port))
    env.log("a 4 s NAT-PMP mapping renewed %d times, a joiner in over it after %.1f s" % (
        len(short.grep(renewed)), time.monotonic() - t_map))
    short.command(cmd="quit")
    check(short.wait_exit(15) == 0, "short-lifetime host exit status")
    check(n.mapped(PORT) == [], "mappings after quit: %r" % n.mapped(PORT))
    check(j.wait_exit(15) == 0, "late joiner exit status")

    # ---- a UPnP router: UPnP, not NAT-PMP; --natpmp off: no mapping, and why ----
    hup = host_lobby(lab, hu, "upnp-host", upnp=True)
    off = host_lobby(lab, hn2, "natpmp-off", upnp=True, natpmp=False)
    m = hup.wait_line(UPNP_LINE, 15)
    check(m.group(3) == "mapped" and m.group(4) == "mapped" and m.group(5) == u.public_ip,
          "UPnP mapped on the UPnP router: %r" % m.group(0))
    prof = observed(hup)
    check(prof["public"] == "%s:%d" % (u.public_ip, PORT) and prof["open"] == "1" and
          prof["upnp"] == "mapped" and prof["natpmp"] == "unused",
          "UPnP's mapping, NAT-PMP unused: %r" % prof)
    check(not hup.grep(r"\bnatpmp gateway="), "NAT-PMP was asked although UPnP mapped")
    check(u.mapped(PORT) == ["tcp", "udp"], "UPnP rules: %r\n%s" % (u.mapped(PORT),
                                                                     u.upnp_rules()))

    prof = observed(off)
    check(prof["open"] == "0" and prof["upnp"] == "none" and prof["natpmp"] == "off" and
          prof["public"].startswith(n.public_ip + ":"),
          "--natpmp off behind the NAT-PMP router: no mapping, STUN's address: %r" % prof)
    m = off.wait_line(r"\bmapping-none reason=\"(.*)\"$", 5)
    check(m.group(1) == "no UPnP router answered; NAT-PMP off", "the reason: %r" % m.group(1))
    check(not off.grep(r"\bnatpmp gateway="), "NAT-PMP was asked with --natpmp off")
    check(n.mapped(PORT) == [], "rules with --natpmp off:\n%s" % n.upnp_rules())

    for lb, site, line in ((hup, u, r"\bupnp-unmapped port=%d" % PORT), (off, n, None)):
        lb.command(cmd="quit")
        check(lb.wait_exit(15) == 0, "%s exit status after quit" % lb.name)
        check(line is None or lb.grep(line), "%s logged the unmapping" % lb.name)
        check(site.mapped(PORT) == [], "rules left on %s:\n%s" % (site.name, site.upnp_rules()))
    check(not off.grep(r"\bnatpmp-unmapped"), "nothing to unmap with --natpmp off")
    env.daemons_alive(lab.internet.master, n.miniupnpd, u.miniupnpd)
    close_lab(lab)


if __name__ == "__main__":
    run(scenario)
