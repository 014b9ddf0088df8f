#!/usr/bin/env python3
"""The coa tunnel's allocation lifecycle and limits. A retry for a player
whose allocation is unused gets that allocation again (as coa does); per
player (allocations in use), per realm and in all
(--tunnel-max-allocs-player/-realm/--tunnel-max-allocs) an allocate over
the limit gets its allocate_err; a host's drop reclaims every
port of its allocations at once (they refuse, health counts them gone, an
open stream's client is closed) and frees its share of the limits; a
client from another IP than expected_client_ip is dropped, never reaches
the host, and the port stops accepting, while an allocation without an
expected IP takes any source; a pool of 2 ports gives "relay ports
exhausted" to a second allocate; an unused allocation expires after
--tunnel-alloc-timeout 2 (ports closed within the 5 s reaper) and its ports
serve again, while a stream in use outlives it; --tunnel-max-streams
refuses a connection over it; a stream silent past --tunnel-idle-timeout is
reset while a busy one lives on; a banned player is dropped at the port."""

import socket
import time

from coapeer import (HostPeer, Realm, TcpServer, TunnelRelay, connect_client, echo_handler,
                     listening, port_state, recv_exact, skip_unless_ready)
from harness import TOKEN, check, http, run, wait_for


def err_of(a):
    return a.get("error") if a.get("cmd") == "allocate_err" else "allocate_ok %r" % a


def ports_of(a):
    return [(a["relay_host"], a["auth_port"]), (a["relay_host"], a["world_port"])]


def echo_through(addr, msg=b"hello through the relay", source=None):
    c = connect_client(addr, source)
    c.sendall(msg)
    check(recv_exact(c, len(msg)) == msg, "echo through %s:%d" % addr)
    return c


def limits(env, ra, rb, echo):
    relay = TunnelRelay(env, [ra, rb], pool_size=16, name="relay-limits",
                        args=["--tunnel-max-allocs", "4", "--tunnel-max-allocs-realm", "3",
                              "--tunnel-max-allocs-player", "1"])
    targets = {"auth": echo.addr, "world": echo.addr}
    ha = HostPeer(env, relay, ra, targets=targets, name="host-a")
    hb = HostPeer(env, relay, rb, targets=targets, name="host-b")
    p1, p2, p3, p4 = ("00000000-0000-4000-8000-00000000000%d" % i for i in range(1, 5))
    a1 = ha.allocate_ok(player_id=p1)
    # coa answers a retry for a player whose allocation is still unused
    # with that allocation.
    again = ha.allocate_ok(player_id=p1)
    check((again["token"], again["auth_port"], again["world_port"]) ==
          (a1["token"], a1["auth_port"], a1["world_port"]), "a retry for p1: %r vs %r" % (again, a1))
    # In use (a stream on its world port), it counts against p1's limit.
    c = echo_through(ports_of(a1)[1])
    ha.wait_stream("world", token=a1["token"])
    e = err_of(ha.allocate(player_id=p1))
    check(e == "too many allocations for player", "p1's second allocate: %r" % e)
    a2 = ha.allocate_ok(player_id=p2)
    a3 = ha.allocate_ok(player_id=p3)
    e = err_of(ha.allocate(player_id=p4))
    check(e == "too many allocations for realm", "realm a's 4th allocate: %r" % e)
    b1 = hb.allocate_ok(player_id="11111111-0000-4000-8000-000000000001")
    e = err_of(hb.allocate(player_id="11111111-0000-4000-8000-000000000002"))
    check(e == "too many allocations", "the 5th allocate in all: %r" % e)
    check(relay.health()["active_allocations"] == 4, "health: %r" % relay.health())
    every = [a1, a2, a3, b1]
    used = [p for a in every for p in ports_of(a)]
    check(len(set(used)) == 8, "ports handed out twice: %r" % used)

    # Host a's tunnel drops (a reset, no close frame): its 6 ports refuse
    # at once, b's stay.
    t0 = time.monotonic()
    ha.ws.abort()
    ha_ports = [p for a in (a1, a2, a3) for p in ports_of(a)]
    ha_ports.remove(ports_of(a1)[1])  # took its one connection already
    wait_for(lambda: not any(listening(p) for p in ha_ports), 1.5,
             lambda: "host a's ports to close: %r" % [p[1] for p in ha_ports if listening(p)])
    dt = time.monotonic() - t0
    h = relay.wait_health(timeout=1, connected_hosts=1, active_allocations=1)
    check(all(port_state(p) == "refused" for p in ha_ports), "a port of host a still accepts")
    env.log("host drop: ports closed after %.2fs, health %r" % (dt, h))
    c.settimeout(3)
    try:
        d = c.recv(10)
    except ConnectionResetError:
        d = b""
    except socket.timeout:
        d = None
    check(d == b"", "the client of a dropped host's stream still open (%r)" % d)
    c.close()
    check(all(listening(p) for p in ports_of(b1)), "host b's ports closed by a's drop")

    # Realm a's share is free again: a new tunnel of a allocates for p1..p3
    # (3 for the realm, 4 in all), then b is over the total.
    ha2 = HostPeer(env, relay, ra, targets=targets, name="host-a2")
    for p in (p1, p2, p3):
        ha2.allocate_ok(player_id=p)
    e = err_of(hb.allocate(player_id="11111111-0000-4000-8000-000000000003"))
    check(e == "too many allocations", "5 in all again: %r" % e)
    m = relay.tunnel_metrics()
    env.log("limits metrics: %s" % {k: v for k, v in m.items() if v})
    for reason, n in (("player_limit", 1), ("realm_limit", 1), ("total_limit", 2)):
        k = 'rally_relay_tunnel_allocations_refused_total{reason="%s"}' % reason
        check(m.get(k) == n, "%s = %s, want %d" % (k, m.get(k), n))
    for hp in (hb, ha2):
        hp.check_clean()
    env.daemons_alive(relay)
    return relay


def expected_ip(env, ra, echo):
    relay = TunnelRelay(env, [ra], pool_size=8, name="relay-ip")
    h = HostPeer(env, relay, ra, targets={"auth": echo.addr, "world": echo.addr}, name="host-ip")
    a = h.allocate_ok(expected_ip="127.0.0.1")
    auth, world = ports_of(a)
    st = port_state(auth, source="127.0.0.2")
    check(st in ("dropped", "refused"), "a client from 127.0.0.2 on the auth port: %s" % st)
    # The relay has had its time to misbehave once the port refuses.
    wait_for(lambda: not listening(auth), 2, "the auth port to stop listening")
    check(port_state(auth) == "refused", "the auth port accepts after the stranger")
    check(not h.connects(), "the host was asked to connect for a stranger: %r" % h.connects())
    env.log("client from the wrong source: %s" % st)
    # The real player on a fresh allocation gets through.
    a = h.allocate_ok(expected_ip="127.0.0.1")
    c = echo_through(ports_of(a)[1])
    c.close()
    # Without expected_client_ip any source is taken.
    a = h.allocate_ok(expected_ip=None)
    c = echo_through(ports_of(a)[1], source="127.0.0.3")
    c.close()
    m = relay.tunnel_metrics()
    env.log("expected-ip metrics: %s" % {k: v for k, v in m.items() if v})
    k = 'rally_relay_tunnel_streams_refused_total{reason="unexpected_ip"}'
    check(m.get(k) == 1, "%s = %s, want 1" % (k, m.get(k)))
    h.check_clean()
    env.daemons_alive(relay)


def pool_and_expiry(env, ra, echo):
    relay = TunnelRelay(env, [ra], pool_size=2, name="relay-pool",
                        args=["--tunnel-alloc-timeout", "2"])
    h = HostPeer(env, relay, ra, targets={"auth": echo.addr, "world": echo.addr}, name="host-pool")
    t0 = time.monotonic()
    a = h.allocate_ok()
    check(abs(a["expires_at"] - (time.time() + 2)) <= 2, "expires_at %r" % a["expires_at"])
    e = err_of(h.allocate())
    check(e == "relay ports exhausted", "2nd allocate on a 2-port pool: %r" % e)
    check(all(listening(p) for p in ports_of(a)), "the allocation's ports do not listen")
    wait_for(lambda: not any(listening(p) for p in ports_of(a)), 9,
             "the expired allocation's ports to close", interval=0.05)
    dt = time.monotonic() - t0
    env.log("unused allocation expired after %.2fs" % dt)
    check(1.5 <= dt <= 7.5, "expired after %.2fs (timeout 2 s, reaper 5 s)" % dt)
    check(relay.health()["active_allocations"] == 0, "health after expiry: %r" % relay.health())
    # The ports serve again; a stream in use outlives the timeout.
    a = h.allocate_ok()
    c = echo_through(ports_of(a)[1])
    t1 = time.monotonic()
    wait_for(lambda: time.monotonic() - t1 > 7.5, 9, "past the reaper", interval=0.5)
    c.sendall(b"still here")
    check(recv_exact(c, 10) == b"still here", "the stream died with its allocation's timeout")
    c.close()
    m = relay.tunnel_metrics()
    env.log("pool metrics: %s" % {k: v for k, v in m.items() if v})
    k = 'rally_relay_tunnel_allocations_refused_total{reason="ports_exhausted"}'
    check(m.get(k) == 1, "%s = %s, want 1" % (k, m.get(k)))
    check(m.get("rally_relay_tunnel_allocations_expired_total", 0) >= 1, "no expiry counted")
    h.check_clean()
    env.daemons_alive(relay)


def max_streams(env, ra, echo):
    relay = TunnelRelay(env, [ra], pool_size=8, name="relay-streams",
                        args=["--tunnel-max-streams", "2"])
    h = HostPeer(env, relay, ra, targets={"auth": echo.addr, "world": echo.addr}, name="host-st")
    a1, a2 = h.allocate_ok(), h.allocate_ok()
    c1 = echo_through(ports_of(a1)[1])
    c2 = echo_through(ports_of(a2)[1])
    check(len(h.connects()) == 2, "connects: %r" % h.connects())
    st = port_state(ports_of(a1)[0])
    check(st == "dropped", "a 3rd stream over --tunnel-max-streams 2: %s" % st)
    check(len(h.connects()) == 2, "the host was asked for a 3rd stream")
    # Once one ends, a new stream is taken again.
    c1.close()
    s1 = h.wait_stream("world", token=a1["token"])
    wait_for(lambda: s1.got_close.is_set() and s1.sent_close, 5, "the first stream's closes")
    h.ping()  # the relay has read the host's close before it answers
    c3 = echo_through(ports_of(h.allocate_ok())[1])
    c3.close()
    c2.close()
    m = relay.tunnel_metrics()
    env.log("stream-limit metrics: %s" % {k: v for k, v in m.items() if v})
    k = 'rally_relay_tunnel_streams_refused_total{reason="stream_limit"}'
    check(m.get(k) == 1, "%s = %s, want 1" % (k, m.get(k)))
    h.check_clean()
    env.daemons_alive(relay)


def idle_and_bans(env, ra, echo):
    """A stream silent past --tunnel-idle-timeout is reset (the player's
    connection closed, the host told, counted idle) while a busy one beside
    it lives on; a banned player's connection is dropped before the host
    hears of it, counted banned."""
    relay = TunnelRelay(env, [ra], pool_size=8, name="relay-idle",
                        args=["--tunnel-idle-timeout", "3", "--tunnel-ping-interval", "1"])
    h = HostPeer(env, relay, ra, targets={"auth": echo.addr, "world": echo.addr},
                 name="host-idle")
    quiet = echo_through(ports_of(h.allocate_ok())[1])
    busy = echo_through(ports_of(h.allocate_ok())[1])
    t0 = time.monotonic()
    quiet.settimeout(0.2)
    gone = None
    while time.monotonic() - t0 < 12 and gone is None:
        busy.sendall(b"tick")
        check(recv_exact(busy, 4) == b"tick", "the busy stream stopped after %.1fs" % (
            time.monotonic() - t0))
        try:
            if quiet.recv(1) == b"":
                gone = time.monotonic() - t0
        except socket.timeout:
            pass
        except ConnectionResetError:
            gone = time.monotonic() - t0
        time.sleep(0.5)
    check(gone is not None, "the silent stream is still open after 12 s (idle timeout 3 s)")
    check(gone >= 2.5, "the silent stream closed after %.2fs, before its idle timeout" % gone)
    env.log("silent stream reset after %.2fs (idle timeout 3 s, 5 s reaper); the busy one "
            "lives on" % gone)
    m = relay.tunnel_metrics()
    k = 'rally_relay_tunnel_stream_ends_total{reason="idle"}'
    check(m.get(k) == 1, "%s = %s, want 1" % (k, m.get(k)))
    busy.close()

    # A ban on the control API covers the tunnel's ports too.
    banned = "127.0.0.77"
    st, _, _ = http("PUT", "http://%s:%d/bans/%s" % (relay.control + (banned,)),
                    body={"reason": "integ", "duration": 60}, token=TOKEN)
    check(st in (200, 201), "PUT /bans: %s" % st)
    a = h.allocate_ok(expected_ip=banned)
    n = len(h.connects())
    check(port_state(ports_of(a)[1], source=banned) == "dropped", "a banned player got in")
    check(len(h.connects()) == n, "the host was asked to connect a banned player")
    m = relay.tunnel_metrics()
    k = 'rally_relay_tunnel_streams_refused_total{reason="banned"}'
    check(m.get(k) == 1, "%s = %s, want 1" % (k, m.get(k)))
    echo_through(ports_of(h.allocate_ok(expected_ip="127.0.0.78"))[1],
                 source="127.0.0.78").close()
    env.daemons_alive(relay)


def scenario(env):
    ra, rb = Realm(), Realm()
    echo = TcpServer(env, echo_handler)
    limits(env, ra, rb, echo)
    expected_ip(env, ra, echo)
    pool_and_expiry(env, ra, echo)
    max_streams(env, ra, echo)
    idle_and_bans(env, ra, echo)


skip_unless_ready("relay_coa_limits")
run(scenario)
