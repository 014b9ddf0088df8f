#!/usr/bin/env python3
"""The netpunch master's HTTP API, status code by status code, byte for byte
as the reference masterserver.py answers (../shared/vectors/master-api.md,
and differential runs against the reference for the odd field values):
/health, /announce, /leave, /list (and /, and any path ending in them),
/pipe, unknown paths, bodies of 4,096 and 4,097 bytes, the knock refusals.
Every answer carries Content-Type, Cache-Control: no-store and
Access-Control-Allow-Origin: *. Then the limits: 500 rows (503 "full" for a
new id, a re-announce still works), newest announce first, "age" growing,
and rows expiring after --lobby-ttl (shortened here)."""

import json
import re
import time

from harness import Master, check, http_raw, private_loopback, run, wait_for

OK30 = b'{"ok": true, "ttl": 30}'
OK = b'{"ok": true}'
BAD = b'{"error": "bad request"}'
NOT_FOUND = b'{"error": "not found"}'
JSON_TYPE = "application/json; charset=utf-8"
TAG = "bf621fd0f94caef64dc3a0bd"

# master-api.md, "Captured (two rows)"; <int> stands for now and the ages.
LIST_TWO = (b'{"servers": [{"name": "My relay server with a very long name th", "code": "RELAYCODE", '
            b'"players": 7, "max": 8, "game": "dedicated server", "type": "relay", '
            b'"version": "0.6.1.24-extra-long-", "locked": true, "age": <int>}, '
            b'{"name": "Alice lobby", "code": "7FVLCO4AYCUACFDTD7DDGZCNOMPXGHYAAEAAAAAAAAAB", '
            b'"players": 2, "max": 200, "game": "player hosted", "type": "host", '
            b'"version": "0.6.1.24", "locked": false, "age": <int>}], "now": <int>, "ttl": 30}')
LIST_EMPTY = b'{"servers": [], "now": <int>, "ttl": 30}'

# Odd field values: each announce and the row the reference lists for it.
ODD = [
    (b'{"id": 0, "code": 0}',
     b'{"name": "unnamed", "code": "0", "players": 0, "max": 8, "game": "player hosted", '
     b'"type": "host", "version": "", "locked": false, '),
    (b'{"id": "e1", "code": "C", "name": "' + b"\\u00e9" * 45 + b'", "players": "\\u0661\\u0662", '
     b'"max": "\\u00a07\\u00a0", "type": "dedicated", "version": 12345678901234567890123, "locked": "0"}',
     b'{"name": "' + b"\\u00e9" * 40 + b'", "code": "C", "players": 12, "max": 7, '
     b'"game": "dedicated server", "type": "dedicated", "version": "12345678901234567890", '
     b'"locked": true, '),
    (b'{"id": "e2", "code": ["a\\u200b", 1e16, null, true], "players": 1e400, "max": -3, "locked": []}',
     b'{"name": "unnamed", "code": "[\'a\\\\u200b\', 1e+16, None, True]", "players": 0, "max": 0, '
     b'"game": "player hosted", "type": "host", "version": "", "locked": false, '),
    (b'{"id": "e3", "code": "a\\u0000b", "name": "\\ud800", "version": {"k": "it\'s"}}',
     b'{"name": "\\ud800", "code": "a\\u0000b", "players": 0, "max": 8, "game": "player hosted", '
     b'"type": "host", "version": "{\'k\': \\"it\'s\\"}", "locked": false, '),
    (b'{"id": "e4", "code": "C", "game": "dedicated relay", "type": "HOST", "locked": 0.0}',
     b'{"name": "unnamed", "code": "C", "players": 0, "max": 8, "game": "dedicated server", '
     b'"type": "relay", "version": "", "locked": false, '),
    (b'{"id": "e5", "code": "C", "players": "1_000", "max": "7.5", "name": "dup", "name": "last"}',
     b'{"name": "last", "code": "C", "players": 1000, "max": 8, "game": "player hosted", '
     b'"type": "host", "version": "", "locked": false, '),
    (b'{"id": "e6", "code": "C", "players": true, "max": "  9 ", "version": NaN, "name": -0.0}',
     b'{"name": "-0.0", "code": "C", "players": 1, "max": 9, "game": "player hosted", '
     b'"type": "host", "version": "nan", "locked": false, '),
]


def call(m, method, path, body=None, headers=None):
    """(status, body bytes) of one request; checks the headers every answer
    of the reference carries."""
    st, data, hdrs = http_raw(method, m.url(path), body=body, headers=headers)
    h = {k.lower(): v for k, v in hdrs.items()}
    want = "text/plain" if path.split("?")[0].rstrip("/").endswith("/health") and \
        method == "GET" else JSON_TYPE
    check(h.get("content-type") == want, "%s %s: Content-Type %r" % (method, path, h.get("content-type")))
    check(h.get("cache-control") == "no-store", "%s %s: Cache-Control %r" % (method, path, h.get("cache-control")))
    check(h.get("access-control-allow-origin") == "*", "%s %s: no Access-Control-Allow-Origin: *" % (method, path))
    check(h.get("content-length") == str(len(data)), "%s %s: Content-Length %r for %d bytes" % (
        method, path, h.get("content-length"), len(data)))
    return st, data


def expect(m, method, path, body, status, want, headers=None):
    st, data = call(m, method, path, body, headers)
    check((st, data) == (status, want), "%s %s %r -> %s %r, want %s %r" % (
        method, path, body if body is None else body[:80], st, data[:300], status, want))


def like(data, template):
    """data is template byte for byte but for its <int> fields; returns them."""
    rx = b"^" + re.escape(template).replace(re.escape(b"<int>"), rb"(\d+)") + b"$"
    mt = re.match(rx, data)
    check(mt, "body %r\n  is not like %r" % (data[:600], template[:600]))
    return [int(g) for g in mt.groups()]


def list_like(m, path, template):
    st, data = call(m, "GET", path)
    check(st == 200, "GET %s -> %s" % (path, st))
    ints = like(data, template)
    now = ints[-1]
    check(abs(now - time.time()) <= 2, "now %d is not the time" % now)
    for age in ints[:-1]:
        check(0 <= age <= 2, "age %d right after announcing" % age)
    return data


def rows(m):
    st, data = call(m, "GET", "/list")
    check(st == 200, "GET /list -> %s" % st)
    return json.loads(data)["servers"]


def matrix(m):
    expect(m, "GET", "/health", None, 200, b"ok")
    expect(m, "GET", "/tpf2mp/health/", None, 200, b"ok")
    expect(m, "GET", "/x/health?y=1", None, 200, b"ok")
    list_like(m, "/list", LIST_EMPTY)

    expect(m, "POST", "/announce", b'{"id":"abc123","name":"Alice lobby",'
           b'"code":"7FVLCO4AYCUACFDTD7DDGZCNOMPXGHYAAEAAAAAAAAAB","players":2,"max":200,'
           b'"type":"host","version":"0.6.1.24","locked":false}', 200, OK30)
    expect(m, "POST", "/announce", b'{"id":"relay1","name":"My relay server with a very long name '
           b'that gets cut","code":"RELAYCODE","game":"dedicated relay",'
           b'"version":"0.6.1.24-extra-long-version","locked":1,"players":"7","max":"x"}', 200, OK30)
    for path in ("/list", "/list/", "/tpf2mp/list", "/x/list/", "/", "//", "/list?x=1", "/a/b/list"):
        list_like(m, path, LIST_TWO)

    expect(m, "POST", "/announce", b'{"id":"abc124","name":"x"}', 400, b'{"error": "code required"}')
    expect(m, "POST", "/announce", b'{"id":"abc124","code":null}', 400, b'{"error": "code required"}')
    expect(m, "POST", "/announce", b'{"name":"x","code":"C"}', 400, BAD)
    expect(m, "POST", "/announce", b'{"id":"","code":"C"}', 400, BAD)
    expect(m, "POST", "/announce", b'{"id":null,"code":"C"}', 400, BAD)
    expect(m, "POST", "/announce", b"hello", 400, BAD)
    expect(m, "POST", "/announce", None, 400, BAD)
    expect(m, "POST", "/announce", b"[1,2]", 400, BAD)
    expect(m, "POST", "/announce", b"{'id':'x','code':'c'}", 400, BAD)
    expect(m, "POST", "/announce", b'{"id":"x","code":"c"} x', 400, BAD)
    expect(m, "POST", "/announce", b'{"id":"\xff","code":"c"}', 400, BAD)
    expect(m, "POST", "/announce", b'{"id":"\xed\xa0\x80","code":"c"}', 400, BAD)  # a surrogate
    expect(m, "POST", "/announce", b'{"id":"\xc0\xaf","code":"c"}', 400, BAD)      # overlong
    # Bodies: 4,097 bytes are refused, 4,096 taken (the code cut to 400).
    pre, post = b'{"id":"big","code":"', b'"}'
    expect(m, "POST", "/announce", pre + b"A" * (4097 - len(pre) - len(post)) + post, 400, BAD)
    expect(m, "POST", "/announce", pre + b"A" * (4096 - len(pre) - len(post)) + post, 200, OK30)
    r = [x for x in rows(m) if x["code"].startswith("AAAA")]
    check(len(r) == 1 and r[0]["code"] == "A" * 400 and r[0]["name"] == "unnamed",
          "the 4,096-byte announce is listed as %r" % r)
    expect(m, "POST", "/leave", b'{"id":"big"}', 200, OK)

    expect(m, "POST", "/leave", b'{"id":"never-was"}', 200, OK)
    expect(m, "POST", "/leave", b'{"code":"c"}', 400, BAD)
    expect(m, "POST", "/leave", b"junk", 400, BAD)
    expect(m, "GET", "/pipe", None, 404, b'{"error": "no pipe"}')
    expect(m, "GET", "/tpf2mp/pipe/", None, 404, b'{"error": "no pipe"}')

    # Unknown paths: GET 404; POST 404 with an id, 400 without one.
    for path in ("/foo", "/tpf2mp", "/listx", "/LIST", "/announce", "/leave", "/list/."):
        expect(m, "GET", path, None, 404, NOT_FOUND)
    for path in ("/foo", "/list", "/health", "/", "/announce/x"):
        expect(m, "POST", path, b'{"id":"pp","code":"c"}', 404, NOT_FOUND)
        expect(m, "POST", path, b'{"code":"c"}', 400, BAD)
        expect(m, "POST", path, b"junk", 400, BAD)
    # Methods the reference has no handler for: ours answer JSON 501.
    expect(m, "PUT", "/list", b"{}", 501, b'{"error": "unsupported method"}')
    expect(m, "DELETE", "/announce", None, 501, b'{"error": "unsupported method"}')

    # The knock's refusals (the relay is on, so a bad nonce is looked at).
    expect(m, "POST", "/knock", b'{"s":"XYZ","blob":"AAAA"}', 400, b'{"error": "bad knock"}')
    for blob in (b'"not base64!"', b'""', b'"' + b"A" * 1025 + b'"', b"null", b"[1]"):
        expect(m, "POST", "/knock", b'{"s":"%s","blob":%s}' % (TAG.encode(), blob), 400,
               b'{"error": "bad knock"}')
    expect(m, "POST", "/knock", b'{"s":"%s","blob":"AAAA\\u0000!!"}' % TAG.encode(), 400,
           b'{"error": "bad knock"}')
    expect(m, "POST", "/knock", b"[1,2]", 400, BAD)
    expect(m, "POST", "/knock", None, 400, BAD)
    expect(m, "POST", "/knock", b'{"s":"%s","blob":"AAAA","relay":1,"j":"XYZ"}' % TAG.encode(), 400,
           b'{"error": "bad nonce"}')
    expect(m, "GET", "/knock?s=0123456789abcdef0123456&since=0", None, 400, b'{"error": "bad tag"}')
    expect(m, "GET", "/knock?s=BF621FD0F94CAEF64DC3A0BD", None, 400, b'{"error": "bad tag"}')
    expect(m, "GET", "/knock", None, 400, b'{"error": "bad tag"}')

    # Odd values, each listed as the reference lists it; id is never listed.
    for body, row in ODD:
        expect(m, "POST", "/x/announce/", body, 200, OK30)
        st, data = call(m, "GET", "/list")
        check(st == 200 and data.startswith(b'{"servers": [' + row + b'"age": '),
              "after %r the newest row is\n  %r\n  want %r" % (body[:60], data[:400], row))
        check(b'"id"' not in data, "an id is listed: %r" % data[:300])
        expect(m, "POST", "/leave", body, 200, OK)
    list_like(m, "/list", LIST_TWO)
    expect(m, "POST", "/tpf2mp/leave/", b'{"id":"abc123"}', 200, OK)
    expect(m, "POST", "/leave", b'{"id":"relay1","code":"ignored"}', 200, OK)
    list_like(m, "/list", LIST_EMPTY)


def full(m):
    """500 rows; a new id is refused, a known one re-announced."""
    for i in range(500):
        expect(m, "POST", "/announce", b'{"id":"row%d","code":"C%d"}' % (i, i), 200, OK30)
    expect(m, "POST", "/announce", b'{"id":"row500","code":"C500"}', 503, b'{"error": "full"}')
    expect(m, "POST", "/announce", b'{"id":"row7","code":"again"}', 200, OK30)
    r = rows(m)
    check(len(r) == 500, "%d rows listed, want 500" % len(r))
    check(r[0]["code"] == "again", "the re-announced row is not first: %r" % r[0])
    check(sum(1 for x in r if x["code"] == "C7") == 0, "the old row 7 is still listed")
    expect(m, "POST", "/leave", b'{"id":"row3"}', 200, OK)
    expect(m, "POST", "/announce", b'{"id":"row500","code":"C500"}', 200, OK30)
    expect(m, "POST", "/announce", b'{"id":"row501","code":"C501"}', 503, b'{"error": "full"}')


def ttl(m):
    """--lobby-ttl 2000: the ttl the answers give, newest first, ages, expiry."""
    ok2 = b'{"ok": true, "ttl": 2}'
    for name in ("a", "b", "c"):
        expect(m, "POST", "/announce", b'{"id":"%s","code":"%s"}' % (name.encode(), name.encode()),
               200, ok2)
    st, data = call(m, "GET", "/list")
    check(st == 200 and data.endswith(b', "ttl": 2}'), "list with --lobby-ttl 2000: %r" % data)
    check([x["code"] for x in rows(m)] == ["c", "b", "a"], "not newest first: %r" % rows(m))
    t0 = time.monotonic()
    # Ages grow with the wall clock; a re-announce takes the row to the top at 0.
    wait_for(lambda: rows(m)[-1]["age"] >= 1, 3, "the ages to reach 1")
    expect(m, "POST", "/announce", b'{"id":"a","code":"a2"}', 200, ok2)
    r = rows(m)
    check([x["code"] for x in r] == ["a2", "c", "b"], "after re-announcing a: %r" % r)
    check(r[0]["age"] == 0 and r[1]["age"] >= 1, "ages after the re-announce: %r" % r)
    # b and c go 2 s after their announce; a, refreshed, stays a little longer.
    wait_for(lambda: [x["code"] for x in rows(m)] == ["a2"], 6, "b and c to expire")
    check(time.monotonic() - t0 >= 1.5, "rows expired before the 2 s TTL")
    wait_for(lambda: rows(m) == [], 6, "a to expire")
    expect(m, "POST", "/leave", b'{"id":"a"}', 200, OK)


def scenario(env):
    rip = private_loopback()  # fixed relay ports on an address of our own
    m = Master(env, args=["--relay-ip", rip, "--relay-ports", "29600-29600", "--relay-bind", rip])
    matrix(m)
    full(m)
    mt = Master(env, args=["--lobby-ttl", "2000"], state_dir=env.dir + "/state-ttl", name="master-ttl")
    ttl(mt)
    env.daemons_alive(m, mt)


run(scenario)
