#!/usr/bin/env python3
"""Bytes through the coa tunnel: allocate_ok's fields; a player's client on
the auth port reaches the host's fake authserver (connect target auth,
the allocation's token) and gets the realm list rewritten to the world
port; the world port reaches the host's worldserver and carries 64 MiB
each way at once, byte-exact (sha256 at both ends) with every data chunk
at most 16 KiB; half-close each way (the other direction keeps flowing);
a client's reset reaches the host as reset, the host's reset aborts the
client; a connect_err closes the client; a port takes one connection."""

import socket
import struct
import threading
import time

from coapeer import (HostPeer, Realm, TcpServer, TunnelRelay, auth_client_session,
                     connect_client, duplex, echo_handler, fake_authserver, port_state, realm,
                     realm_list, recv_all, recv_exact, rewritten, skip_unless_ready)
from harness import check, run, wait_for

BIG = 64 << 20


def scenario(env):
    r = Realm()
    # Each port takes one connection and an unused one waits for the
    # 120 s expiry: room for every allocation below.
    relay = TunnelRelay(env, [r], pool_size=32)
    realms = [realm("Rally", "127.0.0.1:8085", flags=0x04)]
    auth = TcpServer(env, fake_authserver(lambda: realm_list(realms)))
    world_recs = []

    def world_handler(c, rec):
        world_recs.append(rec)
        mode = rec.setdefault("mode", world_mode[0])
        if mode == "echo":
            echo_handler(c, rec)
        elif mode == "duplex":
            duplex(c, BIG, rec)
        elif mode == "half-server":
            # Sends first and half-closes; then reads what the client sends.
            c.sendall(b"server says hi")
            c.shutdown(socket.SHUT_WR)
            rec["got"] = recv_all(c, 10)
        elif mode == "hold":
            rec["got"] = recv_all(c, 30)
    world_mode = ["echo"]
    world = TcpServer(env, world_handler)
    host = HostPeer(env, relay, r, targets={"auth": auth.addr, "world": world.addr})

    t_alloc = time.time()
    a = host.allocate_ok(player_id="6c2f4c4e-9b0e-4a8e-9d55-1f6a0c8e2b11")
    for k in ("token", "relay_host", "auth_port", "world_port", "expires_at"):
        check(k in a, "allocate_ok without %s: %r" % (k, a))
    check(a["relay_host"] == relay.relay_host, "relay_host %r" % a["relay_host"])
    ports = relay.pool_ports()
    check(a["auth_port"] in ports and a["world_port"] in ports and a["auth_port"] != a["world_port"],
          "ports %r outside %r" % ((a["auth_port"], a["world_port"]), ports))
    check(isinstance(a["token"], str) and len(a["token"]) >= 16, "token %r" % a["token"])
    check(abs(a["expires_at"] - (t_alloc + 120)) <= 5, "expires_at %r, now %r" % (a["expires_at"], t_alloc))
    check(relay.health()["active_allocations"] == 1, "health: %r" % relay.health())

    # Auth: the full exchange, the realm list rewritten to the world port.
    addr_auth = (a["relay_host"], a["auth_port"])
    s, got = auth_client_session(addr_auth)
    st = host.wait_stream("auth")
    check(st.token == a["token"], "connect token %r, allocation's %r" % (st.token, a["token"]))
    rec = auth.wait_conns(1)[0]
    wait_for(lambda: "sent" in rec, 5, "the authserver to send its messages")
    sent = rec["sent"]
    check(got[0] == sent[:119] and got[1] == sent[119:151], "challenge/proof changed in transit")
    want = rewritten(realms, "%s:%d" % (a["relay_host"], a["world_port"]))
    check(got[2] == want, "realm list: got %r want %r" % (got[2], want))
    # A second connection to the auth port while the first is open.
    check(port_state(addr_auth) in ("refused", "dropped"), "the auth port took a second connection")
    s.close()
    wait_for(lambda: st.got_close.is_set() or st.got_reset.is_set(), 5, "close of the auth stream")

    # World: echo first, then 64 MiB each way at once.
    addr_world = (a["relay_host"], a["world_port"])
    w = connect_client(addr_world)
    stw = host.wait_stream("world")
    check(stw.token == a["token"], "world connect token %r" % stw.token)
    w.sendall(b"ping through the tunnel")
    check(recv_exact(w, 23) == b"ping through the tunnel", "echo")
    w.shutdown(socket.SHUT_WR)
    check(recv_all(w, 5) == b"", "bytes after the echo and the half-close")
    w.close()

    # The allocation is spent now (each port took its one connection):
    # the 64 MiB run and the rest get allocations of their own.
    def alloc_world(mode):
        world_mode[0] = mode
        al = host.allocate_ok()
        c = connect_client((al["relay_host"], al["world_port"]), timeout=60)
        s_ = host.wait_stream("world", token=al["token"])
        return al, c, s_

    al, c, sw = alloc_world("duplex")
    crec = {}
    t0 = time.monotonic()
    th = threading.Thread(target=duplex, args=(c, BIG, crec), daemon=True)
    th.start()
    th.join(120)
    srec = wait_for(lambda: next((x for x in world_recs if x.get("mode") == "duplex" and
                                  "recv_sha" in x), None), 30, "the worldserver's end of 64 MiB")
    dt = time.monotonic() - t0
    check(not th.is_alive(), "64 MiB duplex did not finish in 120 s (client got %s)" % crec)
    check(crec.get("recv_bytes") == BIG, "client received %s of %d bytes (%s)" % (
        crec.get("recv_bytes"), BIG, crec))
    check(srec.get("recv_bytes") == BIG, "server received %s of %d bytes" % (srec.get("recv_bytes"), BIG))
    check(crec["sent_sha"] == srec["recv_sha"], "client -> host bytes differ")
    check(srec["sent_sha"] == crec["recv_sha"], "host -> client bytes differ")
    env.log("64 MiB each way at once: %.1fs (%.1f MiB/s each way)" % (dt, 64 / dt))
    check(sw.rx == BIG and sw.tx == BIG, "host stream counts rx=%d tx=%d" % (sw.rx, sw.tx))
    check(sw.got_close.is_set(), "the client's half-close did not reach the host as close")
    c.close()

    # Half-close host -> client: the server's EOF reaches the client, which
    # still sends afterwards.
    al, c, sh = alloc_world("half-server")
    check(recv_all(c, 5) == b"server says hi", "server's bytes before its half-close")
    check(sh.sent_close, "the host did not send close")
    c.sendall(b"client after server EOF")
    c.shutdown(socket.SHUT_WR)
    srv = wait_for(lambda: next((x for x in world_recs if x.get("mode") == "half-server" and
                                 "got" in x), None), 5, "the server to get the client's bytes")
    check(srv["got"] == b"client after server EOF", "after half-close: %r" % srv["got"])
    c.close()

    # Client reset -> host gets reset (and its local connection ends).
    al, c, sr = alloc_world("hold")
    c.sendall(b"x" * 1000)
    wait_for(lambda: sr.rx == 1000, 5, "bytes before the reset")
    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    c.close()
    wait_for(lambda: sr.got_reset.is_set() or sr.got_close.is_set(), 5, "reset at the host")
    check(sr.got_reset.is_set(), "a client's reset arrived as close, not reset")

    # Host reset -> the client's connection is aborted.
    al, c, sr = alloc_world("hold")
    c.sendall(b"y" * 100)
    wait_for(lambda: sr.rx == 100, 5, "bytes before the host's reset")
    host.send_reset(sr.id)
    c.settimeout(5)
    try:
        d = c.recv(10)
        how = "eof" if d == b"" else "data %r" % d
    except ConnectionResetError:
        how = "reset"
    except socket.timeout:
        how = "still open"
    env.log("host reset -> client sees %s" % how)
    check(how in ("reset", "eof"), "after the host's reset the client sees %s" % how)
    c.close()

    # connect_err: the client is closed.
    def refuse(peer, m):
        peer.send({"cmd": "connect_err", "stream_id": m["stream_id"], "error": "connection refused"})
    host.on_connect = refuse
    al2 = host.allocate_ok()
    c = connect_client((al2["relay_host"], al2["auth_port"]))
    d = recv_all(c, 5)
    check(d == b"", "after connect_err the client got %r" % d)
    c.close()
    host.on_connect = None

    for st_ in host.streams.values():
        check(st_.data_after_close == 0, "data after close on stream %r" % st_.id)
    host.check_clean()
    m = relay.tunnel_metrics()
    env.log("tunnel metrics: %s" % {k: v for k, v in m.items() if v})
    for k, want in (("rally_relay_tunnel_bytes_to_host_total", BIG),
                    ("rally_relay_tunnel_bytes_to_player_total", BIG)):
        check(m.get(k, 0) >= want, "%s = %s, want >= %d" % (k, m.get(k), want))
    for reason in ("host_reset", "player_reset", "connect_failed"):
        k = 'rally_relay_tunnel_stream_ends_total{reason="%s"}' % reason
        check(m.get(k) == 1, "%s = %s, want 1" % (k, m.get(k)))
    check(m.get("rally_relay_tunnel_realmlist_rewritten_total") == 1, "realm lists rewritten: %s" %
          m.get("rally_relay_tunnel_realmlist_rewritten_total"))
    env.daemons_alive(relay)


skip_unless_ready("relay_coa_stream")
run(scenario)
