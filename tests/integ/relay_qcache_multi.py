#!/usr/bin/env python3
"""Two real OpenArena servers behind one rally-relay (--servers FILE), each
with its own query cache, budgets, attack mode and known players. A
getstatus flood from 20,000 spoofed sources (tools/bench/bench-flood) on
alpha's port puts alpha alone in attack mode and spends alpha's budgets;
meanwhile beta answers a source inside a flooded /24 with its own server's
status, and beta's counters (refusals, unverified datagrams, attack mode,
budget tables) do not move. An IPv6 asker on alpha's dual-stack port gets
the same spliced answer as an IPv4 one. Known players are per server
(<state-dir>/servers/NAME/known-players): kept in memory by a SIGHUP that
keeps the server, saved and loaded again by one that restarts it, saved
and freed by one that removes it (LeakSanitizer checks the exit)."""

import os
import signal
import socket
import subprocess
import time

from harness import (BUILD, OAServer, RelayServers, check, oob, query, run, wait_for)
from q3client import Q3Player

FLOOD = os.path.join(BUILD, "tools", "bench", "bench-flood")
SOURCES = 20000
RATE = 6000
FLOOD_MS = 6000

FILE = """# two servers, each with its own query cache
[defaults]
no-heartbeat = yes
query-cache-refresh = 1000
attack-threshold = %(th_a)d
attack-hold = 2

[server alpha]
listen = [::]:0
server = 127.0.0.1:%(a)d

[server beta]
listen = 127.0.0.1:0
server = 127.0.0.1:%(b)d
attack-threshold = 1500
source-budget = 1024
%(beta_extra)s"""


def metric(relay, name, server, **labels):
    lb = ",".join(['server="%s"' % server] + ['%s="%s"' % kv for kv in labels.items()])
    return relay.metrics().get("%s{%s}" % (name, lb))


def refusals(relay, server):
    m = relay.metrics()
    return sum(v for k, v in m.items()
               if k.startswith('rally_relay_query_cache_refusals_total{server="%s",' % server))


def ask(sock, addr, cmd):
    r = query(sock, addr, cmd, 2)
    return r[0] if r else None


def scenario(env):
    check(os.path.exists(FLOOD), "%s is missing: build tools/bench" % FLOOD)
    oa1 = OAServer(env, hostname="rally-alpha", name="oa-alpha")
    oa2 = OAServer(env, hostname="rally-beta", name="oa-beta")
    keys = {"a": oa1.addr[1], "b": oa2.addr[1], "th_a": 1500, "beta_extra": ""}
    relay = RelayServers(env, FILE % keys, debug=False)
    pa = relay.addrs["alpha"][0][1]
    a4, a6, b4 = ("127.0.0.1", pa), ("::1", pa), relay.addrs["beta"][0]

    # Each port answers from its own server's cache, the challenge spliced.
    s = env.udp("127.0.50.1")
    ans = ask(s, b4, "getstatus beta1")
    check(ans and ans.startswith(oob("statusResponse")) and b"rally-beta" in ans and
          b"\\challenge\\beta1" in ans, "beta's status: %r" % (ans or b"")[:80])
    ans = ask(s, a4, "getstatus alpha1")
    check(ans and b"rally-alpha" in ans and b"\\challenge\\alpha1" in ans,
          "alpha's status: %r" % (ans or b"")[:80])

    # IPv6: an asker on ::1 gets, from alpha's dual-stack socket, the very
    # answer an IPv4 asker gets (the kept one may be refreshed in between:
    # a few tries).
    s6 = env.udp("::1", socket.AF_INET6)
    for _ in range(5):
        v6 = ask(s6, a6, "getinfo same")
        v4 = ask(s, a4, "getinfo same")
        if v6 is not None and v6 == v4:
            break
    check(v6 is not None and v6 == v4 and b"\\challenge\\same" in v6,
          "v6 and v4 answers differ:\n%r\n%r" % (v6, v4))
    r6 = query(s6, a6, "getinfo port", 2)
    check(r6 and r6[1][1] == pa, "v6 answer from %r, not port %d" % (r6 and r6[1], pa))

    # A player on alpha: known to alpha only.
    player = Q3Player(env, a4, ip="127.0.0.30", name="alphaplayer")
    wait_for(lambda: metric(relay, "rally_relay_known_players", "alpha") == 1, 10,
             "the player to be known to alpha")
    check(metric(relay, "rally_relay_known_players", "beta") == 0, "beta knows alpha's player")
    player.close()

    # The flood, on alpha's port.
    beta_ref0 = refusals(relay, "beta")
    beta_ans0 = metric(relay, "rally_relay_query_cache_answers_total", "beta", kind="getstatus")
    t0 = time.monotonic()
    flood = subprocess.Popen([FLOOD, "--target", "127.0.0.1:%d" % pa, "--sources", str(SOURCES),
                              "--base", "127.16.0.0", "--mix", "query", "--rate", str(RATE),
                              "--duration-ms", str(FLOOD_MS)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    env.cleanups.append(lambda: flood.poll() is None and flood.kill())
    wait_for(lambda: metric(relay, "rally_relay_attack_mode", "alpha") == 1, 5,
             "alpha in attack mode")
    relay.wait_line(r"attack-mode-on name=alpha unverified_pps=\d+ threshold=1500")
    # Beta meanwhile: a source inside a flooded /24 (its alpha budget is
    # spent) asks beta, again and again, and gets beta's status each time.
    # Three asks per /24 stay within beta's 4 s of source-budget (4 KiB).
    victims = [env.udp("127.16.0.7"), env.udp("127.16.1.9")]
    answered = 0
    for i in range(6):
        ans = ask(victims[i % 2], b4, "getstatus during%d" % i)
        check(ans and b"rally-beta" in ans and b"\\challenge\\during%d" % i in ans,
              "beta during alpha's flood (%d): %r" % (i, (ans or b"")[:60]))
        answered += 1
        env.log("beta's answer %d: %d bytes" % (i, len(ans)))
    check(flood.poll() is None, "the flood ended before the checks: make it longer")
    check(metric(relay, "rally_relay_attack_mode", "beta") == 0, "beta in attack mode")
    check(refusals(relay, "beta") == beta_ref0, "beta refused queries: %d -> %d" % (
        beta_ref0, refusals(relay, "beta")))
    check(metric(relay, "rally_relay_unverified_pps", "beta") < 50,
          "beta's unverified pps: %r" % metric(relay, "rally_relay_unverified_pps", "beta"))
    # the three networks that asked beta: 127.0.50/24, 127.16.0/24, 127.16.1/24
    check(metric(relay, "rally_relay_reply_sources", "beta", **{"class": "unverified"}) <= 3,
          "beta's budget table grew: %r" % metric(relay, "rally_relay_reply_sources", "beta",
                                                  **{"class": "unverified"}))
    check(metric(relay, "rally_relay_query_cache_answers_total", "beta", kind="getstatus") ==
          beta_ans0 + answered, "beta's answers")
    res = flood.communicate(timeout=FLOOD_MS / 1000 + 20)[0]
    env.log("bench-flood: " + res.strip())
    check(metric(relay, "rally_relay_query_cache_refusals_total", "alpha",
                 reason="source_budget") > 0, "alpha refused nothing for the source budget")
    check(metric(relay, "rally_relay_attack_mode_changes_total", "beta", to="on") == 0,
          "beta went into attack mode")
    wait_for(lambda: metric(relay, "rally_relay_attack_mode", "alpha") == 0, 15,
             "alpha out of attack mode")
    relay.wait_line(r"attack-mode-off name=alpha ")
    st, servers, _ = relay.api("GET", "/servers")
    qc = {x["name"]: x["query_cache"] for x in servers}
    check(qc["alpha"]["known_players"] == 1 and qc["beta"]["known_players"] == 0 and
          not qc["beta"]["attack_mode"] and qc["beta"]["usable"], "/servers: %r" % qc)

    # SIGHUP, the file unchanged: both kept, alpha's player still known.
    relay.signal(signal.SIGHUP)
    relay.wait_line(r"servers-reloaded .* kept=alpha,beta")
    check(metric(relay, "rally_relay_known_players", "alpha") == 1, "kept alpha forgot")
    # alpha's section changed: restarted, its player saved and loaded back.
    keys["th_a"] = 1600
    relay.write(FILE % keys)
    relay.signal(signal.SIGHUP)
    relay.wait_line(r"servers-reloaded .* restarted=alpha kept=beta")
    wait_for(lambda: metric(relay, "rally_relay_known_players", "alpha") == 1, 5,
             "the restarted alpha to know its player")
    path = os.path.join(relay.state_dir, "servers", "alpha", "known-players")
    with open(path) as f:
        check("127.0.0.30 " in f.read(), "alpha's known-players file")
    check(not os.path.exists(os.path.join(relay.state_dir, "known-players")),
          "a known-players file for a server named \"\"")
    # beta removed: its cache freed (LeakSanitizer at exit), its lines gone.
    keys["beta_extra"] = ""
    text = (FILE % keys).split("[server beta]")[0]
    relay.write(text)
    relay.signal(signal.SIGHUP)
    relay.wait_line(r"servers-reloaded .* removed=beta")
    check(metric(relay, "rally_relay_known_players", "beta") is None, "beta's lines stay")
    ans = ask(s, a4, "getstatus after")
    check(ans and b"rally-alpha" in ans, "alpha after the reloads: %r" % (ans or b"")[:60])
    env.daemons_alive(relay, oa1, oa2)
    rc = relay.stop()
    check(rc == 0, "the relay exited %r (LeakSanitizer?)" % rc)


if __name__ == "__main__":
    run(scenario)
