#!/usr/bin/env python3
"""Transparent mode in namespaces of the test's own: the game server sees
each player's own address.

A server namespace runs a real OpenArena server on 127.0.0.1 and
rally-relay --transparent in front of it; two client namespaces
(10.77.1.2, 10.77.2.2) each connect a scripted Quake 3 client (q3connect.py, q3client's player:
getchallenge, challengeResponse, the Huffman-coded connect, connectResponse)
through the relay. Checked:
- without the policy routing, the relay refuses to start and says what is
  missing (routing), and so does --check-config; without
  CAP_NET_ADMIN/CAP_NET_RAW, the capability;
- with tools/relay-transparent-setup up, the server's own `status` (rcon,
  from inside the server namespace, straight to the server) lists both
  players at their own addresses, /sessions marks them transparent with
  the players' own ports, /metrics counts them;
- one player (one address and port) reaching two servers of one relay: the
  second session keeps the address and takes another port
  (port_taken), and both servers see 10.77.1.2;
- the fallback (no --transparent): the server sees 127.0.0.1, and
  /sessions and the relay's session-player log line map the upstream port
  back to the player's address;
- IPv6 the same way: a server on ::1 lists a player at fd77:1::2; an IPv6
  player in front of an IPv4 server keeps the relay's address, counted
  (bind_fail{reason="family"}) and shown (transparent: false);
- a server on another machine (a namespace whose gateway is the relay's
  host): refused without the rule, then lists the player at 10.77.1.2;
- relay-transparent-setup down removes everything (check fails again)."""

import json
import os
import re
import signal
import time

from harness import (OA_SERVER, RELAY_BIN, TOKEN, Netns, Proc, check, ns_http, parse_addr,
                     parse_metrics, run, udp_socket_ports, veth, wait_for)

HERE = os.path.dirname(os.path.abspath(__file__))
SETUP = os.path.join(HERE, "..", "..", "tools", "relay-transparent-setup")
CLIENT = os.path.join(HERE, "q3connect.py")
RCON = "tp-rcon"


def oa_server(env, ns, name, v6=False, ip="127.0.0.1"):
    """A real OpenArena server in ns on ip (::1 with v6), port 0."""
    home = os.path.join(env.dir, name)
    os.makedirs(home)
    argv = [OA_SERVER, "+set", "fs_homepath", home, "+set", "dedicated", "1"]
    if v6:
        argv += ["+set", "net_enabled", "2", "+set", "net_ip6", "::1", "+set", "net_port6", "0"]
    else:
        argv += ["+set", "net_enabled", "1", "+set", "net_ip", ip, "+set", "net_port", "0"]
    for i in range(1, 6):
        argv += ["+set", "sv_master%d" % i, ""]
    argv += ["+set", "sv_hostname", name, "+set", "rconpassword", RCON, "+set", "ttycon", "0",
             "+set", "com_hunkmegs", "64", "+map", "oa_dm1"]
    p = Proc(env, name, ns.argv(*argv), cwd=home)
    ports = wait_for(lambda: udp_socket_ports(p.pid), 30, "%s to bind" % name)
    p.addr = ("::1" if v6 else ip, ports[0])
    wait_for(lambda: "infoResponse" in rcon(ns, p.addr, None, "getinfo x"), 30,
             "%s to answer getinfo" % name)
    return p


def rcon(ns, addr, pw, cmd):
    """An out-of-band command (rcon when pw is given) from inside ns, straight
    to addr; every answer datagram's text, joined."""
    payload = ("rcon %s %s" % (pw, cmd)) if pw else cmd
    return ns.py(
        "import socket\n"
        "s=socket.socket(socket.AF_INET6 if ':' in %r else socket.AF_INET,socket.SOCK_DGRAM)\n"
        "s.sendto(b'\\xff\\xff\\xff\\xff'+%r.encode(), %r)\n"
        "s.settimeout(0.5); out=[]\n"
        "try:\n"
        "  while True: out.append(s.recvfrom(65535)[0][4:].decode('latin-1'))\n"
        "except socket.timeout: pass\n"
        "print(''.join(out))\n" % (addr[0], payload, addr))


def status_addrs(ns, oa):
    """The addresses the server's `status` lists for its clients."""
    text = rcon(ns, oa.addr, RCON, "status")
    out = []
    for ln in text.splitlines():
        m = re.match(r"^\s*\d+\s+-?\d+\s+\S+\s+(.*?)\s+(\S+)\s+\d+\s*$", ln)
        if m:
            out.append(re.sub(r"\^\d", "", m.group(2)))
    return out, text


def hostport(a):
    return ("[%s]:%d" if ":" in a[0] else "%s:%d") % a


def relay_argv(ns, env, tag, server, extra=(), prefix=(), listen="0.0.0.0:0"):
    return ns.argv(*(list(prefix) + [
        RELAY_BIN, "--listen", listen, "--server", hostport(server), "--no-heartbeat",
        "--state-dir", os.path.join(env.dir, "state-" + tag), "--control", "127.0.0.1:0",
        "--token-file", os.path.join(env.dir, "token"), "--log", "plain"] + list(extra)))


def ready(relay):
    m = relay.wait_line(r"^ready ((?:listen\S*=\S+ ?)+) control=(\S+)$", 15)
    pubs = {}
    for t in m.group(1).split():
        k, _, v = t.partition("=")
        pubs[k] = parse_addr(v)
    return pubs, parse_addr(m.group(2))


def api(ns, control, path):
    st, body = ns_http(ns, "http://%s:%d%s" % (control[0], control[1], path), TOKEN)
    check(st == 200, "GET %s -> %s %s" % (path, st, body))
    return body


def connect(env, ns, front, name, bind=None):
    """A scripted client in ns connects through front and holds its slot;
    returns (process, its local address)."""
    p = Proc(env, name, ns.argv(*(["/usr/bin/python3", "-u", CLIENT, front[0], str(front[1]),
                                   "--name", name, "--hold", "120"] +
                                  (["--bind", bind] if bind else []))))
    m = p.wait_line(r"^connected local=(\S+)$", 20)
    return p, parse_addr(m.group(1))


def scenario(env):
    with open(os.path.join(env.dir, "token"), "w") as f:
        f.write(TOKEN + "\n")
    # (veth() names the pair after the namespace count: one pair each.)
    srv, ca = Netns(env, "s"), Netns(env, "a")
    vs, vc = veth(srv, ca, "10.77.1.1", "10.77.1.2", 24)
    cb = Netns(env, "b")
    veth(srv, cb, "10.77.2.1", "10.77.2.2", 24)
    ca.ip("route", "add", "default", "via", "10.77.1.1")
    cb.ip("route", "add", "default", "via", "10.77.2.1")
    oa = oa_server(env, srv, "oa1")
    target = "%s:%d" % oa.addr

    # ---- refused without the routing, and without the capability ----
    r = srv.run(SETUP, "check", target, capture_output=True, text=True)
    check(r.returncode == 1 and "what=rule" in r.stdout, "check before up: %r" % (r.stdout,))
    bad = Proc(env, "relay-norouting", relay_argv(srv, env, "nr", oa.addr, ["--transparent"]))
    st = bad.wait_exit(10)
    check(st == 1, "relay without routing exited %s" % st)
    check(bad.grep(r"transparent-unavailable server=127\.0\.0\.1:%d missing=routing .*"
                   r"relay-transparent-setup up 127\.0\.0\.1:%d" % (oa.addr[1], oa.addr[1])),
          "no clear routing error:\n%s" % "\n".join(bad.output()))
    check(not bad.grep(r"^ready"), "it got ready anyway")
    chk = Proc(env, "relay-check", relay_argv(srv, env, "ck", oa.addr,
                                              ["--transparent", "--check-config"]))
    check(chk.wait_exit(10) == 1 and chk.grep(r"transparent-unavailable .*missing=routing"),
          "--check-config without routing:\n%s" % "\n".join(chk.output()))

    r = srv.run(SETUP, "up", target, capture_output=True, text=True)
    check(r.returncode == 0, "setup up: %s %s" % (r.stdout, r.stderr))
    r = srv.run(SETUP, "up", target, capture_output=True, text=True)
    check(r.returncode == 0, "setup up again: %s %s" % (r.stdout, r.stderr))
    rules = srv.run("ip", "rule", "show", "pref", "2796", capture_output=True, text=True).stdout
    check(len(rules.strip().splitlines()) == 1, "up twice made %r" % rules)
    r = srv.run(SETUP, "check", target, capture_output=True, text=True)
    check(r.returncode == 0 and "ok server=" in r.stdout, "check after up: %r" % r.stdout)
    chk = Proc(env, "relay-check-ok", relay_argv(srv, env, "ck2", oa.addr,
                                                 ["--transparent", "--check-config"]))
    check(chk.wait_exit(10) == 0 and chk.grep(r"^config-ok server=127\.0\.0\.1:"),
          "--check-config with routing:\n%s" % "\n".join(chk.output()))

    nocap = Proc(env, "relay-nocap", relay_argv(
        srv, env, "nc", oa.addr, ["--transparent"],
        prefix=["/usr/bin/setpriv", "--bounding-set=-net_admin,-net_raw",
                "--inh-caps=-net_admin,-net_raw"]))
    st = nocap.wait_exit(10)
    check(st == 1 and nocap.grep(r"transparent-unavailable .*missing=capability .*"
                                 r"Operation not permitted.*CAP_NET_ADMIN"),
          "no clear capability error (status %s):\n%s" % (st, "\n".join(nocap.output())))

    # ---- transparent: the server sees the players' own addresses ----
    relay = Proc(env, "relay", relay_argv(srv, env, "t", oa.addr, ["--transparent"]))
    pubs, control = ready(relay)
    port = pubs["listen"][1]
    pa, la = connect(env, ca, ("10.77.1.1", port), "alice")
    pb, lb = connect(env, cb, ("10.77.2.1", port), "bob")
    addrs, text = status_addrs(srv, oa)
    env.log("server status with --transparent:\n" + text)
    check(sorted(addrs) == ["10.77.1.2", "10.77.2.2"],
          "the server's status lists %r, not the players' own addresses" % addrs)
    sess = json.loads(api(srv, control, "/sessions"))
    by_ip = {s["client_ip"]: s for s in sess}
    for ip, local in (("10.77.1.2", la), ("10.77.2.2", lb)):
        s = by_ip.get(ip)
        check(s and s["transparent"] is True and s["confirmed"] is True,
              "session of %s: %r" % (ip, s))
        check(s["upstream_port"] == local[1] == s["client_port"],
              "the server should see the player's own port %d: %r" % (local[1], s))
    m = parse_metrics(api(srv, control, "/metrics"))
    check(m.get("rally_relay_transparent_sessions") == 2 and
          m.get("rally_relay_transparent_sessions_total") == 2 and
          m.get('rally_relay_transparent_bind_fail_total{reason="error"}') == 0,
          "metrics: %r" % {k: v for k, v in m.items() if "transparent" in k})
    relay.wait_line(r"session-player peer=10\.77\.1\.2:%d upstream_port=%d transparent=1$" %
                    (la[1], la[1]), 5)
    pa.stop()
    pb.stop()
    relay.stop()

    # ---- one player, two servers of one relay: the port is taken ----
    oa2 = oa_server(env, srv, "oa2")
    r = srv.run(SETUP, "up", target, "%s:%d" % oa2.addr, capture_output=True, text=True)
    check(r.returncode == 0, "setup up two: %s %s" % (r.stdout, r.stderr))
    sf = os.path.join(env.dir, "servers.conf")
    with open(sf, "w") as f:
        f.write("[defaults]\nno-heartbeat = yes\ntransparent = yes\n\n"
                "[server one]\nlisten = 0.0.0.0:0\nserver = %s:%d\n\n"
                "[server two]\nlisten = 0.0.0.0:0\nserver = %s:%d\n" % (oa.addr + oa2.addr))
    multi = Proc(env, "relay-multi", srv.argv(
        RELAY_BIN, "--servers", sf, "--state-dir", os.path.join(env.dir, "state-m"),
        "--control", "127.0.0.1:0", "--token-file", os.path.join(env.dir, "token"),
        "--log", "plain"))
    pubs, control = ready(multi)
    # The same socket (10.77.1.2:27015) connects to both servers.
    p1, l1 = connect(env, ca, ("10.77.1.1", pubs["listen.one"][1]), "carol", "10.77.1.2:27015")
    p1.stop()
    p2, l2 = connect(env, ca, ("10.77.1.1", pubs["listen.two"][1]), "carol", "10.77.1.2:27015")
    p2.stop()
    for o in (oa, oa2):
        addrs, text = status_addrs(srv, o)
        check("10.77.1.2" in addrs, "%s lists %r" % (o.name, addrs))
    sv = json.loads(api(srv, control, "/servers/two"))
    check(sv.get("transparent") is True, "/servers/two: %r" % sv)
    sess = {s["server"]: s for s in json.loads(api(srv, control, "/sessions"))}
    check(sess["one"]["upstream_port"] == 27015 and sess["one"]["transparent"],
          "server one: %r" % sess["one"])
    check(sess["two"]["upstream_port"] != 27015 and sess["two"]["transparent"] and
          sess["two"]["client_port"] == 27015, "server two: %r" % sess["two"])
    m = parse_metrics(api(srv, control, "/metrics"))
    check(m.get('rally_relay_transparent_port_taken_total{server="two"}') == 1 and
          m.get('rally_relay_transparent_port_taken_total{server="one"}') == 0,
          "port_taken: %r" % {k: v for k, v in m.items() if "port_taken" in k})
    env.log("one player at 10.77.1.2:27015 to two servers: upstream ports %d and %d" % (
        sess["one"]["upstream_port"], sess["two"]["upstream_port"]))
    multi.stop()

    # ---- the fallback: no --transparent, the mapping is in /sessions and the log ----
    plain = Proc(env, "relay-plain", relay_argv(srv, env, "p", oa2.addr))
    pubs, control = ready(plain)
    pd, ld = connect(env, cb, ("10.77.2.1", pubs["listen"][1]), "dave")
    addrs, text = status_addrs(srv, oa2)
    check("127.0.0.1" in addrs and "10.77.2.2" not in addrs, "plain relay: %r" % addrs)
    s = [x for x in json.loads(api(srv, control, "/sessions")) if x["client_ip"] == "10.77.2.2"]
    check(len(s) == 1 and s[0]["transparent"] is False and s[0]["upstream_port"] != ld[1],
          "plain session: %r" % s)
    up = s[0]["upstream_port"]
    plain.wait_line(r"session-player peer=10\.77\.2\.2:%d upstream_port=%d$" % (ld[1], up), 5)
    # ioquake3 1.36 keeps only the IP in the player's record (status and
    # dumpuser say 127.0.0.1, no port): everyone through a plain relay is
    # one address to it, which is what transparent mode is for.
    dump = rcon(srv, oa2.addr, RCON, "dumpuser dave")
    env.log("dumpuser through the plain relay: %s" % " ".join(dump.split()))
    check(re.search(r"\bip\s+127\.0\.0\.1\s", dump), "dumpuser: %r" % dump)
    pd.stop()
    plain.signal(signal.SIGTERM)
    plain.wait_exit(10)
    plain.wait_line(r"session-close peer=10\.77\.2\.2:%d .*reason=\S+ .*upstream_port=%d$" %
                    (ld[1], up), 5)

    # ---- IPv6: the same, a player at fd77:1::2, a server on ::1 ----
    srv.ip("addr", "add", "fd77:1::1/64", "dev", vs, "nodad")
    ca.ip("addr", "add", "fd77:1::2/64", "dev", vc, "nodad")
    oa6 = oa_server(env, srv, "oa6", v6=True)
    r = srv.run(SETUP, "up", hostport(oa6.addr), capture_output=True, text=True)
    check(r.returncode == 0, "setup up v6: %s %s" % (r.stdout, r.stderr))
    r6 = Proc(env, "relay-v6", relay_argv(srv, env, "v6", oa6.addr, ["--transparent"],
                                          listen="[::]:0"))
    pubs, control = ready(r6)
    p6, l6 = connect(env, ca, ("fd77:1::1", pubs["listen"][1]), "frank")
    addrs, text = status_addrs(srv, oa6)
    env.log("IPv6 server status with --transparent:\n" + text)
    check(addrs == ["fd77:1::2"], "the v6 server lists %r" % addrs)
    s6 = json.loads(api(srv, control, "/sessions"))
    check(len(s6) == 1 and s6[0]["transparent"] and s6[0]["client_ip"] == "fd77:1::2" and
          s6[0]["upstream_port"] == l6[1], "v6 session: %r" % s6)
    p6.stop()
    r6.stop()
    # An IPv6 player in front of an IPv4 server: no socket of the server's
    # family can carry its address; it keeps the relay's, counted, shown.
    rx = Proc(env, "relay-mixed", relay_argv(srv, env, "mx", oa.addr, ["--transparent"],
                                             listen="[::]:0"))
    pubs, control = ready(rx)
    px, lx = connect(env, ca, ("fd77:1::1", pubs["listen"][1]), "gina")
    sx = json.loads(api(srv, control, "/sessions"))
    check(len(sx) == 1 and sx[0]["transparent"] is False and sx[0]["client_ip"] == "fd77:1::2",
          "mixed session: %r" % sx)
    m = parse_metrics(api(srv, control, "/metrics"))
    check(m.get('rally_relay_transparent_bind_fail_total{reason="family"}') == 1 and
          m.get("rally_relay_transparent_sessions") == 0, "mixed metrics: %r" % {
              k: v for k, v in m.items() if "transparent" in k})
    addrs, text = status_addrs(srv, oa)
    check("127.0.0.1" in addrs, "the v4 server should see the relay for a v6 player: %r" % addrs)
    px.stop()
    rx.stop()

    # ---- a server reached through this host (its gateway): 10.77.4.2 ----
    game = Netns(env, "g")
    veth(srv, game, "10.77.4.1", "10.77.4.2", 24)
    oag = oa_server(env, game, "oa-game", ip="10.77.4.2")
    nogw = Proc(env, "relay-remote-norule", relay_argv(srv, env, "rn", oag.addr,
                                                       ["--transparent"]))
    check(nogw.wait_exit(10) == 1 and nogw.grep(
        r"transparent-unavailable server=10\.77\.4\.2:%d missing=routing .*addresses through "
        r"this host" % oag.addr[1]), "remote server without the rule:\n%s" %
        "\n".join(nogw.output()))
    r = srv.run(SETUP, "up", hostport(oag.addr), capture_output=True, text=True)
    check(r.returncode == 0, "setup up remote: %s %s" % (r.stdout, r.stderr))
    r = srv.run(SETUP, "check", hostport(oag.addr), capture_output=True, text=True)
    check(r.returncode == 0 and "ok server=" in r.stdout, "check remote: %r" % r.stdout)
    game.ip("route", "add", "default", "via", "10.77.4.1")
    rg = Proc(env, "relay-remote", relay_argv(srv, env, "rg", oag.addr, ["--transparent"]))
    pubs, control = ready(rg)
    pg, lg = connect(env, ca, ("10.77.1.1", pubs["listen"][1]), "hank")
    addrs, text = status_addrs(game, oag)
    check(addrs == ["10.77.1.2"], "the server on another machine lists %r" % addrs)
    sg = json.loads(api(srv, control, "/sessions"))
    check(len(sg) == 1 and sg[0]["transparent"] and sg[0]["upstream_port"] == lg[1],
          "remote session: %r" % sg)
    env.log("a server reached through the relay's host lists the player at %s" % addrs[0])
    pg.stop()
    rg.stop()

    # ---- down: gone, and the relay is refused again ----
    r = srv.run(SETUP, "down", capture_output=True, text=True)
    check(r.returncode == 0, "down: %r" % r.stderr)
    r = srv.run(SETUP, "check", target, capture_output=True, text=True)
    check(r.returncode == 1, "check after down: %r" % r.stdout)
    left = srv.run("ip", "rule", "show", "pref", "2796", capture_output=True, text=True).stdout
    table = srv.run("ip", "route", "show", "table", "2796", capture_output=True, text=True).stdout
    left6 = srv.run("ip", "-6", "rule", "show", "pref", "2796", capture_output=True,
                    text=True).stdout
    table6 = srv.run("ip", "-6", "route", "show", "table", "2796", capture_output=True,
                     text=True).stdout
    check(left.strip() == table.strip() == left6.strip() == table6.strip() == "",
          "left after down: %r %r %r %r" % (left, table, left6, table6))
    env.daemons_alive(oa, oa2, oa6, oag)


if __name__ == "__main__":  # relay_transparent_agent.py imports the helpers
    run(scenario)
