#!/usr/bin/env python3
"""Session limits: MAX_SESSIONS (2048 by default) - clients beyond it are
dropped and counted while open sessions keep working; idle sessions close
after SESSION_TIMEOUT (shortened here) and free their place. Sessions the
client never confirmed (one-shot or spoofed sources: no second packet after
the server's answer) expire sooner and, when the table is full, the oldest of
them makes room for a new client, so a flood of spoofed sources cannot lock
players out; confirmed sessions are never evicted."""

import resource

from harness import Echo, OAServer, Relay, check, query, run, wait_for, wait_rx_drained

GRACE_MS = 1000  # RELAY_UNCONFIRMED_GRACE_MS


def idle_for(relay, ip_prefix, ms):
    """True once every session of a client under ip_prefix has been idle
    for ms (the relay's own clock, /sessions)."""
    st, sessions, _ = relay.api("GET", "/sessions")
    mine = [s for s in sessions if s["client_ip"].startswith(ip_prefix)]
    return bool(mine) and all(s["idle_ms"] >= ms for s in mine)


def scenario(env):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
    oa = OAServer(env)

    # The default cap, 2048: 2100 client addresses.
    relay = Relay(env, oa.addr, debug=False)
    first = env.udp()
    # (getchallenge: getinfo is answered by the query cache, no session.)
    check(query(first, relay.addr, "getchallenge", timeout=2), "first client not served")
    socks = [env.udp() for _ in range(2099)]
    for i, s in enumerate(socks):
        s.sendto(b"\x00\x00\x00\x01in-game", relay.addr)
        if i % 200 == 199:
            wait_rx_drained(relay.addr, 10, "the relay to read 200 new clients")
    wait_for(lambda: relay.metrics()["rally_relay_sessions"] == 2048, 10, "2048 sessions")
    m = wait_for(lambda: (lambda m: m if m['rally_relay_drops_total{reason="session_cap"}'] == 52 else None)(
        relay.metrics()), 10, "52 session_cap drops")
    check(m["rally_relay_sessions_opened_total"] == 2048, "opened: %r" % m["rally_relay_sessions_opened_total"])
    check(query(first, relay.addr, "getchallenge", timeout=2), "an open session stopped working at the cap")
    extra = env.udp()
    check(query(extra, relay.addr, "getchallenge", timeout=0.5) is None, "a client past the cap was served")
    for s in socks:
        s.close()
    env.socks = [x for x in env.socks if x not in socks]
    env.daemons_alive(relay)
    relay.stop()

    # Idle timeout (1 s here) frees places; with --max-sessions 2 a third
    # client waits for one to expire.
    relay = Relay(env, oa.addr, args=["--session-timeout", "1", "--max-sessions", "2"], name="relay-small")
    a, b, c = env.udp(), env.udp(), env.udp()
    check(query(a, relay.addr, "getchallenge", timeout=2), "a")
    check(query(b, relay.addr, "getchallenge", timeout=2), "b")
    check(query(c, relay.addr, "getchallenge", timeout=0.3) is None, "c served past --max-sessions 2")
    check(relay.drops("session_cap") == 1, "session_cap drop not counted")
    relay.wait_line(r"session-close peer=127\.0\.0\.1:%d active=\d reason=idle " % a.getsockname()[1], timeout=5)
    st, sessions, _ = relay.api("GET", "/sessions")
    check(sessions == [] or all(s["idle_ms"] < 1500 for s in sessions), "idle sessions listed: %r" % sessions)
    check(query(c, relay.addr, "getchallenge", timeout=2), "c not served after the others expired")
    env.daemons_alive(relay)
    relay.stop()

    # A "spoofed" flood of one-shot sources fills the table... (an echo
    # server stands behind the relay here: see harness.Echo)
    echo = Echo(env)
    relay = Relay(env, echo.addr, args=["--max-sessions", "8", "--unconfirmed-timeout", "3"],
                  name="relay-evict")
    one_shot = [env.udp("127.0.1.%d" % (i + 1)) for i in range(8)]
    for s in one_shot:
        s.sendto(b"\x00\x00\x00\x07in-game", relay.addr)
    wait_for(lambda: relay.metrics()["rally_relay_sessions"] == 8, 5, "8 one-shot sessions")
    player = env.udp("127.0.2.1")
    check(query(player, relay.addr, "getchallenge", timeout=0.3) is None,
          "a new client got in while every unconfirmed session was under 1 s old")
    # ...but once they have had a second to confirm, a new client evicts the oldest.
    wait_for(lambda: idle_for(relay, "127.0.1.", GRACE_MS), 5,
             "the one-shot sessions to be idle for a second")
    check(query(player, relay.addr, "getchallenge", timeout=2), "new client locked out by one-shot sessions")
    relay.wait_line(r"session-close peer=127\.0\.1\.1:\d+ active=\d reason=evicted")
    check(relay.metrics()["rally_relay_sessions_evicted_total"] == 1, "eviction not counted")
    # The player confirms (speaks again after the answer); fill the rest with
    # confirmed players too: now nothing may be evicted.
    check(query(player, relay.addr, "getchallenge", timeout=2), "player's second packet")
    players = [player]
    for i in range(7):
        p2 = env.udp("127.0.3.%d" % (i + 1))
        if i == 0:
            wait_for(lambda: idle_for(relay, "127.0.1.", GRACE_MS), 5,
                     "the other one-shot sessions to be idle for a second")
        check(query(p2, relay.addr, "getchallenge", timeout=2), "player %d not admitted" % i)
        check(query(p2, relay.addr, "getchallenge", timeout=2), "player %d second packet" % i)
        players.append(p2)
    wait_for(lambda: relay.metrics()["rally_relay_sessions_evicted_total"] == 8, 5, "all one-shots evicted")
    # Confirmed sessions idle past the grace period still stay.
    wait_for(lambda: idle_for(relay, "127.0.", GRACE_MS), 5,
             "the confirmed sessions to be idle for a second")
    late = env.udp("127.0.4.1")
    check(query(late, relay.addr, "getchallenge", timeout=0.5) is None, "a confirmed session was evicted")
    for p2 in players:
        check(query(p2, relay.addr, "getchallenge", timeout=2), "a confirmed player lost its session")
    # Unconfirmed sessions expire after --unconfirmed-timeout (3 s here).
    relay.stop()
    relay = Relay(env, echo.addr, args=["--unconfirmed-timeout", "1"], name="relay-unconf")
    x = env.udp()
    x.sendto(b"\x00\x00\x00\x09in-game", relay.addr)
    relay.wait_line(r"session-close peer=127\.0\.0\.1:%d active=0 reason=idle-unconfirmed" % x.getsockname()[1],
                    timeout=5)
    env.daemons_alive(relay)


run(scenario)
