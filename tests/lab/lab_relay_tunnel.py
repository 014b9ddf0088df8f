#!/usr/bin/python3
"""Lab: a Quake 3 engine server at home behind a symmetric NAT, fronted by
rally-relay on a public host through the tunnel, with no port forwarding.

Site s is a symmetric NAT (nftables `masquerade fully-random`), so nothing
from outside can reach its host h. On h: a real OpenArena server (LAN mode,
it heartbeats nobody) and `rally-relay agent --server` beside it, dialing
out. On a public host: rally-relay with `--server tunnel:REALM`, heartbeating
the lab's rally-master. From another public host (a player): quakestat -q3s
against the relay's address reads the home server; the master lists the
relay's address, learnt from the home server's own infoResponse; rcon from
the player is dropped at the relay; the datagram path is UDP through the
NAT (the agent's pings keep its mapping); with UDP cut at the home router
the datagrams fall back to the WebSocket and the server stays readable,
and go back to UDP when it returns; killing the agent flatlines the server
at the master."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from lab import Lab  # noqa: E402
from harness import (OA_SERVER, RELAY_BIN, TOKEN, check, parse_metrics, run,  # noqa: E402
                     wait_for)

try:
    import nacl.signing
except ImportError:
    nacl = None

REALM = "6f9619ff-8b86-4011-b42d-00cf4fc964ff"


def quakestat(ns, kind, addr):
    r = ns.run("quakestat", "-retry", "2", "-raw", ",", "-nh", kind, "%s:%d" % addr,
               capture_output=True, text=True, timeout=30)
    return r.returncode, r.stdout, r.stderr


def metrics(ns):
    """The relay's /metrics, read inside its namespace with the token."""
    return parse_metrics(ns.py(
        "import urllib.request\n"
        "r=urllib.request.Request('http://127.0.0.1:8080/metrics',"
        "headers={'Authorization':'Bearer %s'})\n"
        "print(urllib.request.urlopen(r,timeout=5).read().decode())\n" % TOKEN))


def scenario(env):
    if nacl is None:
        print("SKIP lab_relay_tunnel: python3-nacl is not installed")
        sys.exit(77)
    lab = Lab(env, deadline=140, master_args=["--q3-challenge", "1500"])
    front_host = lab.public_host("relay")
    player = lab.public_host("player")
    s = lab.site("s", kind="symmetric")
    home = s.host("h")

    key = nacl.signing.SigningKey.generate()
    keys = os.path.join(env.dir, "realms")
    with open(keys, "w") as f:
        f.write("%s %s\n" % (REALM, bytes(key.verify_key).hex()))
    kfile = os.path.join(env.dir, "realm.key")
    with open(kfile, "w") as f:
        f.write(bytes(key).hex() + "\n")
    tok = os.path.join(env.dir, "token")
    with open(tok, "w") as f:
        f.write(TOKEN + "\n")

    # ---- the public side ----
    pub = front_host.addr
    master = lab.master.udp_addr
    relay = front_host.proc([
        RELAY_BIN, "--listen", "%s:27960" % pub, "--server", "tunnel:" + REALM,
        "--tunnel-listen", "%s:8082" % pub, "--tunnel-keys", keys, "--tunnel-relay-host", pub,
        "--tunnel-bind", pub, "--master", "%s:%d" % master, "--heartbeat-tag",
        "QuakeArena-1", "--heartbeat-interval", "2", "--probe-timeout", "500",
        "--control", "127.0.0.1:8080", "--token-file", tok, "--state-dir",
        os.path.join(env.dir, "relay-state"), "--log", "plain", "--debug"], "relay")
    relay.wait_line(r"ready listen=", 10)

    # ---- home, behind the symmetric NAT ----
    oa_home = os.path.join(env.dir, "oa-home")
    os.makedirs(oa_home)
    argv = [OA_SERVER, "+set", "fs_homepath", oa_home, "+set", "dedicated", "1",
            "+set", "net_enabled", "1", "+set", "net_ip", "127.0.0.1", "+set", "net_port",
            "27961", "+set", "sv_hostname", "lab-home", "+set", "rconpassword", "lab-rcon",
            "+set", "ttycon", "0", "+set", "com_hunkmegs", "64"]
    for i in range(1, 6):
        argv += ["+set", "sv_master%d" % i, ""]
    oa = home.proc(argv + ["+map", "oa_dm1"], "oa", cwd=oa_home)
    wait_for(lambda: home.py(
        "import socket\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM);s.settimeout(0.3)\n"
        "s.sendto(b'\\xff\\xff\\xff\\xffgetinfo x',('127.0.0.1',27961))\n"
        "try:\n print(b'infoResponse' in s.recv(4096))\nexcept OSError:\n print(False)\n"
    ).strip() == "True", 40, "the home server to answer")
    agent = home.proc([RELAY_BIN, "agent", "--relay", "ws://%s:8082/relay/v1/host" % pub,
                       "--realm-id", REALM, "--key", kfile, "--server", "127.0.0.1:27961",
                       "--log", "plain", "--debug"], "agent")
    agent.wait_line(r"tunnel-up", 15)
    agent.wait_line(r"tunnel-udp-up", 15)

    # ---- the player on the internet ----
    rc, out, err = quakestat(player, "-q3s", (pub, 27960))
    check(rc == 0 and "lab-home" in out, "quakestat -q3s through the relay: %r %r" % (out, err))
    lab.master.wait_line(r"q3-listed server=%s:27960 game=Quake3Arena" % pub.replace(".", r"\."),
                         20)
    rc, out, err = quakestat(player, "-q3m,71", master)
    check(rc == 0, "quakestat -q3m: %r" % err)
    lines = [ln.split(",") for ln in out.splitlines() if ln.strip()]
    listed = [ln[1] for ln in lines[1:]]
    check(listed == ["%s:27960" % pub], "the master lists %r, not the relay" % listed)
    check(lines[1][2] == "lab-home", "status via the master's list: %r" % lines[1])

    # rcon from the player: dropped at the relay, never at home
    player.py("import socket\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n"
              "s.sendto(b'\\xff\\xff\\xff\\xffrcon lab-rcon status',(%r,27960))\n" % pub)
    relay.wait_line(r"cmd=rcon .*drop=filtered", 5)
    wait_for(lambda: metrics(front_host).get('rally_relay_drops_total{reason="filtered"}', 0) >= 1,
             5, "rcon counted as filtered")
    check(not oa.grep(r"[Rr]con from"), "rcon reached the home server")
    m = metrics(front_host)
    check(m.get('rally_relay_tunnel_server_path{path="udp"}') == 1,
          "the datagram path is not UDP through the NAT: %r" %
          {k: v for k, v in m.items() if "path" in k})
    check(m.get("rally_relay_tunnel_udp_in_total", 0) > 0, "no UDP from the agent")
    env.log("through the symmetric NAT: udp in %d out %d, rtt %d us" % (
        m.get("rally_relay_tunnel_udp_in_total", 0), m.get("rally_relay_tunnel_udp_out_total", 0),
        m.get("rally_relay_tunnel_udp_rtt_us", 0)))

    # ---- UDP cut between home and the relay: the tunnel carries it ----
    # The home router drops every datagram between home and the relay (the
    # players' own UDP never crosses it). The agent misses its pongs and
    # says so, the relay stops hearing the agent and sends over the
    # WebSocket; a player still reads the server. UDP back: back on UDP.
    s.router.nft("table inet cut {\n chain f {\n  type filter hook forward priority -10;\n"
                 "  ip daddr %s meta l4proto udp drop\n  ip saddr %s meta l4proto udp drop\n"
                 " }\n}\n" % (pub, pub))
    agent.wait_line(r"tunnel-udp-lost relay=.* fallback=tunnel", 30)
    wait_for(lambda: metrics(front_host).get('rally_relay_tunnel_server_path{path="tunnel"}') == 1,
             30, "the relay to send over the tunnel")
    # The query cache's answer went stale while the cut was undetected (its
    # refreshes were lost); the first asker after the switch may wait for a
    # refresh over the WebSocket longer than quakestat does: as a player's
    # browser, ask again.
    got = []

    def readable():
        got[:] = quakestat(player, "-q3s", (pub, 27960))
        return got[0] == 0 and "lab-home" in got[1]
    wait_for(readable, 20, "quakestat -q3s with UDP cut (last: %r)" % (got,))
    env.log("UDP cut: the agent fell back, quakestat reads the server over the WebSocket")
    s.router.sh("nft", "delete", "table", "inet", "cut")
    wait_for(lambda: metrics(front_host).get('rally_relay_tunnel_server_path{path="udp"}') == 1,
             20, "the relay back on UDP")
    rc, out, err = quakestat(player, "-q3s", (pub, 27960))
    check(rc == 0 and "lab-home" in out, "quakestat -q3s with UDP back: %r %r" % (out, err))

    # ---- the agent killed: flatline at the master ----
    agent.p.kill()
    lab.master.wait_line(r"heartbeat peer=%s:27960 tag=ETFlatline-1" % pub.replace(".", r"\."),
                         15)
    lab.master.wait_line(r"q3-delisted server=%s:27960" % pub.replace(".", r"\."), 15)
    env.daemons_alive(relay, oa)


run(scenario)
