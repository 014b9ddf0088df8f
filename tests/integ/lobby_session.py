#!/usr/bin/env python3
"""A lobby on loopback: a host, two joiners and a late joiner.

Roster on every side (names de-duplicated: two "bob"s become bob and
bob#2), chat from the host and from a joiner reaching everyone once (three
copies on the wire, de-duplicated by cid), stage and company changes, a
start without a save, game frames both ways through simulated bridges (the
host's frames reach every joiner; a joiner's reach the host and, through
it, the other joiner), and the IPC files: lobby_out.jsonl events,
lobby_state.json, lobby_in.jsonl commands. Only loopback candidates: every
lobby runs with --lan-ip 127.0.0.1, no STUN, no UPnP, no master."""

import json

from harness import Bridge, Lobby, check, run, wait_for


def names(lobby):
    r = lobby.roster()
    return r["players"] if r else None


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
    check(ev == {"type": "code", "code": code, "steam": "", "crossplay": False, "cross_code": ""},
          "code event: %r" % ev)
    host.wait_status("waiting", r"^lobby ready on \d+$")

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
    st = j2.state()
    check(st["you"] == "bob#2" and st["host"] == "alice" and st["state"] == "connected", "state: %r" % st)
    tl = [e for e in j1.events("transport_lobby")]
    check(len(tl) == 1 and len(tl[0]["epoch"]) == 32, "transport_lobby events: %r" % tl)
    check(tl[0]["epoch"] == host.events("transport_lobby")[0]["epoch"], "epochs differ")

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

    # Start without a save: once on every joiner, in the state file too.
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

    # Quit: a joiner leaves (roster shrinks), then the host closes.
    j3.command(cmd="quit")
    check(j3.wait_exit(5) == 0, "carol exit status")
    wait_for(lambda: names(host) == ["alice", "bob", "bob#2"], 5, "carol gone from the roster")
    env.daemons_alive(host, j1, j2)
    host.command(cmd="quit")
    check(host.wait_exit(5) == 0, "host exit status")
    for j in (j1, j2):
        j.wait_status("failed", "^host closed the lobby$")
        check(j.wait_exit(5) == 0, "%s exit status after bye" % j.name)
    # Every event line is Python json.dumps style.
    for ln in j1.raw_events():
        check(json.dumps(json.loads(ln)).encode() == ln, "not json.dumps style: %r" % ln)


run(scenario)
