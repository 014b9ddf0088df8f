#!/usr/bin/env python3
"""The coa host tunnel's handshake: a realm in the keys file signs the
relay's nonce and is welcomed (signature in hex as coa sends it, and in
standard base64; a keys file with a base64 key); an unknown realm is told
"unauthorized" and closed, a wrong signature "invalid signature" and closed;
bad JSON and silence (--tunnel-handshake-timeout 2) are closed without a
word; SIGHUP with a new line in the keys file admits a new realm;
/relay/v1/health counts connected hosts; a standard WebSocket client
(python3-websockets) gets the same challenge; --tunnel-max-hosts turns away
a host over the limit; the relay pings (--tunnel-ping-interval 1, one per 5 s reaper tick) and a host that never
answers is dropped after --tunnel-idle-timeout, one that pongs stays. Each
refusal is counted by its reason in /metrics (hosts_refused_total{reason},
hosts_full_total)."""

import asyncio
import base64
import json
import time

from coapeer import HostPeer, Realm, TunnelRelay, WsConn, skip_unless_ready
from harness import check, run, wait_for


def refused(relay):
    """hosts_refused_total by reason, and hosts_full_total."""
    m = relay.tunnel_metrics()
    out = {r: m.get('rally_relay_tunnel_hosts_refused_total{reason="%s"}' % r, 0)
           for r in ("unauthorized", "invalid_signature", "bad_hello", "timeout")}
    out["full"] = m.get("rally_relay_tunnel_hosts_full_total", 0)
    return out


def scenario(env):
    # One realm per tunnel: a second tunnel of a realm might replace the
    # first, so each case that stays connected has a realm of its own.
    a, b, c, d, lr = Realm(), Realm(), Realm(), Realm(), Realm()
    relay = TunnelRelay(env, [a, b, d, lr], args=["--tunnel-handshake-timeout", "2",
                                          "--tunnel-max-hosts", "3",
                                          "--tunnel-ping-interval", "1",
                                          "--tunnel-idle-timeout", "4"])
    h = relay.health()
    check(h.get("status") == "ok" and h.get("service") == "coa-relay" and h.get("version") == 1,
          "health: %r" % h)
    check(h.get("connected_hosts") == 0 and h.get("active_allocations") == 0, "health: %r" % h)

    # Hex (coa) and base64 signatures.
    ha = HostPeer(env, relay, a, sig="hex", name="host-a")
    nonce_a = ha.challenge["nonce"]
    hb = HostPeer(env, relay, b, sig="base64", name="host-b")
    check(hb.challenge["nonce"] != nonce_a, "the same nonce twice: %r" % nonce_a)
    relay.wait_health(connected_hosts=2)
    ha.ping()
    hb.ping()

    r0 = refused(relay)
    check(r0 == dict(unauthorized=0, invalid_signature=0, bad_hello=0, timeout=0, full=0),
          "refusals before any: %r" % r0)
    # Unknown realm; wrong signature (another realm's key, and a flipped
    # bit); a signature of the wrong size; an id that is no UUID.
    for what, kw, want in (
            ("unknown realm", dict(realm_id=c.id), "unauthorized"),
            ("another realm's key", dict(signature=None), "invalid signature"),
            ("a flipped bit", dict(signature="flip"), "invalid signature"),
            ("a short signature", dict(signature="00" * 32), "invalid signature"),
    ):
        p = HostPeer(env, relay, a, hello=False, name="bad")
        nonce = p.read_challenge()
        if what == "unknown realm":
            sig = c.sign(nonce).hex()
            p.ws.send_json({"realm_id": c.id, "signature": sig})
        elif what == "another realm's key":
            p.ws.send_json({"realm_id": a.id, "signature": b.sign(nonce, a.id).hex()})
        elif what == "a flipped bit":
            s = bytearray(a.sign(nonce))
            s[17] ^= 0x10
            p.ws.send_json({"realm_id": a.id, "signature": bytes(s).hex()})
        else:
            p.ws.send_json({"realm_id": a.id, "signature": kw["signature"]})
        t0 = time.monotonic()
        try:
            ans = p.ws.recv_json(5)
        except Exception as e:
            ans = "no answer (%r)" % e
        check(ans == {"ok": False, "message": want}, "%s: answer %r" % (what, ans))
        check(p.ws.wait_closed(3), "%s: tunnel not closed after the refusal" % what)
        env.log("%s: %r, closed in %.2fs" % (what, ans, time.monotonic() - t0))

    # Bad JSON, JSON of the wrong shape: closed without an answer.
    for raw in ("{not json", "[1,2,3]", '{"realm_id":5,"signature":"x"}', "",
                '{"realm_id":"%s"}' % a.id):
        p = HostPeer(env, relay, a, hello=False, name="badjson")
        p.read_challenge()
        p.ws.send_text(raw)
        got = []
        t0 = time.monotonic()
        while True:
            try:
                got.append(p.ws.recv_json(5))
            except Exception:
                break
        check(p.ws.closed, "bad hello %r: still open after %r" % (raw, got))
        check(not any(isinstance(m, dict) and m.get("ok") is True for m in got),
              "bad hello %r welcomed: %r" % (raw, got))
        env.log("bad hello %r: closed in %.2fs after %r" % (raw, time.monotonic() - t0, got))

    # Every refusal so far counted by its reason (a short signature is an
    # invalid one; a hello of the wrong shape a bad one).
    r1 = refused(relay)
    check(r1 == dict(unauthorized=1, invalid_signature=3, bad_hello=5, timeout=0, full=0),
          "refusals counted: %r" % r1)

    # Silence: closed after the 2 s handshake timeout.
    p = WsConn(relay.tunnel)
    t0 = time.monotonic()
    ch = p.recv_json(5)
    check("nonce" in ch, "challenge %r" % ch)
    check(p.wait_closed(6), "a silent host still connected after 6 s")
    dt = time.monotonic() - t0
    check(1.5 <= dt <= 4.5, "silent host closed after %.2fs (timeout 2 s)" % dt)
    env.log("silent host closed after %.2fs" % dt)
    check(refused(relay)["timeout"] == 1, "the silent host counted: %r" % refused(relay))

    # A standard client library sees the same handshake.
    async def lib_hello():
        import websockets
        uri = "ws://%s:%d/relay/v1/host" % relay.tunnel
        async with websockets.connect(uri, max_size=1 << 20) as ws:
            ch = json.loads(await asyncio.wait_for(ws.recv(), 5))
            sig = lr.sign(ch["nonce"])
            await ws.send(json.dumps({"realm_id": lr.id, "signature": base64.b64encode(sig).decode()}))
            w = json.loads(await asyncio.wait_for(ws.recv(), 5))
            await ws.send(json.dumps({"cmd": "ping"}))
            while True:
                m = json.loads(await asyncio.wait_for(ws.recv(), 5))
                if m.get("cmd") == "pong":
                    return w
    w = asyncio.run(lib_hello())
    check(w == {"ok": True, "message": "welcome"}, "websockets library: %r" % w)
    relay.wait_health(connected_hosts=2)

    # SIGHUP: c is admitted once its line is in the keys file.
    p = HostPeer(env, relay, c, hello=False, name="host-c-early")
    check(p.hello() == {"ok": False, "message": "unauthorized"}, "c before the reload")
    relay.add_realm(c, fmt="base64")

    def c_admitted():
        q = HostPeer(env, relay, c, hello=False, name="host-c")
        ans = q.hello()
        if ans == {"ok": True, "message": "welcome"}:
            return q.start()
        q.shutdown()
        return None
    hc = wait_for(c_admitted, 5, "realm c admitted after SIGHUP", interval=0.2)
    relay.wait_health(connected_hosts=3)
    ha.ping()
    hb.ping()

    # A fourth host is over --tunnel-max-hosts 3.
    # (Refused at the upgrade, or after the hello: either way not welcomed
    # and closed.)
    p = None
    try:
        p = HostPeer(env, relay, d, hello=False, name="host-d")
        ans = p.hello()
    except Exception as e:
        ans = "refused (%s)" % e
    check(not (isinstance(ans, dict) and ans.get("ok") is True), "4th host welcomed: %r" % ans)
    check(p is None or p.ws.wait_closed(3), "the 4th host's tunnel stays open")
    env.log("4th host over the limit: %r" % ans)
    check(refused(relay)["full"] == 1, "the 4th host counted at the limit: %r" % refused(relay))
    relay.wait_health(connected_hosts=3)

    # Keepalive: the relay pings (its reaper runs every 5 s, so an interval
    # of 1 s means a ping per tick); a host that never pongs is dropped
    # after the 4 s idle timeout (within a tick), the others stay.
    hb.auto_pong = False
    n0 = hb.pings
    t0 = time.monotonic()
    wait_for(lambda: hb.ws.closed or not hb.reader.is_alive(), 15,
             "the relay to drop a host that never answers its pings")
    dt = time.monotonic() - t0
    env.log("silent host dropped after %.2fs, %d pings before, %d after it fell silent" % (
        dt, n0, hb.pings - n0))
    check(hb.pings >= 1, "no ping in %.1fs" % dt)
    check(dt <= 4 + 5 + 1, "dropped only after %.2fs (idle timeout 4 s, 5 s reaper)" % dt)
    check(ha.alive() and hc.alive(), "a host that answers pings was dropped too")
    check(ha.pings >= 1, "host a got %d pings" % ha.pings)
    relay.wait_health(connected_hosts=2)

    ha.shutdown()
    relay.wait_health(connected_hosts=1)
    hc.ping()
    for hp in (ha, hc):
        hp.check_clean()
    env.daemons_alive(relay)


skip_unless_ready("relay_coa_handshake")
run(scenario)
