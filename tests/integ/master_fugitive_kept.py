#!/usr/bin/env python3
"""GET /servers answered from the kept body (master_list.c) at the
repository's capacity, 4,096 servers, with --verify-lists so every kept
answer is also compared with a fresh build inside the master. Byte-equal
across repeats; an update, a deletion and an expiry show at once; gzip
decompresses to the identity body; Vary: Accept-Encoding on both."""

import gzip
import json
from http.client import HTTPConnection

from harness import Master, check, run, wait_for

BODY = {"name": "kept server", "game_version": 3, "current_players": 2, "max_players": 8,
        "is_joinable": True}


def scenario(env):
    m = Master(env, args=["--verify-lists", "--stale", "10"], debug=False)
    c = HTTPConnection(*m.http_addr, timeout=10)

    def req(method, path, body=None, ip=None, headers=None):
        h = dict(headers or {})
        if body is not None:
            h["Content-Type"] = "application/json"
        if ip is not None:
            h["X-Forwarded-For"] = ip  # 127.0.0.1 is a trusted proxy
        c.request(method, path, body=json.dumps(body).encode() if body is not None else None,
                  headers=h)
        r = c.getresponse()
        return r.status, r.read(), dict(r.getheaders())

    # 64 servers per IP (FUG_PER_IP_MAX), 64 IPs.
    ids = []
    for i in range(4096):
        ip = "127.0.8.%d" % (1 + i // 64)
        sid = "%s:%d" % (ip, 20000 + i % 64)
        st, data, _ = req("PUT", "/servers/" + sid, dict(BODY, name="server %04d" % i), ip)
        check(st == 201, "PUT %s -> %s %r" % (sid, st, data))
        ids.append((sid, ip))

    def listing(ae=None):
        st, data, hdrs = req("GET", "/servers", headers={"Accept-Encoding": ae} if ae else None)
        check(st == 200, "GET /servers -> %s" % st)
        check(hdrs.get("Vary") == "Accept-Encoding", "no Vary: %r" % hdrs)
        if ae is not None and hdrs.get("Content-Encoding") == "gzip":
            return gzip.decompress(data), len(data)
        check("Content-Encoding" not in hdrs, "identity with %r" % hdrs)
        return data, len(data)

    a, _ = listing()
    b, _ = listing()
    check(a == b, "two listings differ")
    rows = json.loads(a)
    check(len(rows) == 4096, "%d rows" % len(rows))
    check(rows[0]["name"] == "server 4095", "newest first: %r" % rows[0])
    z, zlen = listing("gzip")
    check(z == a, "gzip body is not the identity body")
    check(zlen < len(a) // 3, "gzip %d of %d bytes" % (zlen, len(a)))
    env.log("servers rows=4096 identity=%d gzip=%d" % (len(a), zlen))
    z2, _ = listing("gzip;q=0, identity")
    check(z2 == a, "gzip;q=0 got another body")

    # An update is listed at once (and moves the row to the front).
    sid, ip = ids[100]
    st, _, _ = req("PUT", "/servers/" + sid, dict(BODY, name="renamed", current_players=7), ip)
    check(st == 202, "update -> %s" % st)
    rows = json.loads(listing()[0])
    check(rows[0]["name"] == "renamed" and rows[0]["current_players"] == 7, "update: %r" % rows[0])
    check(json.loads(listing("gzip")[0])[0]["name"] == "renamed", "gzip form kept from before")

    # A deletion too.
    sid, ip = ids[200]
    st, _, _ = req("DELETE", "/servers/" + sid, ip=ip)
    check(st == 200, "delete -> %s" % st)
    names = [r["name"] for r in json.loads(listing()[0])]
    check(len(names) == 4095 and "server 0200" not in names, "deletion not listed")

    # Expiry (--stale 10): only the servers that heartbeat stay.
    keep = ids[:3]
    def only_kept():
        for sid, ip in keep:
            req("PUT", "/servers/" + sid, BODY, ip)
        return len(json.loads(listing()[0])) == 3
    wait_for(only_kept, 25, "the others to go stale", interval=0.5)
    c.close()
    env.daemons_alive(m)


run(scenario)
