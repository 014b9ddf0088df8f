#!/usr/bin/env python3
"""Attack mode with a real OpenArena server. A player (alice) connects
through the relay and becomes a known player (the server answered
connectResponse to her address, then she sent game traffic). A flood of
game-looking datagrams from 50,000 spoofed sources (bench-flood) passes
--attack-threshold (500 a second here): the relay logs attack-mode-on,
and while it lasts only known players and sessions the server took reach
the server: a stranger's getchallenge goes unanswered (dropped, reason
attack_mode), alice keeps playing and a second client from her address
connects, qstat still gets the cached status. The flood over, the relay
logs attack-mode-off after --attack-hold (2 s here) and the stranger gets
in. A restart keeps the known players (<state-dir>/known-players): the
stranger, known now, connects during a second flood while a newcomer
cannot. A corrupt list makes --check-config fail naming the file and
line, and a start log the same, move the file aside and run without it."""

import os
import subprocess
import time

from harness import BUILD, OAServer, RELAY_BIN, Relay, check, run, wait_for
from q3client import Q3Player, Refused

FLOOD = os.path.join(BUILD, "tools", "bench", "bench-flood")
ARGS = ["--attack-threshold", "500", "--attack-hold", "2"]


def start_flood(env, relay, seconds, base):
    p = subprocess.Popen([FLOOD, "--target", "%s:%d" % relay.addr, "--sources", "50000",
                          "--base", base, "--mix", "game", "--rate", "3000",
                          "--duration-ms", str(int(seconds * 1000))],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    env.cleanups.append(lambda: p.poll() is None and p.kill())
    return p


def refused(env, relay, ip, name):
    try:
        Q3Player(env, relay.addr, ip=ip, name=name, timeout=2)
    except Refused:
        return True
    return False


def qstat(addr):
    return subprocess.run(["quakestat", "-q3s", "%s:%d" % addr, "-R", "-timeout", "3"],
                          capture_output=True, text=True, timeout=20).stdout


def scenario(env):
    check(os.path.exists(FLOOD), "%s is missing: build tools/bench" % FLOOD)
    oa = OAServer(env, hostname="rally-attack")
    state = os.path.join(env.dir, "state")
    path = os.path.join(state, "known-players")
    relay = Relay(env, oa.addr, args=ARGS, state_dir=state, debug=False)
    alice = Q3Player(env, relay.addr, ip="127.0.0.30", name="alice")
    wait_for(lambda: relay.metrics().get("rally_relay_known_players") == 1, 5,
             "alice to be known")

    flood = start_flood(env, relay, 8, "127.16.0.0")
    relay.wait_line(r"attack-mode-on unverified_pps=\d+ threshold=500 known_players=1", 5)
    check(relay.metrics()["rally_relay_attack_mode"] == 1, "attack mode gauge")
    t_on = time.monotonic()
    check(refused(env, relay, "127.0.0.31", "stranger"), "a stranger connected during the attack")
    rtt = alice.ask(b"getchallenge 77 Quake3Arena", b"challengeResponse", 2.0)
    check(rtt is not None, "alice's getchallenge unanswered during the attack")
    alice2 = Q3Player(env, relay.addr, ip="127.0.0.30", name="alice2", timeout=3)
    check("rally-attack" in qstat(relay.addr), "qstat during the attack")
    snaps = alice.packets_since(t_on)
    check(flood.poll() is None, "the flood ended too soon for the checks")
    m = relay.metrics()
    check(m['rally_relay_drops_total{reason="attack_mode"}'] > 0, "no attack_mode drops")
    env.log("during the attack: alice's getchallenge %.1f ms, %d snapshots in %.1f s, %d "
            "datagrams refused" % (rtt * 1000, snaps, time.monotonic() - t_on,
                                   m['rally_relay_drops_total{reason="attack_mode"}']))
    flood.wait(20)
    relay.wait_line(r"attack-mode-off unverified_pps=\d+ lasted_s=\d+ refused=\d+", 10)
    check(relay.metrics()["rally_relay_attack_mode"] == 0, "attack mode gauge after")
    stranger = Q3Player(env, relay.addr, ip="127.0.0.31", name="stranger", timeout=3)
    wait_for(lambda: relay.metrics().get("rally_relay_known_players") == 2, 5,
             "the stranger to be known")
    for p in (alice, alice2, stranger):
        p.close()
    check(relay.stop() == 0, "relay exit status")

    # The list survives the restart.
    with open(path) as f:
        text = f.read()
    check("127.0.0.30 " in text and "127.0.0.31 " in text, "known-players file:\n" + text)
    relay = Relay(env, oa.addr, args=ARGS, state_dir=state, debug=False, name="relay-2")
    relay.wait_line(r"known-players-loaded file=%s count=2" % path)
    flood = start_flood(env, relay, 6, "127.18.0.0")
    relay.wait_line(r"attack-mode-on unverified_pps=\d+ threshold=500 known_players=2", 5)
    again = Q3Player(env, relay.addr, ip="127.0.0.31", name="stranger-again", timeout=3)
    check(refused(env, relay, "127.0.0.32", "newcomer"), "a newcomer connected during the attack")
    flood.wait(20)
    again.close()
    relay.stop()

    # A corrupt list: named, line and all.
    with open(path, "w") as f:
        f.write("rally-relay-known-players 1\n127.0.0.30 not-a-time\n")
    r = subprocess.run([RELAY_BIN, "--listen", "127.0.0.1:0", "--server", "%s:%d" % oa.addr,
                        "--state-dir", state, "--no-heartbeat", "--log", "plain",
                        "--check-config"], capture_output=True, text=True, timeout=20)
    check(r.returncode == 1, "--check-config with a corrupt list: status %d" % r.returncode)
    check("known-players-corrupt file=%s line=2 error=\"last-seen is not a Unix time in "
          "seconds\"" % path in r.stderr, "--check-config said:\n" + r.stderr)
    relay = Relay(env, oa.addr, args=ARGS, state_dir=state, debug=False, name="relay-3")
    m = relay.wait_line(r"known-players-corrupt file=%s line=2 error=\"[^\"]+\" "
                        r"moved-to=(\S+) loaded=0" % path)
    check(os.path.exists(m.group(1)) and not os.path.exists(path), "the corrupt file not moved")
    check(relay.metrics().get("rally_relay_known_players") == 0, "known players after")
    env.daemons_alive(relay, oa)


run(scenario)
