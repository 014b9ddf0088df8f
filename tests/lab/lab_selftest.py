#!/usr/bin/env python3
"""The lab is what it claims (tests/lab/lab.py), checked with a raw RFC 5389
STUN client (udpagent.py) inside the host namespaces:

- cone: the mapping seen by both STUN addresses and both ports is one and
  the same, and it is the router's WAN address;
- symmetric: every destination gets its own mapping;
- cgnat: the mapping is the carrier router's address, and both routers'
  masquerade rules translated the packets;
- two hosts behind one NAT share the public address and reach each other
  on the LAN;
- a UDP punch between two cone hosts works; between two symmetric hosts, and
  from a cone to a symmetric host, it fails (no relay in the lab itself);
- rally-master answers GET /health from every host;
- IPv6 (2001:db8::/32, routed, no NAT66): between two v6="open" sites a
  datagram goes both ways with the sender's own address and port, and
  reaches a host behind a CGN (the carrier routes v6); into a
  v6="firewall" site unsolicited datagrams are dropped, and pass once the
  inside host has sent to that peer first (the punch); a v6-only host
  (no IPv4) reaches rally-master's v6 listener, not its v4 one;
- UPnP: tools/upnpc-probe (common/upnp.c over miniupnpc) on the UPnP site's
  host maps UDP and TCP; the rules appear in the router's nft ruleset, the
  external address reported is the router's WAN address, unsolicited UDP
  and TCP from the internet reach the host, and after the unmap (on the
  loop, then upnp_unmap_sync on exit) the rules are gone and the port is
  closed again;
- NAT-PMP through common/natpmp (tools/natpmp-probe): the NAT-PMP-only
  router (miniupnpd, enable_upnp=no) answers on 5351 of its LAN address
  with its WAN address, maps UDP and TCP (nft rules), lets unsolicited UDP
  in, renews a 4 s mapping at half-life, and removes the rules on the
  unmap; it answers no UPnP (upnpc-probe finds no IGD; nothing listens on
  TCP or on 1900); the UPnP router answers NAT-PMP too;
- hairpin: on a cone without it a packet from one LAN host to the other's
  public mapping does not arrive; on a cone with hairpin=True it arrives
  from the sender's public side and the answer comes back the same way;
- double NAT (inside=): a host behind an inner router whose WAN is on the
  hairpinning site's LAN maps to the outer site's public address, reaches
  the outer LAN directly, reaches an outer host's public mapping through
  the outer hairpin, and is not reachable on its own mapping unasked (the
  inner NAT filters);
- cleanup: every namespace is gone after the test, after a SIGTERM, and
  after a SIGKILL (the reaper).
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from lab import (BUILD, PROBE_BIN, PYTHON, STUN_IPS, STUN_PORTS, Env, Failure, Lab,  # noqa: E402
                 check, lab_namespaces, punch, wait_for)

NATPMP_PROBE = os.path.join(BUILD, "tools", "natpmp-probe")
NATPMP_MAP = (r"^(map|renew) answered=(\d) gateway=(\S+) external=(\S+) udp=(\d) tcp=(\d) "
              r"udp_ext=(\d+) tcp_ext=(\d+) lifetime=(\d+) error=\"(.*)\"$")

T0 = time.monotonic()


def step(what):
    print("[%6.2fs] %s" % (time.monotonic() - T0, what), flush=True)


def all_endpoints():
    return [(ip, port) for ip in STUN_IPS for port in STUN_PORTS]


def check_cone(lab, site, host):
    ag = host.agent()
    seen = []
    for srv in all_endpoints():
        ev = ag.stun_full(srv)
        check(ev["ok"], "%s: no STUN answer from %s:%d" % (site.name, srv[0], srv[1]))
        attrs = ev["attrs"]
        check(attrs.get("mapped") == attrs.get("xor_mapped"),
              "MAPPED-ADDRESS %r != XOR-MAPPED-ADDRESS %r" % (attrs.get("mapped"),
                                                             attrs.get("xor_mapped")))
        seen.append(tuple(ev["mapped"]))
    check(len(set(seen)) == 1, "%s (cone): mappings differ: %r" % (site.name, seen))
    check(seen[0][0] == site.public_ip, "%s: mapped IP %s, router WAN %s" % (
        site.name, seen[0][0], site.public_ip))
    ag.close()
    return seen[0]


def hairpin_to(lab, src, dst, tag):
    """src sends to dst's public mapping (as STUN saw it): (arrived,
    where from, answer back arrived)."""
    g1, g2 = src.agent(), dst.agent()
    try:
        srv = lab.internet.stun_servers[0]
        m1, m2 = g1.stun(srv), g2.stun(srv)
        check(m1 and m2, "%s: no STUN answer (%r %r)" % (tag, m1, m2))
        g1.send(m2, "hairpin-" + tag, count=5, interval=0.05)
        try:
            wait_for(lambda: g2.received(prefix=b"hairpin-"), 1.0, tag)
        except Failure:
            return False, None, False, m1
        src_seen = g2.received(prefix=b"hairpin-")[0][1]
        g2.send(src_seen, "back-" + tag, count=3, interval=0.05)
        try:
            wait_for(lambda: g1.received(prefix=b"back-"), 1.0, tag + " back")
            back = True
        except Failure:
            back = False
        return True, src_seen, back, m1
    finally:
        g1.close()
        g2.close()


def check_natpmp(lab, n, n1, u, u1):
    check(os.path.exists(NATPMP_PROBE), "%s missing: build tools/" % NATPMP_PROBE)
    probe = n1.proc([NATPMP_PROBE, "--lifetime", "4"], "natpmp-probe", stdin=subprocess.PIPE)
    m = probe.wait_line(r"^bound udp=(\d+) tcp=(\d+)$", timeout=5)
    uport, tport = int(m.group(1)), int(m.group(2))
    t_map = time.monotonic()
    m = probe.wait_line(NATPMP_MAP, timeout=10)
    step("natpmp_map answered in %.3fs: %s" % (time.monotonic() - t_map, m.group(0)))
    check(m.group(1) == "map" and m.group(2) == "1" and m.group(3) == n.router.lan_ip and
          m.group(4) == n.public_ip, "NAT-PMP gateway %s, WAN %s: %s" % (
              n.router.lan_ip, n.public_ip, m.group(0)))
    check(m.group(5) == "1" and m.group(6) == "1" and m.group(7) == str(uport) and
          m.group(8) == str(tport) and m.group(9) == "4" and m.group(10) == "",
          "mapped external = internal for 4 s: %s" % m.group(0))
    check(n.mapped(uport) == ["udp"] and n.mapped(tport) == ["tcp"],
          "nft rules for udp/%d tcp/%d:\n%s" % (uport, tport, n.upnp_rules()))
    pub = lab.publics[0]
    x = pub.agent()
    x.send((n.public_ip, uport), "natpmp-unsolicited", count=3, interval=0.05)
    probe.wait_line(r"^udp-recv from=%s:%d .*data=natpmp-unsolicited" % (
        re.escape(pub.addr), x.port), timeout=3)
    m = probe.wait_line(NATPMP_MAP.replace("(map|renew)", "(renew)"), timeout=5)
    check(m.group(5) == "1" and m.group(7) == str(uport), "the renewal: %s" % m.group(0))
    step("NAT-PMP: rules for udp/%d tcp/%d, unsolicited UDP in, renewed at half-life" % (
        uport, tport))
    n_out = len(probe.output())
    probe.p.stdin.write(b"unmap\n")
    probe.p.stdin.flush()
    m = probe.wait_line(r"^unmap udp=(\d) tcp=(\d) error=\"(.*)\"$", timeout=10, start=n_out)
    check(m.group(1) == "0" and m.group(2) == "0" and m.group(3) == "", "unmap: %s" % m.group(0))
    check(n.mapped(uport) == [] and n.mapped(tport) == [], "rules left:\n%s" % n.upnp_rules())
    # From a fresh source port: conntrack keeps forwarding a flow it has
    # seen both ways (x's) after miniupnpd dropped the DNAT rule; a new
    # flow meets no rule and the router's drop.
    x.close()
    x = pub.agent()
    n_out = len(probe.output())
    x.send((n.public_ip, uport), "natpmp-after", count=10, interval=0.05)
    time.sleep(0.8)  # the absence of a datagram: a bounded wait is the check
    check(not probe.grep(r"data=natpmp-after", start=n_out), "datagram after the unmap arrived")
    probe.p.stdin.write(b"quit\n")
    probe.p.stdin.flush()
    probe.wait_line(r"^unmap-sync ret=0$", timeout=10)
    check(probe.wait_exit(10) == 0, "natpmp-probe exit status %s" % probe.p.returncode)
    x.close()
    step("NAT-PMP unmap: rules gone, port closed")

    # NAT-PMP only: no UPnP at all.
    up = n1.proc([PROBE_BIN, "--hold-ms", "0"], "upnpc-probe-natpmp-only")
    m = up.wait_line(r"^map igd=(\d) ", timeout=10)
    check(m.group(1) == "0", "the NAT-PMP-only router answered UPnP: %s" % m.group(0))
    up.wait_exit(10)
    tcp = n.router.sh("ss", "-Hltn").stdout.strip()
    udp = n.router.sh("ss", "-Hlun").stdout
    check(tcp == "" and ":1900" not in udp and ":5351" in udp,
          "miniupnpd listens on udp/5351 only:\n%s\n%s" % (tcp, udp))
    step("NAT-PMP-only: no IGD found, nothing on TCP or udp/1900")

    # The UPnP router speaks NAT-PMP too.
    probe = u1.proc([NATPMP_PROBE, "--no-tcp"], "natpmp-probe-upnp", stdin=subprocess.PIPE)
    uport = int(probe.wait_line(r"^bound udp=(\d+)", timeout=5).group(1))
    m = probe.wait_line(NATPMP_MAP, timeout=10)
    check(m.group(2) == "1" and m.group(4) == u.public_ip and m.group(5) == "1" and
          m.group(7) == str(uport), "NAT-PMP on the UPnP router: %s" % m.group(0))
    check(u.mapped(uport) == ["udp"], "no rule for udp/%d:\n%s" % (uport, u.upnp_rules()))
    probe.signal(signal.SIGTERM)
    probe.wait_line(r"^unmap-sync ret=1$", timeout=10)
    check(probe.wait_exit(10) == 0, "natpmp-probe (upnp) exit status %s" % probe.p.returncode)
    check(u.mapped(uport) == [], "rules left after natpmp_unmap_sync:\n%s" % u.upnp_rules())
    step("the UPnP router answers NAT-PMP too; natpmp_unmap_sync on SIGTERM removes it")


def check_hairpin(lab, a, a1, a2, hp, hp1, hp2, inr, in1):
    got, _, _, _ = hairpin_to(lab, a1, a2, "plain")
    check(not got, "a cone without hairpin=True hairpinned")
    step("plain cone: a1 -> a2's public mapping does not arrive (no hairpin)")
    n0 = hp.router.hairpin_packets()
    got, src, back, m1 = hairpin_to(lab, hp1, hp2, "hp")
    check(got and src == m1, "hairpin: arrived %s from %r (the sender's mapping %r)" % (
        got, src, m1))
    check(back, "hairpin: the answer to %r did not come back" % (src,))
    check(hp.router.hairpin_packets() > n0, "the hairpin SNAT counter did not move")
    step("hairpin=True: hp1 -> hp2's mapping arrives from %s:%d, the answer returns" % src)

    ag = in1.agent()
    m = ag.stun(lab.internet.stun_servers[0])
    ag.close()
    check(m and m[0] == hp.public_ip, "double NAT: mapped %r, outer WAN %s" % (m, hp.public_ip))
    check(inr.public_ip == hp.public_ip and inr.wan_ip.startswith("198.19.%d." % hp.index),
          "inner WAN %s on the outer LAN, public %s" % (inr.wan_ip, inr.public_ip))
    g1, g2 = in1.agent(), hp1.agent()
    g1.send((hp1.addr, g2.port), "outer-lan", count=3)
    wait_for(lambda: g2.received(src=(inr.wan_ip, g1.port), prefix=b"outer-lan"), 3,
             "hp1 to hear in1 on the outer LAN (from the inner router's %s)" % inr.wan_ip)
    g1.close()
    g2.close()
    got, src, back, _ = hairpin_to(lab, in1, hp1, "in-out")
    check(got and back and src[0] == hp.public_ip,
          "inner -> outer host's mapping through the outer hairpin: %s %r %s" % (got, src, back))
    got, _, _, _ = hairpin_to(lab, hp1, in1, "out-in")
    check(not got, "the inner NAT let an unsolicited datagram in")
    step("double NAT: in1 maps to %s, reaches hp1 on the LAN and through the hairpin; "
         "the inner NAT filters" % hp.public_ip)


def scenario(env):
    step("start")
    lab = Lab(env)
    step("internet up (%s, rally-master at %s) in %.2fs" % (
        lab.internet.stun_kind, lab.internet.master_url, lab.setup_s))
    a = lab.site("a", "cone")
    b = lab.site("b", "cone")
    s = lab.site("s", "symmetric")
    t = lab.site("t", "symmetric")
    c = lab.site("c", "cgnat")
    step("5 NAT sites")
    u = lab.site("u", "upnp")
    step("UPnP site (miniupnpd STUN check done)")
    a1, a2, b1, s1, t1, c1, u1 = (a.host("h1"), a.host("h2"), b.host("h1"), s.host("h1"),
                                  t.host("h1"), c.host("h1"), u.host("h1"))
    pub = lab.public_host("x")
    step("hosts")

    # ---- NAT behaviour, seen through STUN ----
    m_a1 = check_cone(lab, a, a1)
    m_a2 = check_cone(lab, a, a2)
    check(m_a1[0] == m_a2[0] == a.public_ip, "same NAT, different public IPs: %r %r" % (m_a1, m_a2))
    check_cone(lab, b, b1)
    step("cone: one mapping for all 4 STUN endpoints; two hosts share the public IP")

    ag = s1.agent()
    seen = [ag.stun(srv) for srv in all_endpoints()]
    check(all(seen), "symmetric: a STUN answer is missing: %r" % seen)
    check(all(m[0] == s.public_ip for m in seen), "symmetric: mapped IPs %r" % seen)
    check(len(set(seen)) == len(seen), "symmetric: mappings repeat: %r" % seen)
    # The same destination again keeps its mapping (conntrack), as on a real NAT.
    check(ag.stun(all_endpoints()[0]) == seen[0], "symmetric: the mapping to one server moved")
    ag.close()
    step("symmetric: a new mapping per destination %r" % [m[1] for m in seen])

    home0, cgn0 = c.router.masq_packets(), c.cgn.masq_packets()
    ag = c1.agent()
    m1, m2 = ag.stun(lab.internet.stun_servers[0]), ag.stun(lab.internet.stun_servers[1])
    check(m1 and m1[0] == c.public_ip, "cgnat: mapped %r, carrier router WAN %s" % (m1, c.public_ip))
    check(m1 == m2, "cgnat (cone carrier): mappings differ %r %r" % (m1, m2))
    check(c.wan_ip != c.public_ip and c.wan_ip.startswith("198.19."),
          "cgnat: the home router's WAN %s is not a carrier address" % c.wan_ip)
    home1, cgn1 = c.router.masq_packets(), c.cgn.masq_packets()
    check(home1 > home0 and cgn1 > cgn0, "cgnat: masquerade counters home %d->%d, carrier %d->%d" % (
        home0, home1, cgn0, cgn1))
    ag.close()
    step("cgnat: mapped to the carrier's %s through both routers (home %s)" % (m1[0], c.wan_ip))

    # ---- same-NAT LAN path ----
    g1, g2 = a1.agent(), a2.agent()
    g1.send((a2.addr, g2.port), "lan-hello", count=3)
    wait_for(lambda: g2.received(src=(a1.addr, g1.port), prefix=b"lan-hello"), 3,
             "a2 to hear a1 on the LAN")
    g1.close()
    g2.close()
    step("same NAT: a1 -> a2 on the LAN from %s" % a1.addr)

    # ---- punching ----
    pa, pb = a1.agent(), b1.agent()
    ok_a, ok_b, dt = punch(pa, pb, timeout=3)
    check(ok_a and ok_b, "cone x cone punch failed (a heard b: %s, b heard a: %s)" % (ok_a, ok_b))
    step("cone x cone punch: both ends heard each other after %.0f ms" % (dt * 1000))
    ps, pt = s1.agent(), t1.agent()
    ok_s, ok_t, _ = punch(ps, pt, timeout=1.5)
    check(not ok_s and not ok_t, "symmetric x symmetric punch worked: the NAT is not symmetric")
    step("symmetric x symmetric punch: fails, as it must")
    pa2, ps2 = a2.agent(), s1.agent()
    ok_a, ok_s, _ = punch(pa2, ps2, timeout=1.5)
    check(not ok_a and not ok_s, "cone x symmetric punch worked (a %s, s %s)" % (ok_a, ok_s))
    step("cone x symmetric punch: fails too (port-restricted cone: relay needed)")
    for x in (pa, pb, ps, pt, pa2, ps2):
        x.close()

    # ---- rally-master from everywhere ----
    for h in (a1, a2, b1, s1, t1, c1, u1, pub):
        st, body = h.http("GET", lab.internet.master_url + "/health")
        check(st == 200, "%s: GET /health -> %s %s" % (h.name, st, body))
    step("rally-master /health: 200 from all 8 hosts")

    check_v6(lab)

    # ---- UPnP through common/upnp.c ----
    check(os.path.exists(PROBE_BIN), "%s missing: build tools/" % PROBE_BIN)
    probe = u1.proc([PROBE_BIN, "--wait-stdin", "--desc", "rally lab selftest"], "upnpc-probe",
                    stdin=subprocess.PIPE)
    m = probe.wait_line(r"^bound udp=(\d+) tcp=(\d+)$", timeout=5)
    uport, tport = int(m.group(1)), int(m.group(2))
    t_map = time.monotonic()
    m = probe.wait_line(r"^map igd=(\d) status=(\d) external=(\S+) lan=(\S+) udp=(\d) tcp=(\d) "
                        r"error=\"(.*)\"$", timeout=15)
    step("upnp_map answered in %.2fs: %s" % (time.monotonic() - t_map, m.group(0)))
    check(m.group(1) == "1" and m.group(2) in ("1", "2"), "no usable IGD: %s" % m.group(0))
    check(m.group(3) == u.public_ip, "external %s, router WAN %s" % (m.group(3), u.public_ip))
    check(m.group(4) == u1.addr, "lan %s, host %s" % (m.group(4), u1.addr))
    check(m.group(5) == "1" and m.group(6) == "1" and m.group(7) == "",
          "mapping failed: %s" % m.group(0))
    rules = u.upnp_rules()
    for port in (uport, tport):
        check(re.search(r"dport %d dnat ip to %s:%d" % (port, re.escape(u1.addr), port), rules),
              "no DNAT rule for %d in:\n%s" % (port, rules))
    fwd = [int(p) for p in re.findall(r"th dport (\d+) .*accept", rules)]
    check(uport in fwd and tport in fwd, "no forward rules in:\n%s" % rules)
    step("nft: DNAT + forward rules for udp/%d and tcp/%d" % (uport, tport))

    x = pub.agent()
    x.send((u.public_ip, uport), "unsolicited-1", count=3, interval=0.05)
    m = probe.wait_line(r"^udp-recv from=(\S+) len=\d+ data=unsolicited-1", timeout=3)
    check(m.group(1) == "%s:%d" % (pub.addr, x.port), "source %s, sender %s:%d" % (
        m.group(1), pub.addr, x.port))
    wait_for(lambda: x.received(src=(u.public_ip, uport), prefix=b"unsolicited-1"), 3,
             "the probe's echo from the router's WAN address")
    out = pub.py("import socket\n"
                 "s=socket.create_connection((%r,%d),timeout=3)\n"
                 "print(s.recv(64).decode().strip())\n" % (u.public_ip, tport))
    check(out.strip() == "rally-probe", "TCP through the mapping: %r" % out)
    probe.wait_line(r"^tcp-accept from=%s:" % re.escape(pub.addr), timeout=3)
    step("unsolicited UDP and TCP from %s reach the host through %s" % (pub.addr, u.public_ip))

    n_out = len(probe.output())
    probe.p.stdin.write(b"unmap\n")
    probe.p.stdin.flush()
    m = probe.wait_line(r"^unmap udp=(\d) tcp=(\d) error=\"(.*)\"$", timeout=10, start=n_out)
    check(m.group(1) == "0" and m.group(2) == "0" and m.group(3) == "", "unmap: %s" % m.group(0))
    rules = u.upnp_rules()
    check(not re.search(r"dport (%d|%d)" % (uport, tport), rules), "rules left:\n%s" % rules)
    n_out = len(probe.output())
    x.send((u.public_ip, uport), "unsolicited-2", count=10, interval=0.05)
    time.sleep(0.8)  # the absence of a datagram: a bounded wait is the check
    check(not probe.grep(r"data=unsolicited-2", start=n_out), "datagram after the unmap arrived")
    check(probe.wait_exit(10) == 0, "upnpc-probe exit status %s" % probe.p.returncode)
    x.close()
    step("after the unmap the rules are gone and the port is closed")

    # upnp_unmap_sync (the lobby's exit path), on SIGTERM.
    probe = u1.proc([PROBE_BIN, "--wait-stdin", "--udp", "29471", "--tcp", "29471"],
                    "upnpc-probe-sync", stdin=subprocess.PIPE)
    probe.wait_line(r"^map igd=1 .* udp=1 tcp=1 error=\"\"$", timeout=15)
    check("dport 29471" in u.upnp_rules(), "no rules for 29471")
    probe.signal(signal.SIGTERM)
    probe.wait_line(r"^unmap-sync ret=0$", timeout=10)
    check(probe.wait_exit(10) == 0, "upnpc-probe (sync) exit status %s" % probe.p.returncode)
    check("dport 29471" not in u.upnp_rules(), "rules left after unmap_sync")
    step("upnp_unmap_sync on SIGTERM removes both mappings")

    # ---- NAT-PMP, hairpin, double NAT ----
    n = lab.site("n", "natpmp")
    hp = lab.site("hp", "cone", hairpin=True)
    inr = lab.site("in", "cone", inside=hp)
    n1, hp1, hp2, in1 = n.host("h1"), hp.host("h1"), hp.host("h2"), inr.host("h1")
    step("NAT-PMP site, hairpinning cone, double NAT inside it")
    check_natpmp(lab, n, n1, u, u1)
    check_hairpin(lab, a, a1, a2, hp, hp1, hp2, inr, in1)
    env.daemons_alive(lab.internet.master, lab.internet.stun_proc, u.miniupnpd, n.miniupnpd)
    env.lab_prefix = lab.prefix


def check_v6(lab):
    o = lab.site("o", "cone", v6="open")
    p = lab.site("p", "symmetric", v6="open")
    f = lab.site("f", "cone", v6="firewall")
    g = lab.site("g", "cgnat", v6="open")
    o1, o6, p1, f1 = o.host("h1"), o.host("six", v6only=True), p.host("h1"), f.host("h1")
    g1 = g.host("h1")
    y = lab.public_host("y", v6=True)
    check(o1.addr6 == "2001:db8:%x::10" % o.index and o6.addr is None and
          o6.addr6 == "2001:db8:%x::11" % o.index, "v6 addresses %r %r" % (o1.addr6, o6.addr6))
    step("v6 sites: open %s, open %s, firewall %s; public %s" % (
        o.prefix6, p.prefix6, f.prefix6, y.addr6))

    # Open x open: both ways, the sender's own address and port (no NAT66).
    go, gp = o1.agent(v6=True), p1.agent(v6=True)
    go.send((p1.addr6, gp.port), "v6-o", count=3)
    gp.send((o1.addr6, go.port), "v6-p", count=3)
    wait_for(lambda: gp.received(src=(o1.addr6, go.port), prefix=b"v6-o"), 3,
             "p1 to hear o1 over v6 from its own address")
    wait_for(lambda: go.received(src=(p1.addr6, gp.port), prefix=b"v6-p"), 3,
             "o1 to hear p1 over v6 (a symmetric v4 NAT does nothing to v6)")
    step("v6 open x open: both ways, from [%s]:%d, no NAT66" % (o1.addr6, go.port))
    gg = g1.agent(v6=True)
    go.send((g1.addr6, gg.port), "v6-to-cgnat", count=3)
    wait_for(lambda: gg.received(src=(o1.addr6, go.port), prefix=b"v6-to-cgnat"), 3,
             "a host behind a CGN to hear o1 over v6 (the carrier routes v6)")
    gg.close()
    step("v6 through a carrier: %s behind the CGN reachable" % g1.addr6)

    # Firewall: unsolicited in is dropped; after the inside host sent, it passes.
    gf, gy = f1.agent(v6=True), y.agent(v6=True)
    gy.send((f1.addr6, gf.port), "unsolicited-v6", count=10, interval=0.05)
    gp.send((f1.addr6, gf.port), "unsolicited-v6", count=10, interval=0.05)
    time.sleep(0.8)  # the absence of a datagram: a bounded wait is the check
    check(not gf.received(prefix=b"unsolicited-v6"), "unsolicited v6 got into the firewall site")
    gf.send((y.addr6, gy.port), "v6-out", count=3)
    wait_for(lambda: gy.received(src=(f1.addr6, gf.port), prefix=b"v6-out"), 3,
             "y to hear the firewalled host first")
    gy.send((f1.addr6, gf.port), "v6-back", count=3)
    wait_for(lambda: gf.received(src=(y.addr6, gy.port), prefix=b"v6-back"), 3,
             "the answer through the firewall's conntrack entry")
    check(not gf.received(src=(p1.addr6, gp.port)), "another peer got in on y's hole")
    step("v6 firewall: unsolicited dropped, in after the inside host sent first")
    for x in (go, gp, gf, gy):
        x.close()

    # A v6-only host: the master's v6 listener, not its v4 one.
    for h in (o1, o6, p1, f1, y):
        st, body = h.http("GET", lab.internet.master_url6 + "/health")
        check(st == 200, "%s: GET /health over v6 -> %s %s" % (h.name, st, body))
    st, _ = o6.http("GET", lab.internet.master_url + "/health", timeout=2)
    check(st == 0, "a v6-only host reached the master over IPv4 (%s)" % st)
    step("rally-master's v6 listener answers 5 hosts; a v6-only host has no IPv4 to it")


_CHILD = r"""
import os, sys, time
sys.path.insert(0, %r)
from lab import Env, Lab
env = Env("lab-child")
try:
    lab = Lab(env, master=False)
    site = lab.site("k", "cone")
    site.host("h1")
    print("prefix", lab.prefix, env.dir, flush=True)
    time.sleep(60)
finally:
    env.close(True)
"""


def check_cleanup_on(sig):
    """A child lab killed by sig leaves no namespace behind."""
    p = subprocess.Popen([PYTHON, "-u", "-c", _CHILD % os.path.dirname(os.path.abspath(__file__))],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = p.stdout.readline()
        if not line.startswith("prefix "):
            raise Failure("child lab: %r %s" % (line, p.stdout.read()))
        prefix, tmpdir = line.split()[1:3]
        check(len(lab_namespaces(prefix)) == 4, "child namespaces: %r" % lab_namespaces(prefix))
        os.kill(p.pid, sig)
        p.wait(10)
        wait_for(lambda: not lab_namespaces(prefix), 10,
                 "the namespaces of a lab killed by signal %d to go" % sig)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    shutil.rmtree(tmpdir, ignore_errors=True)
    return prefix


def main():
    name = "lab_selftest"
    env = Env(name)
    ok = False
    try:
        scenario(env)
        ok = True
    except Failure as e:
        print("FAIL %s: %s" % (name, e))
    except Exception:
        import traceback
        traceback.print_exc()
    finally:
        env.close(ok)
    prefix = getattr(env, "lab_prefix", None)
    if ok:
        left = lab_namespaces(prefix)
        if left:
            print("FAIL %s: namespaces left after the test: %r" % (name, left))
            ok = False
        else:
            step("all namespaces of %s* deleted" % prefix)
    if ok:
        try:
            check_cleanup_on(signal.SIGTERM)
            step("a lab ended by SIGTERM deletes its namespaces")
            check_cleanup_on(signal.SIGKILL)
            step("a lab killed by SIGKILL: the reaper deletes its namespaces")
        except Failure as e:
            print("FAIL %s: %s" % (name, e))
            ok = False
    if ok:
        print("PASS %s (%.1fs)" % (name, time.monotonic() - T0))
    sys.exit(0 if ok else 1)


main()
