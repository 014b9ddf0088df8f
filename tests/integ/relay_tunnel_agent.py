#!/usr/bin/env python3
"""rally-relay agent against our relay: the home side of the tunnel.

The agent dials the relay, signs its nonce with the realm key written by
`rally-relay agent keygen`, takes the binary framing our relay offers, and
allocations asked through its control API carry a WoW-style auth exchange
(REALM_LIST rewritten to the relay's world port) and 64 MiB both ways on
the world port, byte-exact; the same with --json-framing (coa's wire). A
player who stops reading holds only its own stream: the agent stops
reading that local server (credits), the other player's stream keeps
flowing, the relay's memory stays flat, and nothing is lost once the player
reads again. The relay restarted: the agent reconnects by itself and
allocations work again; the agent killed: the relay reclaims everything at
once."""

import socket
import time

from coapeer import (AgentProc, Realm, TcpServer, TunnelRelay, auth_client_session, blast, connect_client,
                     duplex, echo_handler, fake_authserver, realm, realm_list, rewritten, sink,
                     skip_unless_ready)
from harness import check, http, run, wait_for


def Agent(env, relay_url, realm_obj, auth, world, args=(), name="agent"):
    return AgentProc(env, relay_url, realm_obj,
                     ["--auth", "%s:%d" % auth, "--world", "%s:%d" % world] + list(args), name,
                     wait_up=False)


PLAYER1 = "11111111-2222-4333-8444-555555555555"
PLAYER2 = "22222222-3333-4444-8555-666666666666"


def scenario(env):
    skip_unless_ready("relay_tunnel_agent")
    r1, r2 = Realm(), Realm()
    relay = TunnelRelay(env, [r1, r2], pool_size=12)
    url = "ws://%s:%d/relay/v1/host" % relay.tunnel
    realms = [realm("Rally", "127.0.0.1:8085"), realm("Two", "10.0.0.9:8086", flags=4)]
    auth = TcpServer(env, fake_authserver(lambda: realm_list(realms)))
    world = TcpServer(env, echo_handler)

    # ---- the binary framing: auth exchange and 64 MiB both ways ----
    ag = Agent(env, url, r1, auth.addr, world.addr)
    ag.wait_line(r"tunnel-up realm=%s" % r1.id, 10)
    wait_for(lambda: ag.status()["framing"] == "binary", 5, "the binary framing taken")
    # stream bytes take the data channel (raw frames: nothing to unmask)
    ag.wait_line(r"tunnel-data-up", 10)
    relay.wait_line(r"tunnel-data-up realm=%s" % r1.id, 10)
    # ... which only the token this tunnel was given opens
    st, body, _ = http("GET", "http://%s:%d/relay/v1/data" % relay.tunnel,
                       headers={"Upgrade": "rally-data-1", "Connection": "Upgrade",
                                "X-Rally-Data": "0" * 32})
    check(st == 403, "a data channel with a made-up token: %s %r" % (st, body))
    a = ag.allocate(PLAYER1)
    check(a["relay_host"] == relay.relay_host, "relay_host %r" % a)
    s, got = auth_client_session((a["relay_host"], a["auth_port"]))
    want = rewritten(realms, "%s:%d" % (relay.relay_host, a["world_port"]))
    check(got[2] == want, "REALM_LIST through the agent: %r, want %r" % (got[2], want))
    s.close()
    w = connect_client((a["relay_host"], a["world_port"]), timeout=60)
    rec = {}
    t0 = time.time()
    duplex(w, 64 << 20, rec)
    dt = time.time() - t0
    check(rec.get("recv_bytes") == 64 << 20 and rec.get("recv_sha") == rec.get("sent_sha"),
          "64 MiB echo through relay + agent (binary): %r" % rec)
    env.log("binary framing: 64 MiB each way in %.1f s (%.0f MB/s each way, debug build)" %
            (dt, 64 * 1.048576 / dt))
    w.close()

    # ---- back-pressure: a player who stops reading holds only itself ----
    def blaster_handler(c, rec):
        rec["sha"] = blast(c, 48 << 20)
        c.shutdown(socket.SHUT_WR)

    blaster = TcpServer(env, blaster_handler)
    ag2 = Agent(env, url, r2, auth.addr, blaster.addr, name="agent2")
    ag2.wait_line(r"tunnel-up realm=%s" % r2.id, 10)
    wait_for(lambda: ag2.status()["framing"] == "binary", 5, "the binary framing taken")
    slow_alloc = ag2.allocate(PLAYER1)
    rss0 = relay.rss()
    slow = connect_client((slow_alloc["relay_host"], slow_alloc["world_port"]), timeout=120)
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    blaster.wait_conns(1)
    time.sleep(1.5)  # the blaster fills what the credits allow, then blocks
    # meanwhile the other realm's player streams at full speed
    b = ag.allocate(PLAYER2)
    w2 = connect_client((b["relay_host"], b["world_port"]), timeout=60)
    rec2 = {}
    duplex(w2, 8 << 20, rec2)
    check(rec2.get("recv_sha") == rec2.get("sent_sha"), "the other stream stalled: %r" % rec2)
    w2.close()
    held = relay.tunnel_metrics()["rally_relay_tunnel_buffered_bytes"]
    check(held <= 1 << 20, "the relay holds %d bytes for a stalled stream" % held)
    grown = relay.rss() - rss0
    check(not blaster.conns[0].get("sha"), "the blaster finished: nothing held it back")
    n, sha = sink(slow)
    check(n == 48 << 20 and sha == blaster.conns[0].get("sha"),
          "the stalled stream lost bytes: %d (%s)" % (n, sha))
    env.log("stalled player: the relay held %d bytes for it (RSS +%d KiB), 48 MiB delivered "
            "intact afterwards" % (held, grown))
    slow.close()
    ag2.stop()

    # ---- coa's JSON framing, from our agent ----
    ag.stop()
    agj = Agent(env, url, r1, auth.addr, world.addr, args=["--json-framing"], name="agent-json")
    agj.wait_line(r"tunnel-up realm=%s" % r1.id, 10)
    check(agj.status()["framing"] == "json", "json framing: %r" % agj.status())
    c = agj.allocate(PLAYER1)
    w = connect_client((c["relay_host"], c["world_port"]), timeout=60)
    rec = {}
    duplex(w, 16 << 20, rec)
    check(rec.get("recv_sha") == rec.get("sent_sha"), "16 MiB echo (json): %r" % rec)
    w.close()

    # ---- the agent killed: the relay reclaims at once ----
    d = agj.allocate(PLAYER2)
    relay.wait_health(5, connected_hosts=1)
    agj.p.kill()
    relay.wait_health(5, connected_hosts=0, active_allocations=0)
    try:
        x = connect_client((d["relay_host"], d["auth_port"]), timeout=2)
        x.settimeout(2)
        check(x.recv(1) == b"", "a reclaimed port still served")
        x.close()
    except (ConnectionRefusedError, ConnectionResetError, socket.timeout):
        pass

    # ---- the relay restarted: the agent comes back by itself ----
    pool = (relay.pool_ip, relay.pool_lo, relay.pool_hi)
    fixed = "%s:%d" % (relay.pool_ip, relay.pool_hi + 1)
    relay.stop()
    relay2 = TunnelRelay(env, [r1], pool=pool, args=["--tunnel-listen", fixed], name="relay2")
    url2 = "ws://%s/relay/v1/host" % fixed
    ag3 = Agent(env, url2, r1, auth.addr, world.addr, name="agent3")
    ag3.wait_line(r"tunnel-up", 10)
    relay2.stop()
    ag3.wait_line(r"tunnel-down", 10)
    st, body, _ = ag3.api("POST", "/allocate", {"player_id": PLAYER1})
    check(st == 503, "allocate with the tunnel down -> %s %r" % (st, body))
    relay3 = TunnelRelay(env, [r1], pool=pool, args=["--tunnel-listen", fixed], name="relay3")
    wait_for(lambda: len(ag3.grep(r"tunnel-up")) >= 2, 15, "the agent to reconnect")
    e = ag3.allocate(PLAYER1)
    s, got = auth_client_session((e["relay_host"], e["auth_port"]))
    check(got[2] == rewritten(realms, "%s:%d" % (relay3.relay_host, e["world_port"])),
          "REALM_LIST after the reconnect")
    s.close()
    env.daemons_alive(relay3, ag3)


run(scenario)
