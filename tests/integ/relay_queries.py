#!/usr/bin/env python3
"""With the query cache off (--query-cache off: etrelay's way), a real
OpenArena server answers getinfo, getstatus and getchallenge through the
relay's port - from the relay's public port - and qstat sees the server
through the relay; --debug prints the seed's session and command lines;
/sessions shows the real client and the upstream port the server sees.
relay_qcache_splice covers the same queries answered by the cache."""

import subprocess

from harness import OAServer, Relay, check, first_token, query, run, udp_socket_ports, wait_for


def scenario(env):
    oa = OAServer(env)
    relay = Relay(env, oa.addr, args=["--query-cache", "off"])
    c = env.udp()
    caddr = c.getsockname()

    for cmd, want in (("getinfo xyz", "infoResponse"), ("getstatus", "statusResponse"),
                      ("getchallenge", "challengeResponse")):
        got = query(c, relay.addr, cmd, timeout=2)
        check(got is not None, "%s through the relay: no answer" % cmd)
        data, src = got
        check(first_token(data) == want, "%s: got %r" % (cmd, data[:40]))
        check(src == relay.addr, "%s: answer came from %s, not the relay's public %s" % (
            cmd, src, relay.addr))
    data, _ = query(c, relay.addr, "getinfo abc123", timeout=2)
    check(b"\\challenge\\abc123" in data, "getinfo's challenge not echoed: %r" % data[:200])
    check(("\\sv_hostname\\" + oa.hostname).encode() in data or oa.hostname.encode() in data,
          "infoResponse is not from our server")

    # qstat, a real query client, through the relay.
    out = subprocess.run(["quakestat", "-q3s", "%s:%d" % relay.addr, "-R", "-timeout", "3"],
                         capture_output=True, text=True, timeout=20).stdout
    check(oa.hostname in out and "oa_dm1" in out, "quakestat -q3s through the relay:\n" + out)

    # The seed's --debug lines.
    relay.wait_line(r"session-open peer=127\.0\.0\.1:%d active=\d+ upstream_port=\d+" % caddr[1])
    relay.wait_line(r"oob peer=127\.0\.0\.1:%d dir=to-server cmd=getinfo len=\d+$" % caddr[1])
    relay.wait_line(r"oob peer=127\.0\.0\.1:%d dir=to-client cmd=infoResponse len=\d+" % caddr[1])
    relay.wait_line(r"oob peer=127\.0\.0\.1:%d dir=to-client cmd=challengeResponse len=\d+" % caddr[1])

    # /sessions: the real client address and the upstream port the server sees.
    st, sessions, _ = relay.api("GET", "/sessions")
    check(st == 200, "GET /sessions -> %s" % st)
    mine = [s for s in sessions if s["client"] == "127.0.0.1:%d" % caddr[1]]
    check(len(mine) == 1, "/sessions lacks our client: %r" % sessions)
    s = mine[0]
    check(s["to_server"]["packets"] == 4 and s["to_client"]["packets"] == 4,
          "session counters: %r" % s)
    check(s["to_server"]["bytes"] > 0 and s["to_client"]["bytes"] > s["to_server"]["bytes"],
          "session byte counters: %r" % s)
    check(s["age_ms"] >= s["idle_ms"] >= 0, "age/idle: %r" % s)
    # The upstream port is a real socket of the relay, connected to the server.
    check(s["upstream_port"] in udp_socket_ports(relay.pid),
          "upstream port %d is not one of the relay's sockets" % s["upstream_port"])
    with open("/proc/net/udp") as f:
        rows = [ln.split() for ln in f][1:]
    conn = [r for r in rows if int(r[1].split(":")[1], 16) == s["upstream_port"]]
    check(conn and int(conn[0][2].split(":")[1], 16) == oa.addr[1],
          "upstream socket %d is not connected to the server port %d" % (s["upstream_port"], oa.addr[1]))

    m = relay.metrics()
    check(m['rally_relay_packets_total{direction="to_server"}'] >= 6, "metrics: %r" % m)
    check(m["rally_relay_sessions"] >= 1, "metrics sessions: %r" % m)
    env.daemons_alive(relay, oa)


run(scenario)
