#!/usr/bin/env python3
"""Hostile and corrupt values written straight into a real redis-server
under a master's prefix (issue 12 section 2): keys already there when the
master starts (read by its first SCAN) and keys written and announced on
the channel while it runs. Not JSON, over 16 KiB, nested past the depth
cap, a bad envelope, entries the snapshot load refuses (a 500-character
lobby name, a Q3 protocol out of range), a value under another entry's
key, a seen time an hour ahead, a list where a string belongs, knock notes
with bad blobs and times, relay values with a port and a bad id, key
names of no known kind, malformed channel messages: each is refused and
counted by reason, logged at most once a minute per reason, and none is
listed or served. A well-formed value from another master is merged (a
lobby named <script> is data like any other), and the master answers
throughout. The first sync reads 1,900 keys (many SCAN rounds) and merges
the 400 good lobbies among them; 400 deletions announced at once take them
off again."""

import hashlib
import json
import time

from harness import Master, RedisServer, check, http_raw, redis_pipeline, run, wait_for

NOW_MS = lambda: int(time.time() * 1000)


def lobby_hex(lid):
    return hashlib.blake2b(lid.encode(), digest_size=32).hexdigest()


def lobby_entry(lid, name="hostile"):
    return {"id": lid, "name": name, "code": "CODE", "players": 1, "max": 8, "type": "host",
            "version": "", "locked": False, "from": "127.0.0.1:1"}


def env_value(entry, seen=None, node="evil"):
    return json.dumps({"v": 1, "node": node, "seen_ms": seen or NOW_MS(), "entry": entry})


def scenario(env):
    rs = RedisServer(env)
    # Already there at start: read by the first SCAN.
    rs.cmd("SET", "rally:reg:bogus:00", "x")
    rs.cmd("SET", "rally:reg:lobbies:nothex", "x")
    rs.cmd("SET", "rally:reg:lobbies:" + lobby_hex("pre-1"), "{not json", "PX", "60000")
    rs.cmd("SET", "rally:reg:lobbies:" + lobby_hex("pre-2"), env_value(lobby_entry("pre-2")),
           "PX", "60000")
    # Enough keys for the first sync's SCAN to take many rounds: 1,500
    # of no known kind and 400 good lobbies of another master.
    redis_pipeline(rs, [["SET", "rally:reg:bogus:%04x" % i, "x"] for i in range(1500)] +
                   [["SET", "rally:reg:lobbies:" + lobby_hex("many-%d" % i),
                     env_value(lobby_entry("many-%d" % i, name="many %03d" % i)), "PX", "60000"]
                    for i in range(400)])
    m = Master(env, args=["--redis", rs.url(), "--redis-node", "victim"])
    m.wait_line(r"redis-synced .*remote=401 ", 10)
    check(m.metrics()['rally_master_redis_refused_total{reason="key_name"}'] >= 1502,
          "key names of no kind were not refused")
    check(m.metrics()['rally_master_redis_merged_total{kind="lobbies"}'] == 401, "merged")
    redis_pipeline(rs, [["DEL", "rally:reg:lobbies:" + lobby_hex("many-%d" % i)]
                        for i in range(400)] +
                   [["PUBLISH", "rally:events", "evil d lobbies %s %d" % (
                       lobby_hex("many-%d" % i), NOW_MS())] for i in range(400)])
    wait_for(lambda: m.metrics()['rally_master_redis_refused_total{reason="json"}'] >= 1, 2,
             "the pre-existing non-JSON value to be refused")

    def names():
        st, data, _ = http_raw("GET", m.url("/list"))
        check(st == 200, "GET /list -> %s" % st)
        return sorted(s["name"] for s in json.loads(data)["servers"])
    # The good one already there is merged; the 400 are gone by their "d".
    wait_for(lambda: names() == ["hostile"], 3, "the 400 lobbies deleted elsewhere to go")

    def put(key, value, reason, note=None):
        """Writes value under key, announces it, waits for its refusal."""
        metric = 'rally_master_redis_refused_total{reason="%s"}' % reason
        before = m.metrics()[metric]
        if isinstance(value, list):
            rs.cmd("DEL", key)
            rs.cmd("RPUSH", key, *value)
        else:
            rs.cmd("SET", key, value, "PX", "60000")
        rs.cmd("PUBLISH", "rally:events", note)
        wait_for(lambda: m.metrics()[metric] > before, 2,
                 "%s (%s) to be refused as %s" % (key, str(value)[:60], reason))

    lk = "rally:reg:lobbies:"
    h = lobby_hex("bad-1")
    note = "evil s lobbies " + h
    put(lk + h, "[1, 2", "json", note)
    put(lk + h, '{"a": "' + "x" * 17000 + '"}', "size", note)
    put(lk + h, "[" * 40 + "]" * 40, "json", note)
    put(lk + h, json.dumps({"v": 2, "node": "evil", "seen_ms": 1, "entry": {}}), "envelope", note)
    put(lk + h, json.dumps({"v": 1, "node": "evil one", "seen_ms": 1, "entry": {}}), "envelope",
        note)
    put(lk + h, json.dumps({"v": 1, "node": "evil", "seen_ms": NOW_MS(), "entry": []}),
        "envelope", note)
    put(lk + h, env_value(lobby_entry("bad-1", name="N" * 500)), "entry", note)
    put(lk + h, env_value(dict(lobby_entry("bad-1"), type="admin")), "entry", note)
    put(lk + h, env_value(dict(lobby_entry("bad-1"), players=-1)), "entry", note)
    put(lk + h, env_value(lobby_entry("someone-else")), "key", note)
    put(lk + h, env_value(lobby_entry("bad-1"), seen=NOW_MS() + 3600 * 1000), "future", note)
    put(lk + h, ["a", "list"], "type", note)
    q3 = "00000000000000000000ffff7f000001" + "6d60"
    bad_q3 = {"addr": "127.0.0.1:28000", "game": "Quake3Arena", "protocol": -5, "gametype": "0",
              "clients": 0, "maxclients": 8, "anon": True, "hostname": "h", "map": "m"}
    put("rally:reg:q3:" + q3, env_value(bad_q3), "entry", "evil s q3 " + q3)
    fk = "7f0000016d61"
    put("rally:reg:fugitive:" + fk, env_value({"ip": "127.0.0.1", "port": 28001, "name": "",
                                               "game_version": 1, "current_players": 0,
                                               "max_players": 0, "is_joinable": True}),
        "entry", "evil s fugitive " + fk)
    tag = "aaaaaaaaaaaaaaaaaaaaaaaa"
    for bad in ({"v": 1, "node": "evil", "t": time.time(), "blob": "<script>"},
                {"v": 1, "node": "evil", "t": "now", "blob": "AAAA"},
                {"v": 1, "node": "evil", "t": time.time(), "blob": "A" * 1025},
                {"v": 1, "node": "evil", "t": time.time(), "blob": "AAAA",
                 "relay": {"ip": "127.0.0.1", "port": 0, "id": "00" * 16}}):
        put("rally:knock:" + tag, [json.dumps(bad)], "note", "evil k " + tag)
    put("rally:knock:" + tag, [json.dumps({"v": 1, "node": "evil", "t": time.time() + 3600,
                                           "blob": "AAAA"})], "future", "evil k " + tag)
    rk = "ab" * 32
    for bad in ({"v": 1, "node": "evil", "ip": "127.0.0.1:5", "port": 5, "id": "00" * 16},
                {"v": 1, "node": "evil", "ip": "::1", "port": 5, "id": "00" * 16},
                {"v": 1, "node": "evil", "ip": "127.0.0.1", "port": 70000, "id": "00" * 16},
                {"v": 1, "node": "evil", "ip": "127.0.0.1", "port": 5, "id": "XY" * 16}):
        put("rally:relay:" + rk, json.dumps(bad), "relay", "evil r " + rk)
    for msg in ("garbage", "evil s lobbies " + "0" * 63, "evil s nokind 00", "evil q x",
                "evil d lobbies " + h + " soon", "evil k " + tag + " ", "x" * 300, ""):
        before = m.metrics()['rally_master_redis_refused_total{reason="message"}']
        rs.cmd("PUBLISH", "rally:events", msg)
        wait_for(lambda: m.metrics()['rally_master_redis_refused_total{reason="message"}'] > before,
                 2, "message %r to be refused" % msg[:40])

    # Nothing of it is served; the master is fine and still merges good data.
    check(names() == ["hostile"], "listed after the hostile values: %r" % names())
    st, data, _ = http_raw("GET", m.url("/knock?s=" + tag))
    check(st == 200 and json.loads(data)["knocks"] == [], "knocks served: %r" % data)
    st, data, _ = http_raw("GET", m.url("/servers"))
    check(st == 200 and data == b"[]", "Fugitive servers served: %r" % data)
    good = lobby_hex("good-1")
    rs.cmd("SET", lk + good, env_value(lobby_entry("good-1", name="<script>x</script>")),
           "PX", "60000")
    rs.cmd("PUBLISH", "rally:events", "evil s lobbies " + good)
    wait_for(lambda: names() == ["<script>x</script>", "hostile"], 2, "the good value merged")
    # One log line per reason (within the minute), however many refusals.
    for reason in ("json", "entry", "note", "relay", "message"):
        n = len(m.grep(r"redis-refused reason=%s " % reason))
        check(n == 1, "reason %s logged %d times" % (reason, n))
    check(m.metrics()['rally_master_redis_refused_total{reason="entry"}'] >= 5, "entry count")
    env.daemons_alive(rs, m)


run(scenario)
