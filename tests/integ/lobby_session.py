#!/usr/bin/env python3
"""A lobby on loopback: a host, two joiners and a late joiner.

Roster on every side (names de-duplicated: two "bob"s become bob and
bob#2), chat from the host and from a joiner reaching everyone once (three
copies on the wire, de-duplicated by cid), stage and company changes, a
start without a save, game frames both ways through simulated bridges (the
host's frames reach every joiner; a joiner's reach the host and, through
it, the other joiner), and the IPC files as netpunch 0.6.1.24 writes them:
lobby_out.jsonl events (their order at start-up, a roster event only when
the roster changed), lobby_state.json (its fields, their order, json.dumps
style), lobby_panel.txt, lobby_in.jsonl commands (note, crossplay too).
Only loopback candidates: every lobby runs with --lan-ip 127.0.0.1, no
STUN, no UPnP, no master."""

import json
import os

from harness import Bridge, Lobby, check, run, wait_for

HOST_KEYS = ["session", "state", "code", "players", "you", "host", "started", "lobby",
             "companies", "mode"]
JOINER_KEYS = ["session", "state", "you", "started", "host", "players", "lobby", "companies",
               "mode"]


def names(lobby):
    r = lobby.roster()
    return r["players"] if r else None


def raw_state(lobby):
    with open(os.path.join(lobby.io, "lobby_state.json"), "rb") as f:
        return f.read()


def panel(lobby):
    with open(os.path.join(lobby.io, "lobby_panel.txt")) as f:
        return f.read()


def check_state_file(lobby, keys):
    """lobby_state.json: these keys in this order (first set first), written
    as Python's json.dumps writes the dict. The state follows the event
    that comes with it (as in netpunch): wait for its write. Our own key,
    traversal (how a joiner got through), may sit among them: netpunch's
    keys keep their order around it."""
    wait_for(lambda: [k for k in json.loads(raw_state(lobby)) if k != "traversal"] == keys, 5,
             "%s state keys %r" % (lobby.name, keys))
    raw = raw_state(lobby)
    st = json.loads(raw)
    if keys is JOINER_KEYS:
        tr = st.get("traversal")
        check(tr and tr["role"] == "joiner" and tr["result"] == "connected" and
              tr["path"] in ("lan", "public", "punched") and tr["ms"]["joined"] is not None,
              "%s traversal %r" % (lobby.name, tr))
    check(json.dumps(st).encode() == raw, "%s state not json.dumps style: %r" % (lobby.name, raw))
    return st


def scenario(env):
    # The senders wait for "go" until both joiners are in, so every frame
    # has somewhere to go (a joiner still dialling would miss the first ones).
    hb = Bridge(env, 1, send=300, rate=200, duration_ms=6000, name="bridge-host", wait_go=True)
    host = Lobby(env, "host", name="alice", args=["--game-local-port", str(hb.port),
                                                   "--lobby-name", "Test lobby"])
    hb.connect(host)
    code = host.wait_code()
    check(len(code) > 10 and code.isalnum(), "code %r" % code)
    ev = host.wait_event(lambda e: e.get("type") == "code")
    # Without Steam the classic code is the only one: cross-play is on.
    check(ev == {"type": "code", "code": code, "steam": "", "crossplay": True, "cross_code": code},
          "code event: %r" % ev)
    host.wait_status("connected", r"^lobby ready on \d+$")
    wait_for(lambda: host.roster(), 5, "the host's first roster")
    # netpunch's start-up, in this order and nothing between.
    first = [(e["type"], e.get("state"), e.get("detail")) for e in host.events()]
    check(first[:2] == [("status", "waiting", "observing NAT"), ("transport_lobby", None, None)] and
          first[2][0] == "code" and first[3][:2] == ("status", "connected") and
          first[4][0] == "roster" and len(first) == 5, "host start-up events %r" % first)
    st = check_state_file(host, HOST_KEYS)
    check(st["state"] == "connected" and st["code"] == code and st["players"] == ["alice"] and
          st["host"] == "alice" and st["lobby"] == "Test lobby" and st["companies"] == {"alice": 1}
          and st["started"] is False, "host state %r" % st)
    # The panel follows every state write (just after it).
    wait_for(lambda: panel(host) ==
             "Connected\nTest lobby\nHost: alice\nalice (host, you) - company 1\n", 5,
             "the host's panel")

    b1 = Bridge(env, 2, send=300, rate=200, duration_ms=6000, name="bridge-bob", wait_go=True)
    j1 = Lobby(env, "join", code=code, name="bob", args=["--game-local-port", str(b1.port)])
    b1.connect(j1)
    j1.wait_status("connected", "^joined the host$")
    b2 = Bridge(env, 3, send=0, duration_ms=6000, name="bridge-bob2")
    j2 = Lobby(env, "join", code=code, name="bob", args=["--game-local-port", str(b2.port)],
               proc_name="lobby-bob-2")
    b2.connect(j2)
    j2.wait_status("connected", "^joined the host$")

    wait_for(lambda: names(host) == ["alice", "bob", "bob#2"], 5, "the host's roster")
    wait_for(lambda: names(j1) == ["alice", "bob", "bob#2"], 5, "bob's roster")
    wait_for(lambda: names(j2) == ["alice", "bob", "bob#2"], 5, "bob#2's roster")
    hb.go()
    b1.go()
    check(j1.roster()["you"] == "bob" and j2.roster()["you"] == "bob#2", "you: %r %r" % (
        j1.roster()["you"], j2.roster()["you"]))
    check(j1.roster()["host"] == "alice" and j1.roster()["lobby"] == "Test lobby", "roster host/lobby")
    st = check_state_file(j2, JOINER_KEYS)
    check(st["you"] == "bob#2" and st["host"] == "alice" and st["state"] == "connected" and
          st["players"] == ["alice", "bob", "bob#2"] and st["lobby"] == "Test lobby" and
          st["mode"] == "coop", "state: %r" % st)
    wait_for(lambda: panel(j2) == "Connected\nTest lobby\nHost: alice\nalice (host) - company 1\n"
             "bob - company 1\nbob#2 (you) - company 1\n", 5, "bob#2's panel")
    tl = [e for e in j1.events("transport_lobby")]
    check(len(tl) == 1 and len(tl[0]["epoch"]) == 32, "transport_lobby events: %r" % tl)
    check(tl[0]["epoch"] == host.events("transport_lobby")[0]["epoch"], "epochs differ")
    # A joiner's first events: no "observing NAT"; joined, then the nonce,
    # then what the host's save needs (nothing), then the roster. Beside
    # them, once, our traversal event (how bob got in), which netpunch's
    # menu ignores.
    evs = j1.events()
    trav = [e for e in evs if e["type"] == "traversal"]
    check(len(trav) == 1 and trav[0]["result"] == "connected" and trav[0]["role"] == "joiner",
          "bob's traversal events %r" % trav)
    first = [(e["type"], e.get("state"), e.get("detail")) for e in evs
             if e["type"] != "traversal"][:7]
    check(first == [("status", "waiting", "dialing host"),
                    ("status", "connecting", "checking multiplayer version..."),
                    ("status", "connected", "joined the host"), ("transport_lobby", None, None),
                    ("mods_manifest", None, None), ("mods_clear", None, None),
                    ("roster", None, None)], "bob's first events %r" % first)
    check(j1.events("mods_manifest") == [{"type": "mods_manifest", "mods": []}] and
          len(j1.events("mods_clear")) == 1, "bob's mods events")
    check(j1.roster()["letters"] == {} and j1.roster()["relay"] is False, "letters %r" %
          j1.roster())

    # Chat: from the host, and from a joiner, once each everywhere.
    host.command(cmd="chat", text="hello from alice")
    j1.command(cmd="chat", text="hi, bob here")
    for who in (host, j1, j2):
        wait_for(lambda: len([e for e in who.events("chat") if e["text"] == "hi, bob here"]) == 1, 5,
                 "%s to see bob's chat" % who.name)
        wait_for(lambda: len([e for e in who.events("chat") if e["text"] == "hello from alice"]) == 1, 5,
                 "%s to see alice's chat" % who.name)

    # Stage and company. The other two copies of each chat left the host in
    # the same burst as the first; the roster the stage change sends every
    # joiner comes after them on the same path, so a joiner showing it has
    # read them: still once.
    j2.command(cmd="stage", text="loading 50%")
    wait_for(lambda: (host.roster() or {}).get("stages") == {"bob#2": "loading 50%"}, 5, "stage")
    for who in (j1, j2):
        wait_for(lambda: (who.roster() or {}).get("stages") == {"bob#2": "loading 50%"}, 5,
                 "%s to see the stage" % who.name)
    for who in (host, j1, j2):
        chats = who.events("chat")
        check(len(chats) == 2, "%s chats: %r" % (who.name, chats))
        check(all(set(c) == {"type", "from", "text", "ts"} for c in chats), "chat fields %r" % chats)
    check([c["from"] for c in j2.events("chat") if c["text"] == "hi, bob here"] == ["bob"], "from")
    j1.command(cmd="company", id=7)
    wait_for(lambda: (j2.roster() or {}).get("companies", {}).get("bob") == 7, 5, "company")

    # A late joiner sees everyone.
    b3 = Bridge(env, 4, send=0, duration_ms=6000, name="bridge-carol")
    j3 = Lobby(env, "join", code=code, name="carol", args=["--game-local-port", str(b3.port)])
    b3.connect(j3)
    j3.wait_status("connected", "^joined the host$")
    wait_for(lambda: names(j3) == ["alice", "bob", "bob#2", "carol"], 5, "carol's roster")
    wait_for(lambda: names(j1) == ["alice", "bob", "bob#2", "carol"], 5, "bob sees carol")

    # Notes: a line from MULTIPLAYER for that player alone, 400 characters
    # at most, no ts. crossplay without Steam: the same code event again.
    host.command(cmd="note", text="n" * 500)
    j3.command(cmd="note", text="for carol")
    host.wait_event(lambda e: e.get("type") == "chat" and e["from"] == "MULTIPLAYER", 5, "note")
    j3.wait_event(lambda e: e.get("type") == "chat" and e["from"] == "MULTIPLAYER", 5, "note")
    check([e for e in host.events("chat") if e["from"] == "MULTIPLAYER"] ==
          [{"type": "chat", "from": "MULTIPLAYER", "text": "n" * 400}], "host note")
    check([e for e in j3.events("chat") if e["from"] == "MULTIPLAYER"] ==
          [{"type": "chat", "from": "MULTIPLAYER", "text": "for carol"}], "carol's note")
    host.command(cmd="crossplay", on=False)
    wait_for(lambda: len(host.events("code")) == 2, 5, "the code again")
    check(host.events("code")[1] == host.events("code")[0], "crossplay: %r" % host.events("code"))

    # Game frames: alice's bridge sends 300, bob's 300 (both at 200/s).
    rh, r1, r2, r3 = hb.result(), b1.result(), b2.result(), b3.result()
    check(rh["sent"] == 300 and r1["sent"] == 300, "bridges sent %r %r" % (rh, r1))
    got = r1["from"].get(1, {}).get("frames", 0)
    check(got >= 250, "bob got %d of alice's frames" % got)
    got = rh["from"].get(2, {}).get("frames", 0)
    check(got >= 250, "alice got %d of bob's frames" % got)
    got = r2["from"].get(2, {}).get("frames", 0)
    check(got >= 250, "bob#2 got %d of bob's frames (star forward)" % got)
    check(r2["from"].get(1, {}).get("frames", 0) >= 250, "bob#2 got alice's frames")
    for r in (rh, r1, r2):
        for frm, v in r["from"].items():
            check(v["dup"] == 0, "duplicated frames from %d: %r" % (frm, v))

    # Start without a save: once on every joiner, in the state file too; the
    # host shows the start, not a roster.
    host.command(cmd="start")
    for j in (j1, j2, j3):
        j.wait_event(lambda e: e == {"type": "start", "save": False}, 5, "start")
    # Its other two copies went in the same burst; a chat sent after them
    # reaches each joiner behind them.
    host.command(cmd="chat", text="after the start")
    for j in (j1, j2, j3):
        j.wait_event(lambda e: e.get("type") == "chat" and e["text"] == "after the start", 5,
                     "the chat after the start")
    for j in (j1, j2, j3):
        check(len(j.events("start")) == 1, "%s start events: %r" % (j.name, j.events("start")))
        check(j.state()["started"] is True, "started in the state file")
    check(host.events("start") == [{"type": "start", "save": False}], "host start event")
    evs = host.events()
    i = evs.index({"type": "start", "save": False})
    check([e["type"] for e in evs[i:]] == ["start", "chat"], "after the start: %r" % evs[i:])
    check(host.state()["started"] is True, "host state started")

    # Quit: a joiner leaves (roster shrinks), then the host closes.
    j3.command(cmd="quit")
    check(j3.wait_exit(5) == 0, "carol exit status")
    j3.wait_status("failed", "^left lobby$")
    st = j3.state()
    check(st["state"] == "disconnected" and st["started"] is False and "detail" not in st,
          "carol's last state %r" % st)
    check(panel(j3) == "Disconnected\nTest lobby\nHost: alice\n", "carol's panel %r" %
          panel(j3))
    wait_for(lambda: names(host) == ["alice", "bob", "bob#2"], 5, "carol gone from the roster")
    env.daemons_alive(host, j1, j2)
    nrosters = len(host.events("roster"))
    host.command(cmd="quit")
    check(host.wait_exit(5) == 0, "host exit status")
    # "lobby closed" is a failed status; the roster stays as it was.
    check(host.events()[-1] == {"type": "status", "state": "failed", "detail": "lobby closed"} and
          len(host.events("roster")) == nrosters, "host's last events %r" % host.events()[-2:])
    st = check_state_file(host, HOST_KEYS)
    check(st["state"] == "failed" and st["players"] == ["alice", "bob", "bob#2"], "host %r" % st)
    check(panel(host) == "Failed\nTest lobby\nHost: alice\n", "host panel %r" % panel(host))
    for j in (j1, j2):
        j.wait_status("failed", "^host closed the lobby$")
        check(j.wait_exit(5) == 0, "%s exit status after bye" % j.name)
        st = j.state()
        check(st["state"] == "disconnected" and st["started"] is False and "detail" not in st,
              "%s last state %r" % (j.name, st))
    # Every event line is Python json.dumps style.
    for ln in j1.raw_events():
        check(json.dumps(json.loads(ln)).encode() == ln, "not json.dumps style: %r" % ln)


run(scenario)
