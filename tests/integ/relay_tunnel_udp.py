#!/usr/bin/env python3
"""A Quake 3 engine server at home, fronted through the tunnel: a real
OpenArena server (LAN mode, it heartbeats nobody) beside `rally-relay agent
--server`, and rally-relay with `--server tunnel:REALM` owning the public
game port. The relay keeps its filter and heartbeats: its getinfo probe and
every player's datagrams cross the tunnel's UDP path (authenticated per
datagram with keys agreed on the signed tunnel), so rally-master lists the
relay's address from the real server's infoResponse and qstat reads the
real server's status through it. rcon is still dropped at the relay.
Forged, altered and replayed tunnel datagrams are refused and counted,
nothing else disturbed. With --no-udp (UDP blocked) the same datagrams ride
the tunnel itself. Killing the agent flatlines the server at the master."""

import os

from coapeer import AgentProc, Realm, TunnelRelay, skip_unless_ready
from harness import (OOB, TOKEN, Master, OAServer, check, http, parse_addr,
                     q3_getservers, query, quakestat, run, wait_for)


def agent(env, relay, realm, server, extra=(), name="agent"):
    return AgentProc(env, "ws://%s:%d/relay/v1/host" % relay.tunnel, realm,
                     ["--server", "%s:%d" % server, "--debug"] + list(extra), name)


def ask(sock, front, cmd):
    """The answer's bytes, checked to come from the front address. Asked up
    to three times, 3 s apart: on a loaded machine one answer may come late,
    and the relay's per-address limiter (1 a second) has a token again by
    the next try."""
    for _ in range(3):
        got = query(sock, front, cmd, 3)
        if got is not None:
            break
    if got is None:
        return None
    check(got[1] == front, "answer from %r, not the front %r" % (got[1], front))
    return got[0]


def status(a):
    return a.status()


def scenario(env):
    skip_unless_ready("relay_tunnel_udp")
    m = Master(env, args=["--q3-challenge", "1500"])
    oa = OAServer(env, dedicated=1)
    r = Realm()
    relay = TunnelRelay(env, [r], pool_size=2, args=[
        "--listen", "127.0.0.1:0", "--server", "tunnel:" + r.id,
        "--master", "127.0.0.1:%d" % m.udp_addr[1], "--heartbeat-tag", "QuakeArena-1",
        "--heartbeat-interval", "2", "--probe-timeout", "500"])
    ln = relay.wait_line(r"^(?:<\d>)?ready listen=(\S+) tunnel=", 5)
    front = parse_addr(ln.group(1))

    # ---- the datagram path: UDP, keyed on the tunnel ----
    ag = agent(env, relay, r, oa.addr)
    ag.wait_line(r"tunnel-udp-up", 10)
    wait_for(lambda: relay.metrics().get('rally_relay_tunnel_server_path{path="udp"}') == 1, 10,
             "the relay to use UDP toward the agent")

    # a player's getinfo through the front, answered by the query cache
    # from the real server's answer to a refresh that crossed the tunnel
    c = env.udp()
    ans = ask(c, front, "getinfo xyz")
    check(ans and b"infoResponse" in ans and b"\\challenge\\xyz" in ans,
          "getinfo through the tunnel: %r" % ans)
    check(("sv_hostname\\%s" % oa.hostname).encode() in ans or oa.hostname.encode() in ans,
          "not the home server's answer: %r" % ans)
    # and the player's getchallenge, answered by the real server itself
    ans = ask(c, front, "getchallenge 4242")
    check(ans and ans.startswith(OOB + b"challengeResponse") and b" 4242 " in ans,
          "getchallenge through the tunnel: %r" % ans)

    # the master lists the relay's front address, from the real infoResponse
    m.wait_line(r"q3-listed server=127\.0\.0\.1:%d game=Quake3Arena protocol=71" % front[1], 20)
    n, servers = quakestat("-q3m,71", m.udp_addr, srcip="127.0.0.41")
    check(n == 1 and servers and servers[0][1] == "127.0.0.1:%d" % front[1],
          "qstat via the master: %r" % servers)
    check(servers[0][2] == oa.hostname, "status through the relay: %r" % servers[0])

    # rcon is dropped at the relay: the server never hears it
    before = relay.metrics().get('rally_relay_drops_total{reason="filtered"}', 0)
    c.sendto(OOB + b"rcon integ-rcon status", front)
    wait_for(lambda: relay.metrics().get('rally_relay_drops_total{reason="filtered"}', 0) >
             before, 5, "rcon counted as filtered")
    check(not oa.grep(r"Rcon from"), "rcon reached the server")

    # /sessions: the player's session is tunnelled
    st, sess, _ = http("GET", "http://%s:%d/sessions" % relay.control, token=TOKEN)
    check(st == 200 and any(s.get("tunnelled") for s in (sess["sessions"] if isinstance(sess, dict) else sess)),
          "no tunnelled session: %r" % sess)
    agst = status(ag)
    check(agst["datagram_path"] == "udp" and agst["game_sessions"] >= 1, "agent: %r" % agst)
    # Three more players, three more sessions at home: one local socket
    # each toward the server (it sees one address per player).
    n0 = agst["game_sessions"]
    for i in range(3):
        p = env.udp("127.0.0.%d" % (51 + i))
        ans = ask(p, front, "getchallenge 51%d" % i)
        check(ans and (" 51%d " % i).encode() in ans, "player %d's getchallenge: %r" % (i, ans))
    agst = status(ag)
    check(agst["game_sessions"] == n0 + 3, "agent sessions %d -> %d after three new players" % (
        n0, agst["game_sessions"]))
    env.log("agent: %d game sessions, one local socket each" % agst["game_sessions"])
    met = relay.metrics()
    check(met.get("rally_relay_tunnel_udp_in_total", 0) > 0 and
          met.get("rally_relay_tunnel_udp_out_total", 0) > 0, "udp counters: %r" % met)

    # ---- forged datagrams at the tunnel's UDP port ----
    f = env.udp()
    udp_port = relay.tunnel
    bad0 = met.get("rally_relay_tunnel_udp_bad_total", 0)
    unk0 = met.get("rally_relay_tunnel_udp_unknown_total", 0)
    f.sendto(b"garbage", udp_port)
    f.sendto(bytes([1]) + os.urandom(60), udp_port)           # a random udp_id
    f.sendto(bytes([9]) + os.urandom(60), udp_port)           # an unknown type
    f.sendto(b"\x01" + b"\0" * 20, udp_port)                  # too short for a tag
    wait_for(lambda: relay.metrics().get("rally_relay_tunnel_udp_bad_total", 0) >= bad0 + 3 and
             relay.metrics().get("rally_relay_tunnel_udp_unknown_total", 0) >= unk0 + 1, 5,
             "forged datagrams counted")
    # (getchallenge: the server itself answers, where the cache would
    # answer a getinfo)
    ans = ask(c, front, "getchallenge 4343")
    check(ans and b" 4343 " in ans, "the path broke after forged datagrams")

    # ---- UDP blocked: the same through the tunnel ----
    ag.stop()
    relay.wait_health(5, connected_hosts=0)
    ag2 = agent(env, relay, r, oa.addr, extra=["--no-udp"], name="agent-noudp")
    wait_for(lambda: relay.metrics().get('rally_relay_tunnel_server_path{path="tunnel"}') == 1,
             10, "the relay to fall back to the tunnel")
    ans = ask(c, front, "getchallenge 4444")
    check(ans and b" 4444 " in ans, "getchallenge over the tunnel fallback: %r" % ans)
    st2 = status(ag2)
    check(st2["datagram_path"] == "tunnel" and st2["dgram_tunnel_out"] > 0, "agent: %r" % st2)
    check(relay.metrics().get("rally_relay_tunnel_dgram_tunnel_out_total", 0) > 0,
          "relay sent nothing in the tunnel")

    # ---- the agent killed: the relay's probe fails, it flatlines ----
    ag2.p.kill()
    relay.wait_health(5, connected_hosts=0)
    m.wait_line(r"heartbeat peer=127\.0\.0\.1:%d tag=ETFlatline-1 .*flatline=1 listed=1" %
                front[1], 10)
    m.wait_line(r"q3-delisted server=127\.0\.0\.1:%d game=Quake3Arena" % front[1], 10)
    s = env.udp("127.0.0.42")
    servers, _ = q3_getservers(s, m.udp_addr, "getservers 71 empty full")
    check(servers == [], "still listed with the home side gone: %r" % servers)
    env.daemons_alive(relay, m, oa)


run(scenario)
