#!/usr/bin/env python3
"""Bad input on the coa tunnel, each from a host of its own while a witness
host keeps a stream open: after every case the witness still answers pings
and echoes through its stream, and the relay lives. A 5 KiB control message
(4 KiB cap) is not acted on. Closed tunnels: a 70 KiB message (64 KiB cap), one sent as 20
fragments, a 100 KiB hello, a frame header that announces 1 TiB. Ignored
(the tunnel stays up): unknown cmds, messages without cmd or with the wrong
types, data/close/reset/connect_ok for an unknown stream (counted), 10,000
allocates at once (answers bounded by the limits). Cases where closing or
ignoring are both fair (garbage text, broken UTF-8, binary frames, an
unmasked frame, a 126-byte ping, a chunk over 16 KiB, bad base64, deep
nesting) must leave the relay and the witness unharmed; what the relay did
is logged. The HTTP side: no upgrade, unknown paths, raw garbage."""

import base64
import json
import os
import socket
import threading
import time
import uuid

from coapeer import (HostPeer, Realm, TcpServer, TunnelRelay, WsConn, connect_client,
                     echo_handler, metric_sum, recv_exact, skip_unless_ready)
from harness import check, http_raw, run, wait_for


def scenario(env):
    wr, ar = Realm(), Realm()
    relay = TunnelRelay(env, [wr, ar], pool_size=24, debug=False,
                        args=["--tunnel-max-allocs-realm", "4", "--tunnel-handshake-timeout", "3"])
    echo = TcpServer(env, echo_handler)
    targets = {"auth": echo.addr, "world": echo.addr}
    witness = HostPeer(env, relay, wr, targets=targets, name="witness")
    wa = witness.allocate_ok()
    wc = connect_client((wa["relay_host"], wa["world_port"]))
    n_case = [0]

    def witness_ok(after):
        env.daemons_alive(relay)
        check(witness.alive(), "the witness's tunnel closed after %s" % after)
        witness.ping()
        msg = ("witness %d" % n_case[0]).encode()
        n_case[0] += 1
        wc.sendall(msg)
        check(recv_exact(wc, len(msg)) == msg, "the witness's stream broke after %s" % after)

    def attacker(name):
        return HostPeer(env, relay, ar, targets=targets, name=name)

    def outcome(h, timeout=2):
        """'closed' or 'open' (answers a ping) after a case."""
        if h.reader is None:
            return "closed" if h.ws.wait_closed(timeout) else "open"
        try:
            h.ping(timeout)
            return "open"
        except Exception:
            return "closed" if (h.ws.closed or not h.reader.is_alive()) else "silent"

    # ---- must close ----
    def must_close(name, send, timeout=3):
        h = HostPeer(env, relay, ar, targets=targets, name=name, start=False)
        t0 = time.monotonic()
        try:
            send(h)
        except OSError:
            pass  # closed under our feet: fine
        closed = h.ws.wait_closed(timeout)
        check(closed, "%s: the tunnel stays open" % name)
        env.log("%s: closed after %.2fs (%s, code %s)" % (name, time.monotonic() - t0,
                                                         h.ws.eof_how, h.ws.close_code))
        witness_ok(name)

    pad = lambda n: {"cmd": "allocate", "request_id": 1, "player_id": str(uuid.uuid4()),
                     "pad": "x" * n}
    # A control message over 4 KiB: not acted on (closed, or dropped and
    # counted: both fair).
    h = attacker("5k-control")
    bad0 = relay.tunnel_metrics().get("rally_relay_tunnel_msgs_bad_total", 0)
    h.send(dict(pad(5000), request_id=77))
    st = outcome(h)
    check(not any(x.get("request_id") == 77 for x in h.msgs), "a 5 KiB allocate was answered: %r" % [
        x for x in h.msgs if x.get("request_id") == 77])
    bad1 = relay.tunnel_metrics().get("rally_relay_tunnel_msgs_bad_total", 0)
    check(st == "closed" or bad1 == bad0 + 1, "a 5 KiB allocate: tunnel %s, msgs_bad +%d" % (
        st, bad1 - bad0))
    env.log("5 KiB control message: tunnel %s, msgs_bad +%d" % (st, bad1 - bad0))
    witness_ok("a 5 KiB control message")
    over0 = relay.tunnel_metrics().get("rally_relay_tunnel_ws_oversize_total", 0)
    must_close("70 KiB data message", lambda h: h.ws.send_json(
        {"cmd": "data", "stream_id": 1, "chunk": base64.b64encode(os.urandom(52000)).decode()}))

    def fragments(h):
        body = json.dumps(pad(80000)).encode()
        parts = [body[i:i + 4096] for i in range(0, len(body), 4096)]
        for i, p in enumerate(parts):
            h.ws.send_frame(WsConn.OP_TEXT if i == 0 else WsConn.OP_CONT, p,
                            fin=(i == len(parts) - 1))
    must_close("80 KiB in 4 KiB fragments", fragments)

    rss0 = relay.rss()
    must_close("a frame header announcing 1 TiB",
               lambda h: h.ws.send_raw(WsConn.frame(WsConn.OP_TEXT, b"{" * 1024, length=1 << 40)))
    check(relay.rss() - rss0 < 32 * 1024, "RSS grew %d KiB after a 1 TiB header" % (relay.rss() - rss0))
    # Each of the three closed for its size, and counted as such.
    over1 = relay.tunnel_metrics().get("rally_relay_tunnel_ws_oversize_total", 0)
    check(over1 - over0 == 3, "ws_oversize_total +%d after three oversize messages" % (
        over1 - over0))

    p = HostPeer(env, relay, ar, hello=False, name="big-hello")
    p.read_challenge()
    try:
        p.ws.send_json({"realm_id": ar.id, "signature": "00" * 64, "pad": "x" * 100000})
    except OSError:
        pass
    check(p.ws.wait_closed(3), "a 100 KiB hello: the tunnel stays open")
    witness_ok("a 100 KiB hello")

    # ---- ignored: the tunnel stays up ----
    unk0 = relay.tunnel_metrics().get("rally_relay_tunnel_msgs_unknown_total", 0)
    a = attacker("ignored")
    for raw in ('{"cmd":"frobnicate"}', '{"cmd":"frobnicate","stream_id":1}', '{"foo":1}',
                '{"cmd":5}', '{"cmd":null}', '{"cmd":"PING"}', '{"cmd":""}',
                '{"cmd":"data","stream_id":424242,"chunk":"aGVsbG8="}',
                '{"cmd":"close","stream_id":424242}', '{"cmd":"reset","stream_id":424242}',
                '{"cmd":"connect_ok","stream_id":424242}',
                '{"cmd":"connect_err","stream_id":424242,"error":"x"}',
                '{"cmd":"data","stream_id":"1","chunk":"aGVsbG8="}',
                '{"cmd":"data","stream_id":-1,"chunk":"aGVsbG8="}',
                '{"cmd":"data","stream_id":18446744073709551617,"chunk":"aGVsbG8="}',
                '{"cmd":"allocate_ok","request_id":1}', '{"cmd":"connect","stream_id":1}',
                '{"cmd":"allocate"}', '{"cmd":"allocate","request_id":"x","player_id":5}',
                '{"cmd":"pong"}'):
        a.ws.send_text(raw)
        st = outcome(a)
        check(st == "open", "%s: the tunnel is %s" % (raw, st))
    witness_ok("ignored messages")
    m = relay.tunnel_metrics()
    unk = metric_sum(m, r"unknown.?stream")
    check(unk is not None and unk >= 1, "no metric counts data for an unknown stream: %r" % m)
    # frobnicate (twice), PING: unknown cmds, ignored and counted.
    unk1 = m.get("rally_relay_tunnel_msgs_unknown_total", 0)
    check(unk1 - unk0 >= 3, "msgs_unknown_total +%d after three unknown cmds" % (unk1 - unk0))
    env.log("unknown cmds counted: +%d" % (unk1 - unk0))

    # ---- 10,000 allocates at once ----
    f = attacker("flood")
    n = 10000
    t0 = time.monotonic()
    reqs = [json.dumps({"cmd": "allocate", "request_id": 10000 + i, "player_id": str(uuid.uuid4()),
                        "expected_client_ip": "127.0.0.1"}) for i in range(n)]
    sender = threading.Thread(target=lambda: [f.ws.send_text(x) for x in reqs], daemon=True)
    sender.start()

    def answers():
        return [x for x in list(f.msgs) if x.get("cmd") in ("allocate_ok", "allocate_err")]
    last = [0, time.monotonic()]

    def settled():
        k = len(answers())
        if k != last[0]:
            last[:] = [k, time.monotonic()]
        return k >= n or (not sender.is_alive() and time.monotonic() - last[1] > 1.5) or f.ws.closed
    wait_for(settled, 60, lambda: "the flood's answers (%d so far)" % len(answers()))
    sender.join(10)
    ans = answers()
    oks = [x for x in ans if x["cmd"] == "allocate_ok"]
    errs = {}
    for x in ans:
        if x["cmd"] == "allocate_err":
            errs[x.get("error")] = errs.get(x.get("error"), 0) + 1
    env.log("flood of %d allocates: %d answers in %.1fs (%d ok, errors %r), tunnel %s" % (
        n, len(ans), time.monotonic() - t0, len(oks), errs, "closed" if f.ws.closed else "open"))
    check(len(oks) <= 4, "%d allocations for a realm limited to 4" % len(oks))
    check(len(ans) <= n, "more answers than requests")
    check(set(errs) <= {"too many allocations for realm", "too many allocations",
                        "relay ports exhausted"}, "flood errors %r" % errs)
    witness_ok("the allocate flood")
    f.shutdown()
    relay.wait_health(active_allocations=1)  # the flood's host gone, its allocations too

    # ---- either is fair; the relay must come through ----
    def fair(name, send):
        h = attacker(name)
        try:
            send(h)
        except OSError:
            pass
        st = outcome(h)
        env.log("%s: tunnel %s" % (name, st))
        witness_ok(name)
        return h, st

    fair("garbage text", lambda h: [h.ws.send_text(x) for x in ("hello", "{", "}", "null", "[]",
                                                               "\"str\"", "1e999", "{" * 3000)])
    fair("broken UTF-8 in a text frame", lambda h: h.ws.send_frame(WsConn.OP_TEXT,
                                                                   b'{"cmd":"\xff\xfe"}'))
    fair("a binary frame holding a ping", lambda h: h.ws.send_frame(WsConn.OP_BIN,
                                                                            b'{"cmd":"ping"}'))
    fair("an unmasked frame", lambda h: h.ws.send_frame(WsConn.OP_TEXT, b'{"cmd":"ping"}', mask=False))
    fair("a 126-byte ping frame", lambda h: h.ws.send_frame(WsConn.OP_PING, b"p" * 126))
    fair("RSV bits set", lambda h: h.ws.send_frame(WsConn.OP_TEXT, b'{"cmd":"ping"}', rsv=4))
    fair("deep nesting", lambda h: h.ws.send_text('{"cmd":"ping","x":' + "[" * 2000 + "]" * 2000 + "}"))
    fair("duplicate keys", lambda h: h.ws.send_text('{"cmd":"ping","cmd":"allocate"}'))

    # A chunk over 16 KiB and bad base64 on a real stream.
    for name, chunk in (("a 20 KiB chunk", base64.b64encode(os.urandom(20480)).decode()),
                        ("bad base64", "!!!not base64!!!"), ("unpadded base64", "aGVsbG8")):
        h = attacker(name)
        al = h.allocate_ok()
        c = connect_client((al["relay_host"], al["world_port"]))
        st_ = h.wait_stream("world", token=al["token"])
        h.send({"cmd": "data", "stream_id": st_.id, "chunk": chunk})
        c.settimeout(2)
        try:
            got = c.recv(65536)
            what = "client got %d bytes" % len(got) if got else "client closed"
        except socket.timeout:
            what = "client got nothing"
        except ConnectionResetError:
            what = "client reset"
        env.log("%s: %s; stream reset=%s; tunnel %s" % (name, what, st_.got_reset.is_set(),
                                                        outcome(h)))
        c.close()
        witness_ok(name)

    # ---- HTTP side ----
    base = "http://%s:%d" % relay.tunnel
    st, body, _ = http_raw("GET", base + "/relay/v1/host")
    env.log("GET /relay/v1/host without upgrade -> %s" % st)
    check(400 <= st < 500, "GET /relay/v1/host without upgrade -> %s" % st)
    st, body, _ = http_raw("GET", base + "/nope")
    check(st == 404, "GET /nope -> %s" % st)
    st, body, _ = http_raw("POST", base + "/relay/v1/health", body=b"x")
    check(400 <= st < 500, "POST health -> %s" % st)
    st, body, _ = http_raw("GET", base + "/relay/v1/host", headers={
        "Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13"})
    check(400 <= st < 500, "an upgrade without Sec-WebSocket-Key -> %s" % st)
    for junk in (b"\x16\x03\x01\x02\x00" + os.urandom(500), os.urandom(4096), b"GET " + b"A" * 20000):
        s = socket.create_connection(relay.tunnel, timeout=5)
        try:
            s.sendall(junk)
            s.shutdown(socket.SHUT_WR)
            while s.recv(65536):
                pass
        except OSError:
            pass
        s.close()
    # Half-open upgrades: closed by the handshake timeout, the witness fine.
    idle = [WsConn(relay.tunnel, upgrade=False) for _ in range(20)]
    witness_ok("junk on the tunnel port")
    t0 = time.monotonic()
    for s in idle:
        s.sock.settimeout(max(0.1, 15 - (time.monotonic() - t0)))
        try:
            s.sock.recv(1)
        except OSError:
            pass
    env.log("20 idle connections: the last ended after %.1fs" % (time.monotonic() - t0))
    check(time.monotonic() - t0 < 15, "idle connections before the upgrade stay open")
    h = relay.health()
    check(h["connected_hosts"] >= 1, "health %r" % h)

    # Allocate with bad fields (coa's host sends a UUID and an IP; coa's
    # relay does not parse anything else): an answer, or nothing, but no
    # allocation. Last, on a tunnel of its own.
    a = attacker("bad-fields")
    before = relay.health()["active_allocations"]
    for i, bad in enumerate(({"player_id": "not-a-uuid"}, {"expected_client_ip": "999.1.1.1"},
                             {"expected_client_ip": "not an ip"})):
        req = {"cmd": "allocate", "request_id": 900 + i, "player_id": str(uuid.uuid4()),
               "expected_client_ip": "127.0.0.1"}
        req.update(bad)
        a.send(req)
        check(outcome(a) == "open", "allocate %r closed the tunnel" % bad)
        ans = [m for m in a.msgs if m.get("request_id") == req["request_id"]]
        env.log("allocate with %r -> %r" % (bad, ans))
        check(not any(m.get("cmd") == "allocate_ok" for m in ans), "allocate %r accepted" % bad)
    check(relay.health()["active_allocations"] == before, "a bad allocate allocated")
    m = relay.tunnel_metrics()
    env.log("tunnel metrics: %s" % {k: v for k, v in m.items() if v})
    witness.check_clean()
    wc.close()
    env.daemons_alive(relay)


skip_unless_ready("relay_coa_badinput")
run(scenario)
