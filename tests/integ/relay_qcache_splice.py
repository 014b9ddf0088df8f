#!/usr/bin/env python3
"""The query cache answers getinfo and getstatus byte for byte as the real
OpenArena server does, for the same challenge: a short one, none, one the
engine will not set (';', '\\'), '%' and a byte above 127 (read as '.'), a
quoted one with a space, extra arguments, a newline, a comment, 128
characters, and 129 (no answer from either). A player is connected through
the relay, so statusResponse carries a player line; it is in the connecting
state, where the engine reports ping 999 and score 0 (ping 0 in the very
first frame after the connect: the test waits for the relay to show 999),
so nothing in the answer changes between the relay's moment and the
server's. (With playing
players the player lines' pings and scores may differ by what changed in
at most --query-cache-refresh; nothing else does.) A hostname changed on the
server shows in the relay's answers after a refresh; the server gone, the
relay stays silent once its answers are older than --query-cache-max-age,
and says so in its log. qstat sees the server through the cache."""

import subprocess

from harness import OAServer, Relay, check, oob, query, run, wait_for
from q3client import Q3Player

CASES = [("short", b" abc"), ("none", b""), ("space-only", b" "), ("semicolon", b" a;b"),
         ("backslash", b" a\\b"), ("percent-high", b" %x\x80y"), ("quoted", b' "two words"'),
         ("extra-args", b" abc def"), ("newline", b" abc\nignored"), ("comment", b" abc//x"),
         ("dpmaster", b" -1234567890"), ("len128", b" " + b"x" * 128),
         ("len129", b" " + b"x" * 129), ("upper", None)]

serial = [0]


def fresh(env, base):
    """A socket on a /24 of its own: the relay budgets each network, the
    engine each address. base: 10, 40, 70 (room for 7,000 each)."""
    serial[0] += 1
    return env.udp("127.%d.%d.1" % (base + serial[0] // 256, serial[0] % 256))


def ask(sock, addr, raw, timeout):
    got = query(sock, addr, raw, timeout=timeout, raw=True)
    return got


def scenario(env):
    oa = OAServer(env, hostname="rally-splice")
    relay = Relay(env, oa.addr, args=["--query-cache-refresh", "500",
                                      "--query-cache-max-age", "3000"])
    player = Q3Player(env, relay.addr, ip="127.0.0.30", name="splicer")
    # Right after connect the engine reports ping 0, from its next frame
    # on 999 until the client is in the game: compare once the relay's
    # kept answer has the settled line.
    wait_for(lambda: b'0 999 "splicer"' in ((ask(fresh(env, 10), relay.addr,
                                                 oob("getstatus w"), 0.5) or (b"",))[0]),
             10, "the player's settled line in the relay's statusResponse")

    compared = 0
    for kind in ("getinfo", "getstatus"):
        for name, tail in CASES:
            req = oob(kind.upper() + " abc") if tail is None else oob(kind) + tail
            timeout = 1.0 if name == "len129" else 3.0
            via = ask(fresh(env, 10), relay.addr, req, timeout)
            if name == "len129":
                direct = ask(fresh(env, 40), oa.addr, req, timeout)
                check(via is None and direct is None,
                      "%s %s: relay %r, server %r" % (kind, name, via, direct))
                continue
            # The engine answers 10 queries per 100 ms in all (after a
            # burst): asked again, from a new address, until it does.
            direct = wait_for(lambda: ask(fresh(env, 40), oa.addr, req, 0.3), 10,
                              "the server to answer %s %s" % (kind, name))
            check(via is not None, "%s %s: the relay did not answer" % (kind, name))
            check(via[1] == relay.addr, "%s %s: answered from %s" % (kind, name, via[1]))
            check(via[0] == direct[0], "%s %s differs:\n relay  %r\n server %r" % (
                kind, name, via[0], direct[0]))
            compared += 1
    env.log("%d answers compared byte for byte with the server's" % compared)
    check(compared == 26, "compared %d" % compared)

    # The server answered the relay's refreshes only: no session, no
    # forwarded query.
    m = relay.metrics()
    check(m["rally_relay_sessions"] == 1, "sessions: %r" % m["rally_relay_sessions"])
    answered = m['rally_relay_query_cache_answers_total{kind="getinfo"}'] + \
        m['rally_relay_query_cache_answers_total{kind="getstatus"}']
    check(answered >= 27, "answers from the cache: %r" % answered)
    check(m['rally_relay_query_cache_refusals_total{reason="long_challenge"}'] == 2,
          "refusals: %r" % {k: v for k, v in m.items() if "refusals" in k})

    # qstat, a real query client, through the cache.
    out = subprocess.run(["quakestat", "-q3s", "%s:%d" % relay.addr, "-R", "-P",
                          "-timeout", "3"], capture_output=True, text=True, timeout=20).stdout
    check("rally-splice" in out and "oa_dm1" in out and "splicer" in out,
          "quakestat -q3s through the relay:\n" + out)

    # A change on the server shows after a refresh.
    rc = fresh(env, 70)
    got = ask(rc, oa.addr, oob("rcon %s sv_hostname renamed-server" % oa.rcon), 3)
    check(got is not None, "rcon: no answer")
    wait_for(lambda: b"\\hostname\\renamed-server" in (
        ask(fresh(env, 10), relay.addr, oob("getinfo r"), 0.5) or (b"",))[0], 5,
        "the new hostname in the relay's infoResponse")

    # The server gone: once its answers are older than the max age the
    # relay answers nothing rather than a stale picture.
    player.close()
    oa.stop()
    mark = len(relay.output())
    wait_for(lambda: ask(fresh(env, 10), relay.addr, oob("getinfo gone"), 2.0) is None, 10,
             "the relay to stop answering for a server that is gone")
    relay.wait_line(r"query-cache-stale kind=getinfo age_ms=\d+ refreshes_lost=\d+ "
                    r"action=silent", timeout=5, start=mark)
    m = relay.metrics()
    check(m['rally_relay_query_cache_refusals_total{reason="stale"}'] >= 1, "stale refusals")
    check(m['rally_relay_query_cache_refreshes_total{kind="getinfo",result="lost"}'] >= 1,
          "lost refreshes")
    env.daemons_alive(relay)


run(scenario)
