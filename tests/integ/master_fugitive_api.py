#!/usr/bin/env python3
"""The Fugitive3D repository API answers as the Go service does, status by
status, one body per error (internal/httpapi/server.go): GET /servers and
/reflection/ip; POST with the UDP ping-back to a stand-in game server (ten
"ping" datagrams; "pong" registers, anything else is 406, a refused port is
504 at once); PUT as an upsert (201 registered, 202 updated); DELETE; the
validation messages; bodies over 4 KiB read as unparsable JSON; unrouted
methods get gin's 404. The master keeps serving throughout."""

import json
import re
import time

from harness import Master, PongServer, UdpPeer, check, http_raw, run, wait_for

BODY = {"name": "a server", "game_version": 3, "current_players": 2, "max_players": 8,
        "is_joinable": True}
JSON_TYPE = "application/json; charset=utf-8"


def call(m, method, path, body=None, raw=None, source=None):
    if raw is None and body is not None:
        raw = json.dumps(body).encode()
    st, data, hdrs = http_raw(method, m.url(path), body=raw, source=source,
                              headers={"Content-Type": "application/json"} if raw else None)
    return st, data, hdrs


def expect(m, method, path, status, result, body=None, raw=None, source=None):
    """One call whose answer must be exactly {"result":result} with status."""
    st, data, hdrs = call(m, method, path, body, raw, source)
    want = json.dumps({"result": result}, separators=(",", ":")).encode()
    check(st == status and data == want,
          "%s %s -> %s %r, want %s %r" % (method, path, st, data[:200], status, want))
    check(hdrs.get("Content-Type") == JSON_TYPE, "%s %s Content-Type %r" % (
        method, path, hdrs.get("Content-Type")))


def listing(m):
    st, data, hdrs = call(m, "GET", "/servers")
    check(st == 200 and hdrs.get("Content-Type") == JSON_TYPE, "GET /servers -> %s" % st)
    return data


def scenario(env):
    m = Master(env, args=["--ping-timeout", "3000"])
    gs = PongServer(env)
    sid = "127.0.0.1:%d" % gs.addr[1]

    # /reflection/ip and the empty list ("[]", never null).
    st, data, _ = call(m, "GET", "/reflection/ip")
    check(st == 200 and data == b'{"ip":"127.0.0.1"}', "reflection -> %s %r" % (st, data))
    check(listing(m) == b"[]", "empty list is not []")

    # POST: ten pings, one pong, registered.
    expect(m, "POST", "/servers/" + sid, 200, "registration complete", BODY)
    # The answer may come before the stand-in has read the last pings.
    wait_for(lambda: len(gs.packets()) >= 10, 5, "ten pings")
    # Room for an eleventh, which would be a bug: the master sends all its
    # pings before it suspends the request and closes their socket when it
    # answers, so anything more it sent is in the stand-in's queue by now,
    # and read once flush() returns.
    gs.flush()
    pings = gs.packets()
    check(len(pings) == 10 and all(d == b"ping" for _, d, _ in pings),
          "the game server got %r" % [d for _, d, _ in pings])
    srcs = {s for _, _, s in pings}
    check(len(srcs) == 1, "pings came from several sockets: %r" % srcs)
    entries = json.loads(listing(m))
    check(len(entries) == 1, "list: %r" % entries)
    e = entries[0]
    check(list(e.keys()) == ["ip", "port", "name", "game_version", "current_players",
                             "max_players", "is_joinable", "last_seen"], "fields: %r" % e)
    check(e["ip"] == "127.0.0.1" and e["port"] == gs.addr[1] and e["name"] == "a server" and
          e["game_version"] == 3 and e["current_players"] == 2 and e["max_players"] == 8 and
          e["is_joinable"] is True, "entry: %r" % e)
    check(re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", e["last_seen"]), "last_seen %r" % e)
    seen = time.mktime(time.strptime(e["last_seen"], "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
    check(abs(seen - time.time()) < 5, "last_seen %s is not now" % e["last_seen"])
    # A second POST for a known server pings again and says the same.
    expect(m, "POST", "/servers/" + sid, 200, "registration complete", BODY)
    wait_for(lambda: len(gs.packets()) == 20, 5, "ten more pings for the second POST")

    # PUT: an upsert. Trimmed name, compact JSON, HTML-safe escapes in the list.
    renamed = dict(BODY, name="  <a&b>  ", current_players=5, is_joinable=False)
    expect(m, "PUT", "/servers/" + sid, 202, "updated", renamed)
    data = listing(m)
    check(b'"name":"\\u003ca\\u0026b\\u003e"' in data and b'"current_players":5' in data and
          b'"is_joinable":false' in data, "list after PUT: %r" % data)
    expect(m, "PUT", "/servers/127.0.0.1:45678", 201, "registered", BODY)
    check(len(json.loads(listing(m))) == 2, "PUT did not add the unknown server")

    # PUT refusals, in the service's order: body, id, validation, caller.
    for raw in (b"{not json", b"", b"[]", b"{'name':'abc'}", b'{"name":5}',
                b'{"name":"abc","last_seen":"yesterday"}', b'{"name":"abc"} trailing'):
        expect(m, "PUT", "/servers/" + sid, 400, "invalid request JSON", raw=raw)
    expect(m, "PUT", "/servers/notanaddress", 400, "invalid request JSON", raw=b"{")
    expect(m, "PUT", "/servers/notanaddress", 400, "invalid server ID", BODY)
    expect(m, "PUT", "/servers/127.0.0.1", 400, "invalid server ID", BODY)
    expect(m, "PUT", "/servers/127.0.0.1:ab", 400, "invalid server ID", BODY)
    expect(m, "PUT", "/servers/127.0.0.1:45679", 400, "name length must be within range of 3-32",
           {"name": "ab"})
    expect(m, "PUT", "/servers/127.0.0.1:45679", 400, "name length must be within range of 3-32",
           {"name": "x" * 33})
    expect(m, "PUT", "/servers/127.0.0.1:45679", 400, "name length must be within range of 3-32",
           raw=b"null")
    expect(m, "PUT", "/servers/127.0.0.1:80", 400,
           "port is not within the valid port range of 1024-65535", BODY)
    expect(m, "PUT", "/servers/127.0.0.1:65536", 400,
           "port is not within the valid port range of 1024-65535", BODY)
    expect(m, "PUT", "/servers/[::1]:45679", 400, "IP is not a valid IPv4 address", BODY)
    expect(m, "PUT", "/servers/nohost:45679", 400, "IP is not a valid IPv4 address", BODY)
    expect(m, "PUT", "/servers/10.0.0.1:45679", 403,
           "request IP address does not match client IP address", BODY)
    # A body over the 4 KiB cap is one the service could not parse here.
    big = dict(BODY, pad="x" * 5000)
    expect(m, "PUT", "/servers/" + sid, 400, "invalid request JSON", big)
    check(len(json.loads(listing(m))) == 2, "a refused PUT changed the list")

    # POST refusals.
    expect(m, "POST", "/servers/notanaddress", 406, "invalid server ID", BODY)
    expect(m, "POST", "/servers/nohost:45679", 412, "Repository could not ping you.", BODY)
    expect(m, "POST", "/servers/127.0.0.1:70000", 412, "Repository could not ping you.", BODY)
    expect(m, "POST", "/servers/10.0.0.1:45679", 403,
           "request IP address does not match client IP address", BODY)
    nope = PongServer(env, reply=b"nope")
    expect(m, "POST", "/servers/127.0.0.1:%d" % nope.addr[1], 406, "Bad ping response", BODY)
    short = PongServer(env, reply=b"po")
    expect(m, "POST", "/servers/127.0.0.1:%d" % short.addr[1], 406, "Bad ping response", BODY)
    longer = PongServer(env, reply=b"pong and more")
    expect(m, "POST", "/servers/127.0.0.1:%d" % longer.addr[1], 200, "registration complete",
           BODY)
    # The pong comes first, then the body and the validation (as server.go).
    gs2 = PongServer(env)
    sid2 = "127.0.0.1:%d" % gs2.addr[1]
    expect(m, "POST", "/servers/" + sid2, 400, "invalid request JSON", raw=b"{not json")
    expect(m, "POST", "/servers/" + sid2, 400, "invalid request JSON", big)
    expect(m, "POST", "/servers/" + sid2, 400, "name length must be within range of 3-32",
           {"name": "ab"})
    wait_for(lambda: len(gs2.packets()) == 30, 5, "30 pings for the three bad-body POSTs")
    # A closed port: 504 as the service answers it (its read fails on the
    # ICMP error or at the deadline); we answer at once once a send was
    # refused.
    closed = UdpPeer(env)
    port = closed.addr[1]
    closed.close()
    closed.sock.close()
    t0 = time.monotonic()
    expect(m, "POST", "/servers/127.0.0.1:%d" % port, 504,
           "no ping response received, is your port not properly forwarded?", BODY)
    took = time.monotonic() - t0
    print("POST to a closed port: 504 after %.0f ms" % (took * 1000))
    check(took < 1.5, "a refused port waited %.1fs" % took)

    # DELETE.
    expect(m, "DELETE", "/servers/notanaddress", 404, "invalid server ID")
    expect(m, "DELETE", "/servers/10.0.0.1:45678", 403,
           "request IP address does not match client IP address")
    expect(m, "DELETE", "/servers/nohost:45678", 403,
           "request IP address does not match client IP address")
    expect(m, "DELETE", "/servers/127.0.0.1:45999", 404, "failure")
    expect(m, "DELETE", "/servers/127.0.0.1:45678", 200, "success")
    expect(m, "DELETE", "/servers/127.0.0.1:45678", 404, "failure")
    names = sorted(e["port"] for e in json.loads(listing(m)))
    check(names == sorted([gs.addr[1], longer.addr[1]]), "list after DELETE: %r" % names)

    # No route: gin's plain 404.
    for method, path in (("POST", "/servers"), ("DELETE", "/servers"), ("PATCH", "/servers/" + sid),
                         ("GET", "/servers/" + sid), ("HEAD", "/reflection/ip"),
                         ("POST", "/reflection/ip"), ("PUT", "/servers/"),
                         ("PUT", "/servers/%s/x" % sid)):
        st, data, hdrs = call(m, method, path, BODY)
        check(st == 404 and (method == "HEAD" or data == b"404 page not found"),
              "%s %s -> %s %r" % (method, path, st, data))

    # The counters.
    mt = m.metrics()
    for labels, want in ((('POST', 'registered'), 3), (('POST', 'bad_pong'), 2),
                         (('POST', 'no_pong'), 1), (('POST', 'forbidden'), 1),
                         (('POST', 'bad_id'), 1), (('POST', 'cannot_ping'), 2),
                         (('POST', 'invalid'), 3), (('PUT', 'updated'), 1),
                         (('PUT', 'registered'), 1), (('PUT', 'forbidden'), 1),
                         (('DELETE', 'removed'), 1)):
        key = 'rally_master_fugitive_requests_total{method="%s",outcome="%s"}' % labels
        check(mt.get(key) == want, "%s = %r, want %d" % (key, mt.get(key), want))
    check(mt.get("rally_master_fugitive_pingbacks_in_flight") == 0, "ping-backs left in flight")
    sent = mt.get('rally_master_fugitive_pings_total{result="sent"}', 0)
    failed = mt.get('rally_master_fugitive_pings_total{result="error"}', 0)
    check(sent + failed == 90 and failed >= 1, "pings counted: %d sent, %d failed" % (sent, failed))
    check(mt.get('rally_master_http_requests_total{endpoint="fugitive_register",status="200"}')
          == 3, "HTTP counters: %r" % {k: v for k, v in mt.items() if "fugitive_register" in k})
    check(mt.get('rally_master_entries{kind="fugitive"}') == 2, "entries gauge")
    env.daemons_alive(m)


if __name__ == "__main__":
    run(scenario)
