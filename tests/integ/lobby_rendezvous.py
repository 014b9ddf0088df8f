#!/usr/bin/env python3
"""The master's side of the lobby, on loopback with a real rally-master:
- publishing: `--publish URL --public` lists the lobby (code, players, type,
  version, locked) and refreshes it; the "publish" command toggles it;
  quitting sends /leave, so the row goes at once;
- knocks and the relay fallback on netpunch's schedule (--schedule
  netpunch on both, what a netpunch lobby does: the lab tests the fast
  one): the host advertises a LAN candidate that
  goes nowhere, so the joiner's HELLOs are unanswered; after 4 s it knocks
  at the master, from the 2nd knock asking for a relay port; the host's
  poll finds the note, binds the relay port too, and the two connect
  through it; roster, chat and game frames then cross the relay;
- renames through lobby_in.jsonl ("name")."""

import json
import time
import urllib.request

from harness import Bridge, Lobby, Master, check, private_loopback, run, wait_for


def listing(m):
    with urllib.request.urlopen(m.url("/list"), timeout=5) as r:
        return json.loads(r.read())["servers"]


def scenario(env):
    rip = private_loopback()
    m = Master(env, args=["--relay-ip", rip, "--relay-bind", rip, "--relay-ports", "29600-29609"])
    url = m.url("")
    hb = Bridge(env, 1, send=200, rate=100, duration_ms=6000, name="bridge-host", wait_go=True)
    host = Lobby(env, "host", name="alice", args=[
        "--lan-ip", "127.0.0.1:1", "--rendezvous", url, "--publish", url, "--public",
        "--lobby-name", "Relayed", "--game-local-port", str(hb.port), "--schedule", "netpunch"])
    hb.connect(host)
    code = host.wait_code()

    rows = wait_for(lambda: listing(m), 5, "the lobby to be listed")
    check(len(rows) == 1, "rows: %r" % rows)
    row = rows[0]
    check(row["name"] == "Relayed" and row["code"] == code and row["players"] == 1 and
          row["max"] == 200 and row["type"] == "host" and row["game"] == "player hosted" and
          row["version"] == "0.6.1.24" and row["locked"] is False, "row: %r" % row)
    host.command(cmd="publish", on=False)
    wait_for(lambda: listing(m) == [], 5, "publish off to delist")
    host.command(cmd="publish", on=True)
    wait_for(lambda: listing(m), 12, "publish on to list again")

    # The direct path goes nowhere: knock, relay.
    jb = Bridge(env, 2, send=200, rate=100, duration_ms=6000, name="bridge-bob", wait_go=True)
    t0 = time.monotonic()
    j = Lobby(env, "join", code=code, name="bob", args=["--rendezvous", url, "--schedule", "netpunch",
                                                         "--game-local-port", str(jb.port)])
    jb.connect(j)
    j.wait_status("connected", "^joined the host$", timeout=25)
    took = time.monotonic() - t0
    check(took >= 4.0, "connected before the knock could happen (%.1fs)" % took)
    j.wait_line(r"relay-offered relay=%s:\d+ role=joiner" % rip.replace(".", r"\."))
    host.wait_line(r"relay-offered relay=%s:\d+ role=host" % rip.replace(".", r"\."))
    j.wait_line(r"connected host=%s:\d+" % rip.replace(".", r"\."))
    met = m.metrics()
    check(met['rally_master_relay_ports{state="in_use"}'] >= 1, "no relay port in use")
    wait_for(lambda: (host.roster() or {}).get("players") == ["alice", "bob"], 5, "roster")
    # Through the relay: chat and frames.
    hb.go()
    jb.go()
    host.command(cmd="chat", text="over the relay")
    j.wait_event(lambda e: e.get("type") == "chat" and e["text"] == "over the relay", 5, "chat")
    wait_for(lambda: m.metrics()["rally_master_relayed_datagrams_total"] > 50, 10,
             "frames to cross the relay")
    # A rename.
    j.command(cmd="name", name="robert")
    wait_for(lambda: (host.roster() or {}).get("players") == ["alice", "robert"], 5, "rename")
    wait_for(lambda: [r["players"] for r in listing(m)] == [2], 12, "players 2 in the list")

    rh, rj = hb.result(), jb.result()
    check(rj["from"].get(1, {}).get("frames", 0) >= 180, "bob got %r" % rj["from"])
    check(rh["from"].get(2, {}).get("frames", 0) >= 180, "alice got %r" % rh["from"])

    # Quit: /leave delists at once.
    host.command(cmd="quit")
    check(host.wait_exit(8) == 0, "host exit")
    check(listing(m) == [], "still listed after quit")
    j.wait_status("failed", "^host closed the lobby$")
    env.daemons_alive(m)


run(scenario)
