#!/usr/bin/env python3
"""rally-relay's tunnel behind a real nginx terminating TLS, configured with
the location block docs/relay.md gives operators (read from the doc itself,
so the example cannot drift from what works): `rally-relay agent` dials
wss:// through nginx, both its WebSocket and its data channel (GET
/relay/v1/data, Upgrade: rally-data-1) pass nginx's upgrade handling, an
allocation carries 8 MiB byte-exact both ways through the tunnel, and
GET /relay/v1/health answers through nginx too. nginx runs from a scratch
prefix in the test's directory, never the packaged service."""

import json
import os
import re
import shutil
import ssl
import time
import urllib.request

from coapeer import (AgentProc, Realm, TcpServer, TunnelRelay, connect_client, duplex, echo_handler,
                     free_port, make_cert, skip_unless_ready)
from harness import TOKEN, Proc, check, http, run, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
DOC = os.path.join(HERE, "..", "..", "docs", "relay.md")
NGINX = "/usr/sbin/nginx"


def doc_location():
    """The `location /relay/v1/ { ... }` block of the doc's nginx example."""
    text = open(DOC).read()
    m = re.search(r"```nginx\n(.*?)```", text, re.S)
    check(m is not None, "docs/relay.md has no ```nginx example")
    loc = re.search(r"(location /relay/v1/ \{.*?\n    \})", m.group(1), re.S)
    check(loc is not None, "the doc's nginx example has no location /relay/v1/ block")
    return loc.group(1)


def scenario(env):
    skip_unless_ready("relay_tunnel_nginx")
    check(shutil.which(NGINX) or os.path.exists(NGINX),
          "%s is missing: apt-get install nginx (tools/dev.sh test does)" % NGINX)
    r = Realm()
    relay = TunnelRelay(env, [r], pool_size=4)
    world = TcpServer(env, echo_handler)
    key, crt = make_cert(env.dir, "relay", "IP:127.0.0.1,DNS:localhost")

    loc = doc_location().replace("http://127.0.0.1:8082", "http://%s:%d" % relay.tunnel)
    check("127.0.0.1:%d" % relay.tunnel[1] in loc, "the doc's proxy_pass moved: %s" % loc)
    prefix = os.path.join(env.dir, "nginx")
    os.makedirs(os.path.join(prefix, "logs"))
    port = free_port()
    conf = os.path.join(prefix, "nginx.conf")
    with open(conf, "w") as f:
        f.write("""worker_processes 1;
error_log %(p)s/logs/error.log info;
pid %(p)s/nginx.pid;
events { worker_connections 256; }
http {
    access_log off;
    client_body_temp_path %(p)s/body;
    proxy_temp_path %(p)s/proxy;
    fastcgi_temp_path %(p)s/fastcgi;
    uwsgi_temp_path %(p)s/uwsgi;
    scgi_temp_path %(p)s/scgi;
    server {
        listen 127.0.0.1:%(port)d ssl;
        server_name localhost;
        ssl_certificate     %(crt)s;
        ssl_certificate_key %(key)s;
    %(loc)s
    }
}
""" % dict(p=prefix, port=port, crt=crt, key=key, loc=loc))
    t = Proc(env, "nginx", [NGINX, "-p", prefix, "-c", conf, "-g", "daemon off;"])
    ctx = ssl.create_default_context(cafile=crt)

    def health():
        try:
            with urllib.request.urlopen("https://127.0.0.1:%d/relay/v1/health" % port,
                                        context=ctx, timeout=2) as resp:
                return json.loads(resp.read())
        except OSError:
            return None
    h = wait_for(health, 10, "nginx to serve the relay's health")
    check(h.get("service") and h.get("connected_hosts") == 0, "health through nginx: %r" % h)

    ag = AgentProc(env, "wss://127.0.0.1:%d/relay/v1/host" % port, r,
                   ["--world", "%s:%d" % world.addr, "--ca-file", crt], "agent", wait_up=False)
    ag.wait_line(r"tunnel-up", 10)
    ag.wait_line(r"tunnel-data-up", 10)
    check(wait_for(lambda: (health() or {}).get("connected_hosts") == 1, 5, "the host counted"),
          "health")
    st, a, _ = http("POST", "http://%s:%d/allocate" % ag.control,
                    {"player_id": "11111111-2222-4333-8444-555555555555",
                     "expected_client_ip": "127.0.0.1"}, token=TOKEN, timeout=10)
    check(st == 200, "allocate through nginx: %s %r" % (st, a))
    w = connect_client((a["relay_host"], a["world_port"]), timeout=30)
    rec = {}
    t0 = time.monotonic()
    duplex(w, 8 << 20, rec)
    check(rec.get("recv_sha") == rec.get("sent_sha"), "8 MiB through nginx: %r" % rec)
    env.log("8 MiB each way through nginx's TLS and the tunnel in %.2f s" % (
        time.monotonic() - t0))
    w.close()
    ag.stop()
    relay.wait_health(5, connected_hosts=0)
    errs = [ln for ln in open(os.path.join(prefix, "logs", "error.log"))
            if "[error]" in ln or "[crit]" in ln or "[emerg]" in ln]
    check(not errs, "nginx logged errors: %r" % errs[:5])
    env.daemons_alive(relay, t)


run(scenario)
