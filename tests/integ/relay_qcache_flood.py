#!/usr/bin/env python3
"""A getstatus flood from 100,000 spoofed sources (127.16.0.0 -
127.17.134.159, tools/bench/bench-flood: each datagram's source chosen with
IP_PKTINFO) against a real OpenArena server behind the relay, with the
relay's defaults. Meanwhile qstat (quakestat -q3s) keeps getting the
server's status through the relay, a player connected through the relay
(tests/integ/q3client.py) keeps receiving the server's snapshots and gets
its getchallenge answered by the server, and the server itself sees no more
getstatus/getinfo than the cache's refreshes: counted in the server's own
log (developer 1 prints "SV packet <address> : <command>" for every
out-of-band packet it reads), at most one per --query-cache-refresh (2 s)
per kind during the flood. The flood's answers stay within the budgets:
its 391 source networks (/24) each get at most their 2 KiB burst and 512
bytes a second, and all of them together no more bytes than they sent
plus the 16 KiB/s allowance (--reply-base)."""

import os
import subprocess
import time

from harness import BUILD, OAServer, Relay, check, run, wait_for
from q3client import Q3Player

FLOOD = os.path.join(BUILD, "tools", "bench", "bench-flood")
SOURCES = 100000
FLOOD_MS = 8000
RATE = 15000


def qstat(addr, srcip):
    r = subprocess.run(["quakestat", "-srcip", srcip, "-q3s", "%s:%d" % addr, "-R", "-P",
                        "-timeout", "3"], capture_output=True, text=True, timeout=20)
    return r.stdout


def server_queries(oa, start, end=None):
    """getinfo/getstatus the server read from the relay's address (the
    relay's refreshes; the test's own queries use other addresses)."""
    lines = oa.output()[start:end]
    return sum(1 for ln in lines if ln.startswith("SV packet 127.0.0.1 : get") and
               ("getinfo" in ln or "getstatus" in ln))


def scenario(env):
    check(os.path.exists(FLOOD), "%s is missing: build tools/bench" % FLOOD)
    oa = OAServer(env, hostname="rally-flooded", extra=["+set", "developer", "1"])
    relay = Relay(env, oa.addr, debug=False)
    player = Q3Player(env, relay.addr, ip="127.0.0.30", name="survivor")
    wait_for(lambda: relay.metrics().get("rally_relay_known_players") == 1, 5,
             "the player to be known")
    out = qstat(relay.addr, "127.0.20.1")
    check("rally-flooded" in out and "survivor" in out, "qstat before the flood:\n" + out)

    mark = len(oa.output())
    t0 = time.monotonic()
    flood = subprocess.Popen([FLOOD, "--target", "%s:%d" % relay.addr, "--sources", str(SOURCES),
                              "--base", "127.16.0.0", "--mix", "query", "--rate", str(RATE),
                              "--duration-ms", str(FLOOD_MS)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    env.cleanups.append(lambda: flood.poll() is None and flood.kill())

    # During the flood: qstat three times, the player's round trips.
    seen, rtts, snaps = [], [], []
    for i in range(3):
        wait_for(lambda: time.monotonic() - t0 >= 1.5 + 2.0 * i, 10, "flood second %d" % i)
        t1 = time.monotonic()
        # Three people checking the server, each from a network of its
        # own (one network asking again and again competes with the flood).
        seen.append(qstat(relay.addr, "127.0.%d.1" % (21 + i)))
        rtts.append(player.ask(b"getchallenge 1234 Quake3Arena", b"challengeResponse", 2.0))
        snaps.append(player.packets_since(t1))
    check(flood.poll() is None, "the flood ended before the checks: make it longer")
    res = flood.communicate(timeout=FLOOD_MS / 1000 + 20)[0]
    t_end = time.monotonic()
    flooded = t_end - t0
    env.log("bench-flood: " + res.strip())
    kv = dict(tok.split("=", 1) for tok in res.split() if "=" in tok)
    check(int(kv["sources_used"]) == SOURCES, "sources used: %s" % kv["sources_used"])
    sent = int(kv["sent"])

    for i, out in enumerate(seen):
        check("rally-flooded" in out and "survivor" in out,
              "qstat during the flood (%d):\n%s" % (i, out))
    check(all(r is not None for r in rtts), "the player's getchallenge unanswered: %r" % rtts)
    rate = player.packets_since(t0 + 0.5) / (t_end - t0 - 0.5)
    env.log("player: getchallenge round trips %s ms, %.1f snapshots/s during the flood" % (
        ", ".join("%.1f" % (r * 1000) for r in rtts), rate))
    check(rate >= 10, "the player's snapshots dropped to %.1f/s" % rate)

    # What the server read from the relay's address during the flood.
    n = server_queries(oa, mark)
    allowed = 2 * (int(flooded / 2.0) + 1)
    env.log("flood: %d datagrams from %d sources in %.1f s; the server read %d queries "
            "from the relay (at most %d allowed)" % (sent, SOURCES, flooded, n, allowed))
    check(n <= allowed, "the server read %d queries from the relay" % n)

    m = relay.metrics()
    answers = m['rally_relay_query_cache_answers_total{kind="getstatus"}']
    out_bytes = m["rally_relay_query_cache_answer_bytes_total"]
    refused = m['rally_relay_query_cache_refusals_total{reason="source_budget"}']
    env.log("cache: %d answers, %d bytes, %d refused for the source budget, %d for the "
            "global one; bytes out per byte in %.3f" % (
                answers, out_bytes, refused,
                m['rally_relay_query_cache_refusals_total{reason="global_budget"}'],
                out_bytes / max(1, sent * 14)))
    check(refused > 0, "no source-budget refusals under the flood")
        # 391 networks: a 2 KiB burst and 512 bytes a second each, qstat's on
    # top; together no more than they sent, plus the allowance.
    nets = (SOURCES + 255) // 256
    check(out_bytes <= nets * (2048 + 512 * (flooded + 1)) + 16 * 1024,
          "%d bytes answered to %d networks in %.1f s" % (out_bytes, nets, flooded))
    check(out_bytes <= sent * 14 + 16384 * (flooded + 2),
          "%d bytes answered for %d received" % (out_bytes, sent * 14))
    check(m["rally_relay_sessions"] == 1, "sessions: %r" % m["rally_relay_sessions"])
    env.daemons_alive(relay, oa)


run(scenario)
