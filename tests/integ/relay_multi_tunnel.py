#!/usr/bin/env python3
"""Several servers at home behind one relay's tunnel (--servers FILE): two
real OpenArena servers, each beside its own `rally-relay agent` of its own
realm, and a third server the relay reaches directly. Each public port
answers with its own server's status (the tunnel routes every agent's
datagrams to the server of that agent's realm), rally-master lists all
three ports from the relay's heartbeats, /sessions marks the tunnelled
sessions with their server, the datagram path is shown per server; the
agent of one realm killed, its server flatlines and is delisted while the
other home server and the direct one go on answering."""

import os

from coapeer import AgentProc, Realm, TunnelRelay, skip_unless_ready
from harness import (Master, OAServer, check, http, q3_getservers, query, run, wait_for, TOKEN)


def ask(sock, front, cmd):
    """The answer's bytes, checked to come from the front address."""
    got = query(sock, front, cmd, 3)
    if got is None:
        return None
    check(got[1] == front, "answer from %r, not the front %r" % (got[1], front))
    return got[0]


def scenario(env):
    skip_unless_ready("relay_multi_tunnel")
    m = Master(env, args=["--q3-challenge", "1500"])
    oa1 = OAServer(env, hostname="home-one", name="oa1")
    oa2 = OAServer(env, hostname="home-two", name="oa2")
    oa3 = OAServer(env, hostname="direct", name="oa3")
    r1, r2 = Realm(), Realm()
    path = os.path.join(env.dir, "servers.conf")
    with open(path, "w") as f:
        f.write("""[defaults]
master = 127.0.0.1:%d
heartbeat-tag = QuakeArena-1
heartbeat-interval = 2
probe-timeout = 500

[server home1]
listen = 127.0.0.1:0
server = tunnel:%s

[server home2]
listen = 127.0.0.1:0
server = tunnel:%s

[server direct]
listen = 127.0.0.1:0
server = 127.0.0.1:%d
""" % (m.udp_addr[1], r1.id, r2.id, oa3.addr[1]))
    relay = TunnelRelay(env, [r1, r2], pool_size=2, args=["--servers", path])
    fronts = relay.fronts
    check(set(fronts) == {"home1", "home2", "direct"}, "ready line: %r" % fronts)
    url = "ws://%s:%d/relay/v1/host" % relay.tunnel
    ag1 = AgentProc(env, url, r1, ["--server", "%s:%d" % oa1.addr, "--debug"], "agent1")
    ag2 = AgentProc(env, url, r2, ["--server", "%s:%d" % oa2.addr, "--debug"], "agent2")
    for a in (ag1, ag2):
        a.wait_line(r"tunnel-udp-up", 10)
    for name in ("home1", "home2"):
        wait_for(lambda: relay.metrics().get(
            'rally_relay_tunnel_server_path{server="%s",path="udp"}' % name) == 1, 10,
            "%s's datagrams on UDP" % name)

    # Each port, its own server.
    c = env.udp()
    for name, host in (("home1", "home-one"), ("home2", "home-two"), ("direct", "direct")):
        ans = ask(c, fronts[name], "getinfo %s" % name)
        check(ans and ("\\challenge\\%s" % name).encode() in ans and
              ("\\hostname\\%s" % host).encode() in ans, "%s answered %r" % (name, ans))
    # getinfo is the query cache's to answer (no session); a player's
    # getchallenge reaches the server itself and opens one.
    for i, name in enumerate(("home1", "home2", "direct")):
        ans = ask(c, fronts[name], "getchallenge 61%d" % i)
        check(ans and b"challengeResponse" in ans and (" 61%d " % i).encode() in ans,
              "%s's getchallenge: %r" % (name, ans))
    for name in fronts:
        m.wait_line(r"q3-listed server=127\.0\.0\.1:%d game=Quake3Arena" % fronts[name][1], 20)
    st, sessions, _ = http("GET", "http://%s:%d/sessions" % relay.control, token=TOKEN)
    mine = {s["server"]: s["tunnelled"] for s in sessions
            if s["client"] == "127.0.0.1:%d" % c.getsockname()[1]}
    check(mine == {"home1": True, "home2": True, "direct": False}, "/sessions: %r" % sessions)
    st, sv, _ = http("GET", "http://%s:%d/servers" % relay.control, token=TOKEN)
    by = {s["name"]: s for s in sv}
    check(by["home1"]["server"] == "tunnel:" + r1.id and by["home2"]["server"] == "tunnel:" + r2.id,
          "/servers: %r" % sv)

    # home2's agent gone: home2 flatlines and is delisted, the others stay.
    ag2.p.kill()
    m.wait_line(r"heartbeat peer=127\.0\.0\.1:%d tag=ETFlatline-1" % fronts["home2"][1], 15)
    m.wait_line(r"q3-delisted server=127\.0\.0\.1:%d " % fronts["home2"][1], 10)
    wait_for(lambda: relay.metrics().get(
        'rally_relay_tunnel_server_path{server="home2",path="down"}') == 1, 5, "home2 down")
    check(relay.metrics().get('rally_relay_tunnel_server_path{server="home1",path="udp"}') == 1,
          "home1's path changed")
    ans = ask(c, fronts["home1"], "getinfo still")
    check(ans and b"\\hostname\\home-one" in ans, "home1 after home2's agent died: %r" % ans)
    ans = ask(c, fronts["direct"], "getinfo still")
    check(ans and b"\\hostname\\direct" in ans, "direct after home2's agent died: %r" % ans)
    s = env.udp("127.0.0.42")
    listed, _ = q3_getservers(s, m.udp_addr, "getservers 71 empty full")
    check(sorted(listed or []) == sorted([fronts["home1"], fronts["direct"]]),
          "master lists %r" % listed)
    env.daemons_alive(relay, m, ag1, oa1, oa2, oa3)


run(scenario)
