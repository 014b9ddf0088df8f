#!/usr/bin/env python3
"""The relay is no amplifier. An attacker spoofs a victim's address (a raw
socket: the victim is a socket of its own that never asked) and sends
getstatus as fast as it can: the victim receives at most the budget of its
network (--source-budget 512: 2 KiB at once, then 512 bytes a second), a
small fraction of what the attacker spent. Spoofing the rest of the
victim's /24 instead (bench-flood over 256 sources) changes nothing: the
budget is the network's. A flood over many networks meets the global
budget (--reply-budget, 20,000 bytes a second at most here), while a known player
(a real handshake through the relay: known once the server answered
connectResponse and it sent game traffic) is answered from a budget of its
own throughout."""

import os
import socket
import struct
import subprocess
import time

from harness import BUILD, OAServer, Relay, UdpPeer, check, oob, query, run, wait_for
from q3client import Q3Player

FLOOD = os.path.join(BUILD, "tools", "bench", "bench-flood")
BURST, RATE = 2048, 512


class Victim(UdpPeer):
    def bytes(self):
        return sum(len(d) for _, d, _ in self.packets())


def spoof_flood(src, dst, payload, seconds, pps):
    """getstatus 'from' src for seconds at about pps, through one raw
    socket; returns the bytes sent."""
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP)
    s.bind((src[0], 0))
    pkt = struct.pack("!HHHH", src[1], dst[1], 8 + len(payload), 0) + payload
    sent, t0 = 0, time.monotonic()
    try:
        while time.monotonic() - t0 < seconds:
            for _ in range(50):
                s.sendto(pkt, (dst[0], 0))
                sent += 1
            # Paced by the clock, not slept: the next 50 go when due.
            while sent > (time.monotonic() - t0) * pps and time.monotonic() - t0 < seconds:
                pass
    finally:
        s.close()
    return sent * len(payload), time.monotonic() - t0


def bench_flood(relay, base, sources, seconds, rate):
    out = subprocess.run([FLOOD, "--target", "%s:%d" % relay.addr, "--sources", str(sources),
                          "--base", base, "--mix", "query", "--rate", str(rate),
                          "--duration-ms", str(int(seconds * 1000))],
                         capture_output=True, text=True, timeout=seconds + 30).stdout
    return dict(tok.split("=", 1) for tok in out.split() if "=" in tok)


def scenario(env):
    check(os.geteuid() == 0, "spoofing needs root (raw sockets)")
    check(os.path.exists(FLOOD), "%s is missing: build tools/bench" % FLOOD)
    oa = OAServer(env, hostname="rally-reflect")
    relay = Relay(env, oa.addr, debug=False, args=["--reply-budget", "20000",
                                                    "--attack-threshold", "0"])
    # Warm the cache so every spoofed request meets a kept answer.
    check(query(env.udp("127.0.3.1"), relay.addr, "getstatus", 2), "no answer")

    # One victim address, spoofed for 4 s.
    victim = Victim(env, "127.0.9.9")
    spent, took = spoof_flood(victim.addr, relay.addr, oob("getstatus x"), 4.0, 2000)
    victim.flush()
    got = victim.bytes()
    limit = BURST + RATE * (took + 1)
    env.log("victim: attacker sent %d bytes in %.1f s, the victim received %d (budget %d): "
            "%.3f bytes out per byte in" % (spent, took, got, limit, got / spent))
    check(got > 0, "the victim got nothing at all: the budget should allow a burst")
    check(got <= limit, "the victim received %d bytes, over its budget %d" % (got, limit))
    check(got / spent < 0.1, "amplification %.2f" % (got / spent))

    # Its whole /24 spoofed (carpet bombing): the same network budget.
    kv = bench_flood(relay, "127.0.10.0", 256, 4.0, 2000)
    got, spent = int(kv["answer_bytes"]), int(kv["sent"]) * 14
    limit = BURST + RATE * (float(kv["elapsed_s"]) + 1)
    env.log("/24: %d bytes sent from 256 addresses, %d answered (budget %d)" % (spent, got, limit))
    check(got <= limit, "the /24 received %d bytes, over its budget %d" % (got, limit))

    # A known player, then a flood over 256 networks against the global
    # budget: the player is still answered.
    player = Q3Player(env, relay.addr, ip="127.0.0.30", name="known")
    wait_for(lambda: relay.metrics().get("rally_relay_known_players") == 1, 5,
             "the player to be known")
    before = relay.metrics()
    t0 = time.monotonic()
    flood = subprocess.Popen([FLOOD, "--target", "%s:%d" % relay.addr, "--sources", "65536",
                              "--base", "127.40.0.0", "--mix", "query", "--rate", "10000",
                              "--duration-ms", "5000"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    env.cleanups.append(lambda: flood.poll() is None and flood.kill())
    wait_for(lambda: relay.metrics().get(
        'rally_relay_query_cache_refusals_total{reason="global_budget"}', 0) >
        before.get('rally_relay_query_cache_refusals_total{reason="global_budget"}', 0), 5,
        "the global budget to run out")
    answered = [player.ask(b"getstatus p%d" % i, b"statusResponse", 1.0) for i in range(5)]
    check(all(a is not None for a in answered), "the known player was refused: %r" % answered)
    flood.communicate(timeout=40)
    took = time.monotonic() - t0
    after = relay.metrics()
    sent_bytes = after["rally_relay_query_cache_answer_bytes_total"] - \
        before["rally_relay_query_cache_answer_bytes_total"]
    env.log("global: %d bytes answered in %.1f s under the flood (budget 20000/s)" % (
        sent_bytes, took))
    # One second in hand, 20,000 a second, the player's answers on top.
    check(sent_bytes <= 20000 * (took + 1) + 5 * 1500,
          "%d bytes answered in %.1f s" % (sent_bytes, took))
    env.daemons_alive(relay, oa)


run(scenario)
