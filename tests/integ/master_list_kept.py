#!/usr/bin/env python3
"""GET /list answered from the kept body (master/master_list.c), with
--verify-lists so every kept answer is also checked against a fresh build
inside the master (a difference ends it, and this test fails on the dead
daemon). Byte-equal across repeats within a second; a new body on an
announce, a leave and an expiry at once; "now" and "age" advancing each
second; gzip when Accept-Encoding asks for it, decompressing to the
identity body; Accept-Encoding variants including q=0 refusals, "*" and a
malformed value; Vary: Accept-Encoding on both forms."""

import gzip
import json
import time

from harness import Master, check, http_raw, run, wait_for

N = 60


def announce(m, i, name=None):
    body = json.dumps({"id": "lobby-%d" % i, "code": "CODE%04d" % i,
                       "name": name or "lobby %d" % i, "players": i % 8, "max": 8}).encode()
    st, data, _ = http_raw("POST", m.url("/announce"), body=body,
                           headers={"Content-Type": "application/json"})
    check(st == 200, "announce %d -> %s %r" % (i, st, data))


def get(m, ae=None):
    st, data, hdrs = http_raw("GET", m.url("/list"),
                              headers={"Accept-Encoding": ae} if ae is not None else {})
    check(st == 200, "GET /list (Accept-Encoding %r) -> %s" % (ae, st))
    check(hdrs.get("Vary") == "Accept-Encoding", "no Vary: %r" % hdrs)
    check(hdrs.get("Content-Type") == "application/json; charset=utf-8", "type: %r" % hdrs)
    check(hdrs.get("Cache-Control") == "no-store", "no Cache-Control: %r" % hdrs)
    return data, hdrs


def same_second(m, fn):
    """fn(m) between two identity GETs of one second: (identity, fn's result)."""
    for _ in range(20):
        a, _ = get(m)
        r = fn(m)
        b, _ = get(m)
        if a == b:
            return a, r
    raise AssertionError("no two GETs within one second")


def names(body):
    return [s["name"] for s in json.loads(body)["servers"]]


def scenario(env):
    m = Master(env, args=["--verify-lists", "--lobby-ttl", "3000"], debug=False)
    for i in range(N):
        announce(m, i)

    # Repeats within a second: the same bytes, newest first, as before.
    a, b = same_second(m, lambda m: get(m)[0])
    check(a == b, "two GETs in one second differ")
    check(names(a) == ["lobby %d" % i for i in reversed(range(N))], "order: %r" % names(a)[:3])
    doc = json.loads(a)
    check(abs(doc["now"] - time.time()) < 2, "now: %r" % doc["now"])

    # gzip: compressed once, decompresses to the identity body of that second.
    def gz(m):
        data, hdrs = get(m, "gzip, deflate, br")
        check(hdrs.get("Content-Encoding") == "gzip", "no gzip: %r" % hdrs)
        return gzip.decompress(data), len(data)
    ident, (unz, zlen) = same_second(m, gz)
    check(unz == ident, "gzip body is not the identity body")
    check(zlen < len(ident) // 3, "gzip %d of %d bytes" % (zlen, len(ident)))
    env.log("list rows=%d identity=%d gzip=%d" % (N, len(ident), zlen))

    # Accept-Encoding variants: which form comes back.
    variants = {
        "gzip": True, "x-gzip": True, "GZIP;q=0.5": True, "*": True,
        "identity;q=0, *;q=0.1": True, "gzip;q=1, identity;q=0.5": True,
        "": False, "identity": False, "deflate, br": False, "gzip;q=0": False,
        "gzip;q=0.000": False, "*;q=0": False, "gzip;q=0.5, identity": False,
        "gzip;q=2": False, "gzip deflate": False, "gzip;q=0, identity;q=0": False,
    }
    for ae, want_gz in variants.items():
        data, hdrs = get(m, ae)
        got_gz = hdrs.get("Content-Encoding") == "gzip"
        check(got_gz == want_gz, "Accept-Encoding %r: gzip=%s, want %s" % (ae, got_gz, want_gz))
        body = gzip.decompress(data) if got_gz else data
        check(json.loads(body)["ttl"] == 3, "Accept-Encoding %r: bad body" % ae)

    # A change shows at once, within the second: announce, re-announce, leave.
    before, _ = get(m)
    announce(m, 1000, "brand new")
    after, _ = get(m)
    check(names(after)[0] == "brand new" and len(names(after)) == N + 1,
          "announce not listed at once: %r" % names(after)[:2])
    gzb, hdrs = get(m, "gzip")
    check(hdrs.get("Content-Encoding") == "gzip" and b"brand new" in gzip.decompress(gzb),
          "gzip form kept from before the announce")
    announce(m, 5, "renamed five")
    check(names(get(m)[0])[0] == "renamed five", "re-announce not listed at once")
    st, _, _ = http_raw("POST", m.url("/leave"), body=b'{"id": "lobby-1000"}',
                        headers={"Content-Type": "application/json"})
    check(st == 200, "leave -> %s" % st)
    check("brand new" not in names(get(m)[0]), "left lobby still listed")

    # now and age advance each second (kept bodies are per second).
    first = json.loads(get(m)[0])
    wait_for(lambda: json.loads(get(m)[0])["now"] >= first["now"] + 2, 5, "two seconds to pass")
    later = json.loads(get(m)[0])
    ages0 = {s["code"]: s["age"] for s in first["servers"]}
    for s in later["servers"]:
        if s["code"] in ages0 and s["code"] != "CODE0005":
            check(s["age"] >= ages0[s["code"]] + 1, "age did not advance: %r" % s)

    # Expiry: keep lobby 7 alive, let the rest expire (--lobby-ttl 3000).
    def only_seven():
        announce(m, 7, "kept alive")
        return names(get(m)[0]) == ["kept alive"]
    wait_for(only_seven, 10, "the other lobbies to expire", interval=0.3)

    st, text, _ = http_raw("GET", m.url("/metrics"))
    text = text.decode()
    check('rally_master_list_hits_total{list="list"}' in text, "no list metrics")
    hits = [ln for ln in text.splitlines() if ln.startswith('rally_master_list_hits_total{list="list"}')]
    check(int(hits[0].split()[-1]) > 0, "no kept answers: %r" % hits)
    env.daemons_alive(m)


run(scenario)
