#!/usr/bin/env python3
"""Heartbeats end to end. A master on loopback receives the relay's heartbeat
from the relay's public port, challenges that address with getinfo, and the
real server's infoResponse carrying the challenge comes back from the relay's
public port (so the master lists the relay). The server itself, in internet
mode (dedicated 2) heartbeating the same master, does so from its own port:
that is why the relay must heartbeat. Server stopped -> flatline after the
failed probes; server back -> heartbeat again; relay stopped -> flatline.
Masters are resolved by name on every heartbeat (localhost here)."""

import os
import signal
import time

from harness import OAServer, Relay, UdpPeer, check, query, run, wait_for


class Master(UdpPeer):
    """Records every datagram (the test plays the master's part by hand)."""


def scenario(env):
    m1 = Master(env)
    m2 = Master(env)
    oa = OAServer(env, dedicated=2, masters=["127.0.0.1:%d" % m1.addr[1]])
    relay = Relay(env, oa.addr, args=[
        "--master", "127.0.0.1:%d" % m1.addr[1], "--master", "localhost:%d" % m2.addr[1],
        "--heartbeat-interval", "2", "--probe-timeout", "300", "--reply-budget", "1"])

    hb = b"\xff\xff\xff\xffheartbeat EnemyTerritory-1\n"
    fl = b"\xff\xff\xff\xffheartbeat ETFlatline-1\n"
    wait_for(lambda: m1.packets(src=relay.addr, prefix=hb), 5, "the relay's heartbeat at master 1")
    wait_for(lambda: m2.packets(src=relay.addr, prefix=hb), 5, "the relay's heartbeat at master 2")
    relay.wait_line(r"heartbeat-sent tag=EnemyTerritory-1 master=127\.0\.0\.1:%d addr=127\.0\.0\.1:%d" % (m1.addr[1], m1.addr[1]))
    relay.wait_line(r"heartbeat-sent tag=EnemyTerritory-1 master=localhost:%d addr=127\.0\.0\.1:%d" % (m2.addr[1], m2.addr[1]))

    # A flood has used up the reply budget (1 byte a second here)...
    burners = [env.udp("127.0.6.%d" % i) for i in (1, 2, 3)]
    for b in burners:
        b.sendto(b"\xff\xff\xff\xffgetstatus", relay.addr)
    wait_for(lambda: relay.metrics().get(
        'rally_relay_query_cache_refusals_total{reason="global_budget"}', 0) >= 2, 5,
        "the budget to run out")
    # ...yet the master's challenge, from a master's address, still passes.
    src = m1.packets(src=relay.addr, prefix=hb)[0][2]
    challenge = "rly%d" % os.getpid()
    m1.sock.sendto(b"\xff\xff\xff\xffgetinfo " + challenge.encode(), src)
    resp = wait_for(lambda: m1.packets(prefix=b"\xff\xff\xff\xffinfoResponse"), 5,
                    "the infoResponse at the master")
    _, data, rsrc = resp[0]
    check(rsrc == relay.addr, "infoResponse came from %s, not the relay %s" % (rsrc, relay.addr))
    check(("\\challenge\\" + challenge).encode() in data, "challenge not echoed: %r" % data[:200])
    check(("\\hostname\\" + oa.hostname).encode() in data or oa.hostname.encode() in data,
          "the infoResponse is not the real server's: %r" % data[:200])

    # The server's own heartbeat arrives from the server's port, not the relay's.
    own = wait_for(lambda: m1.packets(src=oa.addr, prefix=b"\xff\xff\xff\xffheartbeat"), 10,
                   "the server's own heartbeat")
    check(own[0][1].startswith(b"\xff\xff\xff\xffheartbeat QuakeArena-1"), "own heartbeat: %r" % own[0][1])
    check(oa.addr != relay.addr, "addresses")

    # Server dead (stopped, not answering): flatline after 3 failed probes.
    oa.signal(signal.SIGSTOP)
    env.cleanups.append(lambda: oa.signal(signal.SIGCONT))
    t_stop = time.monotonic()
    wait_for(lambda: m1.packets(since=t_stop, src=relay.addr, prefix=fl), 10, "the flatline")
    relay.wait_line(r"server-down server=127\.0\.0\.1:%d attempts=3" % oa.addr[1])
    # Back: heartbeats resume.
    oa.signal(signal.SIGCONT)
    t_cont = time.monotonic()
    wait_for(lambda: m1.packets(since=t_cont, src=relay.addr, prefix=hb), 10, "heartbeats to resume")
    relay.wait_line(r"server-up server=127\.0\.0\.1:%d" % oa.addr[1])

    met = relay.metrics()
    key = 'rally_relay_heartbeats_total{master="127.0.0.1:%d",outcome="%s"}'
    check(met[key % (m1.addr[1], "heartbeat")] >= 2, "heartbeat metric: %r" % met)
    check(met[key % (m1.addr[1], "flatline")] >= 1, "flatline metric: %r" % met)
    check(met["rally_relay_server_up"] == 1, "server_up")

    # Relay stopped cleanly: flatline to both masters on the way out.
    env.daemons_alive(relay, oa)
    t_term = time.monotonic()
    check(relay.stop() == 0, "relay exit status")
    check(m1.packets(since=t_term, src=relay.addr, prefix=fl), "no flatline at master 1 on shutdown")
    wait_for(lambda: m2.packets(since=t_term, src=relay.addr, prefix=fl), 2,
             "the shutdown flatline at master 2")
    check(relay.grep(r"stopped flatline=sent"), "stop line")


run(scenario)
