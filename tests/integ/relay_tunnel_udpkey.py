#!/usr/bin/env python3
"""The datagram path's key exchange is bound to the realm: the agent's
X25519 half is taken only with the realm key's signature over both halves
and this tunnel's nonce ("rally-udp-key-v1\\n<realm>\\n<nonce>\\n<relay's
udp_key>\\n<agent's udp_key>"), so nobody between the two ends can swap
either key (the coa hello signs neither). A host of the --server realm
answers the relay's x_rally offer unsigned, with a signature of another
message (the coa hello's), with another realm's key, and with a swapped
relay key: each refused (tunnel-udp-key-refused, udp_key_refused_total,
the path stays off UDP); then signed right: keyed (tunnel-udp-keyed).
rally-relay agent signs (integ.relay_tunnel_udp)."""

import base64
import os

from coapeer import HostPeer, Realm, TunnelRelay, skip_unless_ready
from harness import check, run, wait_for


def udp_key_message(realm, nonce, relay_key, agent_key):
    return ("rally-udp-key-v1\n%s\n%s\n%s\n%s" % (realm, nonce, relay_key, agent_key)).encode()


def scenario(env):
    skip_unless_ready("relay_tunnel_udpkey")
    r, other = Realm(), Realm()
    relay = TunnelRelay(env, [r, other], args=["--listen", "127.0.0.1:0",
                                               "--server", "tunnel:" + r.id])
    relay.wait_line(r"^(?:<\d>)?ready listen=", 5)

    def refused():
        return relay.tunnel_metrics().get("rally_relay_tunnel_udp_key_refused_total", 0)

    def attempt(what, sign):
        """One tunnel of realm r; its answer to the offer signed by sign
        (None: no udp_sig). Returns whether the relay keyed the path."""
        h = HostPeer(env, relay, r, name="host-" + what.replace(" ", "-"))
        offer = h.wait_msg(lambda m: m.get("cmd") == "x_rally", 5, "the relay's x_rally offer")
        check(offer.get("udp_key") and offer.get("udp_id"), "offer without UDP: %r" % offer)
        nonce = h.challenge["nonce"]
        ours = base64.b64encode(os.urandom(32)).decode()
        ans = {"cmd": "x_rally", "version": 1, "features": 2, "udp_key": ours}
        sig = sign(nonce, offer["udp_key"], ours)
        if sig is not None:
            ans["udp_sig"] = sig.hex()
        n0 = refused()
        check(h.send(ans), "%s: tunnel closed" % what)
        h.ping()  # the relay has read the answer before it pongs
        keyed = bool(relay.grep(r"tunnel-udp-keyed realm=%s" % r.id))
        check(keyed or refused() == n0 + 1, "%s: neither keyed nor counted" % what)
        h.ping()  # the tunnel itself stays up either way
        h.shutdown()
        relay.wait_health(5, connected_hosts=0)
        return keyed

    right = lambda n, rk, ak: r.key.sign(udp_key_message(r.id, n, rk, ak)).signature
    for what, sign in (
            ("unsigned", lambda n, rk, ak: None),
            ("the hello's signature", lambda n, rk, ak: r.sign(n)),
            ("another realm's key",
             lambda n, rk, ak: other.key.sign(udp_key_message(r.id, n, rk, ak)).signature),
            ("a swapped relay key",
             lambda n, rk, ak: right(n, base64.b64encode(os.urandom(32)).decode(), ak)),
            ("another nonce", lambda n, rk, ak: right(n + "x", rk, ak))):
        check(not attempt(what, sign), "%s: the relay keyed the datagram path" % what)
        env.log("%s: refused" % what)
    check(refused() == 5, "udp_key_refused_total %s, want 5" % refused())
    check(len(relay.grep(r"tunnel-udp-key-refused .*reason=\"unsigned\"")) == 1 and
          len(relay.grep(r"tunnel-udp-key-refused .*reason=\"bad signature\"")) == 4,
          "the refusals' reasons")
    check(attempt("signed right", right), "a right signature was not keyed")
    wait_for(lambda: refused() == 5, 2, "no refusal for the right one")
    env.log("signed over both keys and the nonce: keyed")
    env.daemons_alive(relay)


run(scenario)
