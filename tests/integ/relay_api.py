#!/usr/bin/env python3
"""The control API refuses what it should, with clear statuses and bodies:
no token, a short or wrong token (401, constant-time compare), a bad IP in
the path, bad JSON, bad fields, an oversize body (413), wrong methods (405),
unknown paths (404); /healthz needs no token; /metrics is Prometheus text. A
token file shorter than 32 characters is refused at start. The relay keeps
serving throughout."""

import os
import socket

from harness import RELAY_BIN, TOKEN, OAServer, Proc, Relay, check, http, query, run


def scenario(env):
    oa = OAServer(env)
    relay = Relay(env, oa.addr)

    for tok, what in ((None, "no token"), ("", "empty"), ("short", "short"),
                      (TOKEN[:-1], "one char short"), (TOKEN + "x", "one char long"),
                      (TOKEN[:-1] + "X", "last char wrong")):
        st, body, hdrs = http("GET", relay.url("/sessions"), token=tok or None)
        check(st == 401, "%s token -> %s" % (what, st))
        check(body == {"error": "missing or wrong bearer token"}, "401 body: %r" % body)
        check(hdrs.get("WWW-Authenticate", "").startswith("Bearer"), "WWW-Authenticate missing")
    st, body, _ = http("GET", relay.url("/sessions"), headers={"Authorization": "Basic " + TOKEN})
    check(st == 401, "Basic auth accepted")

    st, body, _ = http("GET", relay.url("/healthz"))
    check(st == 200 and body == {"status": "ok"}, "healthz: %s %r" % (st, body))

    for ip in ("not-an-ip", "300.1.1.1", "1.2.3", "", "1.2.3.4:80", "::g"):
        st, body, _ = relay.api("PUT", "/bans/" + ip, {"reason": "x"})
        check(st == 400 and "IP" in body["error"], "bad IP %r -> %s %r" % (ip, st, body))

    cases = [
        (b"{", "truncated"), (b"not json", "offset"), (b"[]", "not a JSON object"),
        (b"{}", "reason"), (b'{"reason":5}', "reason"), (b'{"reason":"x","duration":0}', "duration"),
        (b'{"reason":"x","duration":-5}', "duration"), (b'{"reason":"x","duration":1.5}', "duration"),
        (b'{"reason":"x","duration":"60"}', "duration"), (b'{"reason":"x"} trailing', "offset 15"),
        (b'{"reason":"' + b"r" * 300 + b'"}', "reason"), (b'{"reason":"a\\u0001b"}', "reason"),
        (b'{"reason":"x","duration":999999999999}', "duration"),
    ]
    for raw, word in cases:
        st, body, _ = relay.api("PUT", "/bans/192.0.2.1", raw=raw)
        check(st == 400 and word in body["error"], "body %r -> %s %r" % (raw[:40], st, body))
    st, body, _ = relay.api("PUT", "/bans/192.0.2.1", raw=b'{"reason":"' + b"x" * 5000 + b'"}')
    check(st == 413, "oversize body -> %s %r" % (st, body))
    st, bans, _ = relay.api("GET", "/bans")
    check(bans == [], "a refused PUT left a ban: %r" % bans)

    st, _, hdrs = relay.api("POST", "/bans")
    check(st == 405 and "GET" in hdrs.get("Allow", ""), "POST /bans -> %s" % st)
    st, _, hdrs = relay.api("GET", "/bans/192.0.2.1")
    check(st == 405 and "PUT" in hdrs.get("Allow", ""), "GET /bans/ip -> %s" % st)
    st, _, _ = relay.api("DELETE", "/sessions")
    check(st == 405, "DELETE /sessions -> %s" % st)
    st, _, _ = relay.api("GET", "/nope")
    check(st == 404, "unknown path -> %s" % st)

    st, text, hdrs = relay.api("GET", "/metrics")
    check(st == 200 and hdrs["Content-Type"].startswith("text/plain"), "metrics %s" % st)
    for name in ("rally_relay_sessions", "rally_relay_packets_total", "rally_relay_bytes_total",
                 "rally_relay_drops_total", "rally_relay_bans", "rally_relay_query_sources",
                 "rally_relay_kernel_drops_total"):
        check("# TYPE %s " % name in text, "metric %s missing" % name)
    for reason in ("filtered", "rate_limited", "banned", "queue_full", "session_cap"):
        check('rally_relay_drops_total{reason="%s"}' % reason in text, "drop reason %s missing" % reason)
    check(relay.metrics()["rally_relay_control_unauthorized_total"] >= 7, "unauthorized counter")
    check(http("GET", relay.url("/sessions"), token=TOKEN)[0] == 200, "good token refused")

    # Raw garbage on the HTTP port does not hurt.
    s = socket.create_connection(relay.control)
    s.sendall(b"\x00\xff GARBAGE \r\n\r\n" * 100)
    s.settimeout(3)
    try:
        s.recv(4096)
    except OSError:
        pass
    s.close()
    check(query(env.udp(), relay.addr, "getinfo", timeout=2) is not None, "relay stopped serving")
    env.daemons_alive(relay, oa)

    # A short token file is refused at start, with the reason.
    short = os.path.join(env.dir, "short-token")
    with open(short, "w") as f:
        f.write("x" * 31 + "\n")
    p = Proc(env, "relay-short", [RELAY_BIN, "--listen", "127.0.0.1:0", "--server", "%s:%d" % oa.addr,
                                  "--no-heartbeat", "--state-dir", os.path.join(env.dir, "s2"),
                                  "--control", "127.0.0.1:0", "--token-file", short])
    check(p.wait_exit(10) != 0, "a 31-character token was accepted")
    check(p.grep(r"token-refused file=.*short-token reason=\"shorter than 32 characters\""),
          "no clear reason: %r" % p.output())
    # A missing token file too.
    p = Proc(env, "relay-notoken", [RELAY_BIN, "--listen", "127.0.0.1:0", "--server", "%s:%d" % oa.addr,
                                    "--no-heartbeat", "--state-dir", os.path.join(env.dir, "s3"),
                                    "--control", "127.0.0.1:0", "--token-file", "/nonexistent/tok"])
    check(p.wait_exit(10) != 0 and p.grep(r"token-file-unreadable file=/nonexistent/tok"),
          "missing token file: %r" % p.output())


run(scenario)
