#!/usr/bin/python3
"""Lab: a host behind a UPnP router (Debian's miniupnpd) needs no knock.

Site u's router runs miniupnpd (nftables backend, learning its external
address from the lab's STUN server); site a is a plain cone. Checks:

- the host maps its UDP and TCP port on the router (both appear as nft
  rules), puts the mapped external address in its code and calls itself
  open;
- a joiner on a, with no master at all (--rendezvous off), gets in over
  the mapped port on the first try: no knock, no punch from the host;
- chat and game frames cross;
- the mappings are gone after the lobby quits (the quit command), and
  after it is ended by SIGTERM and by SIGINT;
- every namespace is deleted.
"""

import os
import re
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from lab import Lab  # noqa: E402
from harness import check, run  # noqa: E402
from lobbylab import (bridge, close_lab, host_lobby, join_lobby, observed,  # noqa: E402
                      path_of, punches, wait_joined)

UPNP_LINE = r"\bupnp igd=(\d+) status=(\d+) udp=(\S+) tcp=(\S+) external=(\S+)"


def mapped(site, port):
    """The protocols of the DNAT rules miniupnpd installed for port (nft
    prints them raw: `@nh,72,8 0x11 th dport P dnat ...`, 0x11 UDP, 0x6 TCP)."""
    rules = site.upnp_rules()
    protos = re.findall(r"@nh,72,8 (0x11|0x6) th dport %d dnat\b" % port, rules)
    return sorted(set({"0x11": "udp", "0x6": "tcp"}[p] for p in protos))


def scenario(env):
    lab = Lab(env, deadline=150)
    u = lab.site("u", kind="upnp")
    a = lab.site("a", kind="cone")
    hu, ja = u.host("host"), a.host("joiner")

    bh = bridge(lab, hu, 1, send=100, rate=100, duration_ms=4000, wait_go=True)
    bj = bridge(lab, ja, 2, send=100, rate=100, duration_ms=4000, wait_go=True)
    host = host_lobby(lab, hu, "upnp-host", upnp=True, bridge=bh)
    m = host.wait_line(UPNP_LINE, 15)
    check(m.group(3) == "mapped" and m.group(4) == "mapped" and m.group(5) == u.public_ip,
          "UPnP mapped UDP and TCP on the router's external address %s: %r" % (
              u.public_ip, m.group(0)))
    prof = observed(host)
    check(prof["public"] == "%s:29471" % u.public_ip and prof["open"] == "1" and
          prof["cgnat"] == "0", "the mapped address is the public candidate: %r" % prof)
    check(mapped(u, 29471) == ["tcp", "udp"], "nft rules for 29471: %r\n%s" % (
        mapped(u, 29471), u.upnp_rules()))

    j = join_lobby(lab, ja, host.code, "joiner", rendezvous=False, bridge=bj)
    ip, port, secs, after_ms = wait_joined(j, 15)
    check(path_of(lab, host, ip) == "direct" and port == 29471,
          "the joiner's path: %s:%d (wanted the mapping %s:29471)" % (ip, port, u.public_ip))
    check(not j.grep(r"\bknock n=") and not punches(host), "no knock, no punch was needed")
    env.log("UPnP host x cone joiner, no master: in after %.2f s (%d ms after the first HELLO)" % (
        secs, after_ms))

    j.command(cmd="chat", text="straight through the mapping")
    host.wait_event(lambda e: e.get("type") == "chat" and
                    e.get("text") == "straight through the mapping", 10, "chat")
    bh.go()
    bj.go()
    rh, rj = bh.result(), bj.result()
    got_j, got_h = rj["from"].get(1, {}).get("frames", 0), rh["from"].get(2, {}).get("frames", 0)
    check(got_j >= 95 and got_h >= 95, "frames: joiner got %d, host got %d of 100" % (got_j, got_h))

    host.command(cmd="quit")
    check(host.wait_exit(15) == 0, "host exit status after quit")
    check(host.grep(r"\bupnp-unmapped port=29471"), "the host logged the unmapping")
    check(mapped(u, 29471) == [], "mappings after quit: %r\n%s" % (mapped(u, 29471), u.upnp_rules()))
    check(j.wait_exit(15) == 0, "joiner exit status after the host quit")

    # Ended by a signal: the mappings go too.
    for sig in (signal.SIGTERM, signal.SIGINT):
        h = host_lobby(lab, hu, "upnp-%s" % sig.name.lower(), upnp=True)
        m = h.wait_line(UPNP_LINE, 15)
        check(m.group(3) == "mapped" and mapped(u, 29471) == ["tcp", "udp"],
              "mapped again (%s round): %r" % (sig.name, m.group(0)))
        h.signal(sig)
        check(h.wait_exit(15) == 0, "exit status after %s" % sig.name)
        check(mapped(u, 29471) == [], "mappings after %s: %r\n%s" % (
            sig.name, mapped(u, 29471), u.upnp_rules()))
    close_lab(lab)


if __name__ == "__main__":
    run(scenario)
