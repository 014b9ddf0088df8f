#!/usr/bin/env python3
"""Transparent mode at home, behind the tunnel: the relay in a "public"
namespace fronts a server that is at home (--server tunnel:REALM); at home
(another namespace) a real OpenArena server on 127.0.0.1 and `rally-relay
agent --server ... --transparent`. The relay tells our agent each
session's player address (TUNMSG_X_PEER: in front of every datagram), the
agent binds the session's socket to it, and the home server's own status
lists the player at 10.77.1.2, the client namespace's address, which the
home namespace does not even have a route to.
Also: the agent refuses to start without the policy routing (and says
so), and its /status counts the transparent sessions."""

import os
import re

from coapeer import Realm, skip_unless_ready, write_keys
from harness import (OA_SERVER, RELAY_BIN, TOKEN, Netns, Proc, check, ns_http, parse_addr,
                     run, udp_socket_ports, veth, wait_for)
from relay_transparent import CLIENT, RCON, SETUP, oa_server, status_addrs  # noqa: F401


def scenario(env):
    skip_unless_ready("relay_transparent_agent")
    tok = os.path.join(env.dir, "token")
    with open(tok, "w") as f:
        f.write(TOKEN + "\n")
    pub, cli = Netns(env, "p"), Netns(env, "c")
    veth(pub, cli, "10.77.1.1", "10.77.1.2", 24)
    home = Netns(env, "h")
    veth(pub, home, "10.77.3.1", "10.77.3.2", 24)
    cli.ip("route", "add", "default", "via", "10.77.1.1")

    realm = Realm()
    keys = os.path.join(env.dir, "realms")
    write_keys(keys, [realm])
    relay = Proc(env, "relay", pub.argv(
        RELAY_BIN, "--listen", "0.0.0.0:0", "--server", "tunnel:" + realm.id, "--no-heartbeat",
        "--tunnel-listen", "10.77.3.1:0", "--tunnel-keys", keys, "--tunnel-bind", "10.77.3.1",
        "--tunnel-relay-host", "10.77.3.1", "--tunnel-ports", "40000-40003",
        "--state-dir", os.path.join(env.dir, "state"), "--control", "127.0.0.1:0",
        "--token-file", tok, "--log", "plain"))
    m = relay.wait_line(r"^ready listen=(\S+) tunnel=(\S+) control=(\S+)$", 10)
    front = ("10.77.1.1", parse_addr(m.group(1))[1])
    tunnel = parse_addr(m.group(2))

    oa = oa_server(env, home, "oa-home")
    key = os.path.join(env.dir, "realm.key")
    with open(key, "w") as f:
        f.write(bytes(realm.key).hex() + "\n")

    def agent(name):
        return Proc(env, name, home.argv(
            RELAY_BIN, "agent", "--relay", "ws://10.77.3.1:%d/relay/v1/host" % tunnel[1],
            "--realm-id", realm.id, "--key", key, "--server", "%s:%d" % oa.addr,
            "--transparent", "--control", "127.0.0.1:0", "--token-file", tok, "--log", "plain",
            "--debug"))

    # ---- no routing at home: refused, with the reason ----
    bad = agent("agent-norouting")
    check(bad.wait_exit(10) == 1, "the agent started without the routing")
    check(bad.grep(r"transparent-unavailable server=127\.0\.0\.1:%d missing=routing" % oa.addr[1]),
          "no clear error:\n%s" % "\n".join(bad.output()))

    r = home.run(SETUP, "up", "%s:%d" % oa.addr, capture_output=True, text=True)
    check(r.returncode == 0, "setup up at home: %s %s" % (r.stdout, r.stderr))
    ag = agent("agent")
    actl = parse_addr(ag.wait_line(r"^ready control=(\S+)$", 10).group(1))
    ag.wait_line(r"tunnel-udp-up", 15)

    # ---- a player through the relay and the tunnel ----
    p = Proc(env, "erin", cli.argv("/usr/bin/python3", "-u", CLIENT, front[0], str(front[1]),
                                   "--name", "erin", "--hold", "120"))
    local = parse_addr(p.wait_line(r"^connected local=(\S+)$", 20).group(1))
    addrs, text = status_addrs(home, oa)
    env.log("home server status behind the tunnel, agent --transparent:\n" + text)
    check(addrs == ["10.77.1.2"], "the home server lists %r, not the player's address" % addrs)
    ag.wait_line(r"game-session-open sid=\d+ peer=10\.77\.1\.2:%d upstream_port=%d transparent=1"
                 % (local[1], local[1]), 5)
    st, body = ns_http(home, "http://%s:%d/status" % actl, TOKEN)
    check(st == 200, "agent status %s" % st)
    check(re.search(r'"player_addresses":\s*true', body) and
          re.search(r'"transparent_sessions":\s*1\b', body) and
          re.search(r'"transparent_bind_fail":\s*0\b', body), "agent status: %s" % body)
    env.daemons_alive(relay, ag, oa)


run(scenario)
