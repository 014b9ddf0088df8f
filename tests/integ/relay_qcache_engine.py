#!/usr/bin/env python3
"""The query cache keeps to the engine's own limits. Part 1, a real
OpenArena server: the engine answers one address a burst of 10 queries and
then one a second, getchallenge included, and every session of the relay
comes from the relay's address. The relay models that bucket
(--engine-query-limit 10/1000, --engine-query-reserve 5): after players'
getchallenges fill it, a routine refresh is held back (counted deferred)
while the players keep getting their challenges, and the server's own log
shows it refused none of them. Part 2, a scripted server that answers
without the challenge (no real engine does; a mod could): after three such
answers the relay says query-cache-unusable and forwards the queries, so
the asker still gets the server's own answer."""

from harness import (OAServer, Relay, UdpPeer, check, oob, query, run, wait_for)


class NoChallenge(UdpPeer):
    """Answers getinfo/getstatus with a fixed answer carrying no challenge."""

    def on_datagram(self, data, src):
        if data.startswith(oob("getinfo")):
            ans = oob("infoResponse\n\\hostname\\stripped\\protocol\\71")
        elif data.startswith(oob("getstatus")):
            ans = oob("statusResponse\n\\sv_hostname\\stripped\n")
        else:
            return
        try:
            self.sock.sendto(ans, src)
        except OSError:
            pass


def scenario(env):
    oa = OAServer(env, extra=["+set", "developer", "1"])
    relay = Relay(env, oa.addr, args=["--query-cache-refresh", "200",
                                      "--query-cache-max-age", "20000"])
    a = env.udp("127.0.30.1")
    check(query(a, relay.addr, "getinfo warm", 2), "no first answer")

    def deferred():
        return relay.metrics()['rally_relay_query_cache_refreshes_total'
                               '{kind="getinfo",result="deferred"}']

    # Six players ask for a challenge at once: with the refresh that
    # filled the cache the engine's bucket holds 7 of 10, past the 5 the
    # relay leaves for players...
    players = [env.udp("127.0.31.%d" % (i + 1)) for i in range(6)]
    for p in players:
        p.sendto(oob("getchallenge 1 Quake3Arena"), relay.addr)
    
    for p in players:
        p.settimeout(2)
        data, _ = p.recvfrom(65535)
        check(data.startswith(oob("challengeResponse")), "a player's challenge: %r" % data[:40])
    wait_for(lambda: relay.metrics()["rally_relay_engine_query_level"] >= 7, 2,
             "the modelled bucket to hold the players' requests")
    # ...so the next refresh, due once the kept answer is 200 ms old,
    # waits: the askers are answered from the kept answer meanwhile.
    wait_for(lambda: relay.metrics()['rally_relay_query_cache_age_seconds{kind="getinfo"}'] >=
             0.2, 3, "the kept answer to be due for a refresh")
    d0 = deferred()
    b = env.udp("127.0.32.1")
    check(query(b, relay.addr, "getinfo meanwhile", 2), "no answer while the refresh waits")
    check(deferred() == d0 + 1, "deferred refreshes: %r -> %r" % (d0, deferred()))
    # The engine refused nothing the relay sent it.
    check(not oa.grep(r"rate limit from 127\.0\.0\.1 exceeded"),
          "the engine refused the relay: %r" % oa.grep(r"rate limit"))
    # Once the bucket has drained, the refresh goes.
    sent0 = relay.metrics()['rally_relay_query_cache_refreshes_total{kind="getinfo",result="sent"}']
    wait_for(lambda: (query(b, relay.addr, "getinfo later", 1) and relay.metrics()[
        'rally_relay_query_cache_refreshes_total{kind="getinfo",result="sent"}'] > sent0), 10,
        "the held-back refresh to go out")
    env.daemons_alive(relay, oa)
    relay.stop()

    # Part 2: a server whose answers carry no challenge.
    fake = NoChallenge(env)
    relay = Relay(env, fake.addr, args=["--query-cache-refresh", "100"], name="relay-fake")
    c = env.udp("127.0.33.1")
    # One asker waiting is enough: the refresh is tried again every 100 ms.
    check(query(c, relay.addr, "getinfo x", 1.0) is None, "answered without a challenge")
    relay.wait_line(r"query-cache-unusable reason=\"the server's answers carry no challenge\" "
                    r"action=forward")
    got = query(c, relay.addr, "getinfo forwarded", 2)
    check(got is not None and b"stripped" in got[0], "forwarded answer: %r" % (got,))
    m = relay.metrics()
    check(m["rally_relay_query_cache_usable"] == 0, "usable gauge")
    check(m["rally_relay_query_cache_forwarded_total"] >= 1, "forwarded counter")
    env.daemons_alive(relay)


run(scenario)
