#!/usr/bin/env python3
"""rally-relay agent over wss://: TLS is left to a reverse proxy in front of
the relay, as coa deploys it (docs/relay.md has the nginx example). Here the
proxy is Python's ssl module (OpenSSL) terminating TLS and passing the bytes
on to the relay's tunnel port, with a certificate the test makes for
127.0.0.1 (an IP SAN) and for localhost. The agent trusts it through
--ca-file: the tunnel comes up, an allocation carries a stream through it;
with the system's CAs instead (which do not know this certificate) and with
a certificate for another name the agent refuses the server, logs why, and
keeps retrying without ever sending its hello."""

import os
import socket
import ssl
import threading

from coapeer import (AgentProc, Realm, TcpServer, TunnelRelay, connect_client, duplex, echo_handler,
                     make_cert, skip_unless_ready)
from harness import TOKEN, check, http, run, wait_for


class TlsProxy:
    """Terminates TLS on 127.0.0.1:0 and pipes each connection to target."""

    def __init__(self, env, key, crt, target):
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(crt, key)
        self.target = target
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.addr = self.sock.getsockname()
        self.handshakes = 0
        self.failures = 0
        threading.Thread(target=self._accept, daemon=True).start()
        env.cleanups.append(self.sock.close)

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        try:
            t = self.ctx.wrap_socket(c, server_side=True)
        except (ssl.SSLError, OSError):
            self.failures += 1
            c.close()
            return
        self.handshakes += 1
        u = socket.create_connection(self.target)

        def pipe(a, b):
            try:
                while True:
                    d = a.recv(65536)
                    if not d:
                        break
                    b.sendall(d)
            except OSError:
                pass
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

        threading.Thread(target=pipe, args=(u, t), daemon=True).start()
        pipe(t, u)


def agent(env, url, realm, world, extra, name):
    return AgentProc(env, url, realm, ["--world", "%s:%d" % world] + extra, name, wait_up=False)


def scenario(env):
    skip_unless_ready("relay_tunnel_wss")
    r = Realm()
    relay = TunnelRelay(env, [r], pool_size=4)
    world = TcpServer(env, echo_handler)
    key, crt = make_cert(env.dir, "relay", "IP:127.0.0.1,DNS:localhost")
    proxy = TlsProxy(env, key, crt, relay.tunnel)
    url = "wss://127.0.0.1:%d/relay/v1/host" % proxy.addr[1]

    # ---- trusted through --ca-file: the tunnel works end to end ----
    ag = agent(env, url, r, world.addr, ["--ca-file", crt], "agent")
    ag.wait_line(r"tunnel-up", 10)
    ag.wait_line(r"tunnel-data-up", 10)  # the data channel through TLS too
    st, a, _ = http("POST", "http://%s:%d/allocate" % ag.control,
                    {"player_id": "11111111-2222-4333-8444-555555555555",
                     "expected_client_ip": "127.0.0.1"}, token=TOKEN, timeout=10)
    check(st == 200, "allocate over wss: %s %r" % (st, a))
    w = connect_client((a["relay_host"], a["world_port"]), timeout=30)
    rec = {}
    duplex(w, 4 << 20, rec)
    check(rec.get("recv_sha") == rec.get("sent_sha"), "4 MiB through the TLS tunnel: %r" % rec)
    w.close()
    ag.stop()

    # ---- the system's CAs do not know it: refused, retried ----
    before = proxy.failures
    ag2 = agent(env, url, r, world.addr, [], "agent-untrusted")
    ag2.wait_line(r"ws-tls-fail host=127\.0\.0\.1 verify=", 10)
    wait_for(lambda: len(ag2.grep(r"ws-tls-fail")) >= 2, 15, "a second attempt (backoff)")
    check(not ag2.grep(r"tunnel-up"), "an untrusted relay was accepted")
    check(proxy.failures > before, "the proxy saw no failed handshake")
    ag2.stop()

    # ---- trusted CA, wrong name: refused too ----
    key2, crt2 = make_cert(env.dir, "other", "DNS:relay.example.org")
    proxy2 = TlsProxy(env, key2, crt2, relay.tunnel)
    ag3 = agent(env, "wss://127.0.0.1:%d/relay/v1/host" % proxy2.addr[1], r, world.addr,
                ["--ca-file", crt2], "agent-wrongname")
    ag3.wait_line(r"ws-tls-fail", 10)
    check(not ag3.grep(r"tunnel-up"), "a certificate for another name was accepted")
    relay.wait_health(5, connected_hosts=0)
    env.daemons_alive(relay)


run(scenario)
