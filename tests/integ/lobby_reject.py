#!/usr/bin/env python3
"""Refusals, each with a clear status event and exit status:
- a wrong password: with a locked code it fails at decode time (exit 2,
  "bad code: wrong password for this code"); with the code's secret but the
  wrong password mixed into the session key, the host cannot open the
  joiner's frames and answers a plain reject ("wrong password");
- a wrong version, both ways, with netpunch's exact texts;
- a full lobby ("lobby full");
- bad codes: `rally-lobby code` and `join` exit 2 with netpunch's messages;
and the host keeps serving the others throughout. As netpunch's joiner, one
that reached the host exits 0 whatever ended it (a reject, a version
mismatch), and its lobby_state.json says "failed" with the reason as
detail and started false; a bad code leaves "failed" without a detail."""

import subprocess

from harness import LOBBY_BIN, Lobby, check, run, wait_for


def scenario(env):
    # ---- passwords ----
    host = Lobby(env, "host", name="alice", args=["--password", "opensesame"])
    code = host.wait_code()
    out = subprocess.run([LOBBY_BIN, "code", code], capture_output=True, text=True)
    check(out.returncode == 2 and "this code is locked -- enter the lobby password" in out.stderr,
          "code without password: %d %r" % (out.returncode, out.stderr))
    out = subprocess.run([LOBBY_BIN, "code", code, "--password", "opensesame"], capture_output=True,
                         text=True)
    check(out.returncode == 0 and "locked=yes" in out.stdout and "lan_v4=127.0.0.1:" in out.stdout,
          "code with password: %d %r" % (out.returncode, out.stdout))
    bad = Lobby(env, "join", code=code, name="eve", args=["--password", "wrong"], wait_ready=False)
    check(bad.wait_exit(20) == 2, "locked code, wrong password: exit status")
    bad.wait_status("failed", "^bad code: wrong password for this code$")
    # "dialing host" came first, before the code was decoded; nothing else.
    check([e["detail"] for e in bad.events("status")] ==
          ["dialing host", "bad code: wrong password for this code"], "statuses %r" %
          bad.events("status"))
    st = bad.state()
    check(st.get("state") == "failed" and "detail" not in st, "bad code state %r" % st)
    ok = Lobby(env, "join", code=code, name="bob", args=["--password", "opensesame"])
    ok.wait_status("connected", "^joined the host$", timeout=20)
    env.daemons_alive(host, ok)
    host.stop()
    ok.wait_exit(15)

    # The session key differs (an unlocked code, a password the host has not).
    host = Lobby(env, "host", name="alice", proc_name="host2")
    code = host.wait_code()
    wrong = Lobby(env, "join", code=code, name="mallory", args=["--password", "guess"])
    wrong.wait_status("failed", "^wrong password$", timeout=10)
    check(wrong.wait_exit(5) == 0, "wrong session key: exit status")
    st = wrong.state()
    check(st.get("state") == "failed" and st.get("detail") == "wrong password" and
          st.get("started") is False, "rejected state %r" % st)
    check(host.grep(r"join ") == [], "the host let a wrong key in")

    # ---- versions ----
    old = Lobby(env, "join", code=code, name="old", args=["--protocol-version", "0.6.1.23"])
    old.wait_status("failed", r"^Multiplayer version mismatch: you have 0\.6\.1\.23; the host has "
                    r"0\.6\.1\.24\. Install the same multiplayer version on both sides\.$")
    check(old.wait_exit(5) == 0, "old version: exit status")
    check(old.state().get("detail", "").startswith("Multiplayer version mismatch"), "old: state")
    newhost = Lobby(env, "host", name="future", args=["--protocol-version", "0.7.0.0"],
                    proc_name="host-future")
    ncode = newhost.wait_code()
    j = Lobby(env, "join", code=ncode, name="bob", proc_name="bob-vs-future")
    # The future host rejects us first, with its own text.
    j.wait_status("failed", r"^Multiplayer version mismatch: you have 0\.6\.1\.24; the host has "
                  r"0\.7\.0\.0\.")
    check(j.wait_exit(5) == 0, "exit status against a newer host")

    # ---- a full lobby: 3 players at most ----
    small = Lobby(env, "host", name="h", args=["--max-players", "3"], proc_name="host-small")
    scode = small.wait_code()
    a = Lobby(env, "join", code=scode, name="a", proc_name="j-a")
    a.wait_status("connected")
    b = Lobby(env, "join", code=scode, name="b", proc_name="j-b")
    b.wait_status("connected")
    c = Lobby(env, "join", code=scode, name="c", proc_name="j-c")
    c.wait_status("failed", "^lobby full$")
    check(c.wait_exit(5) == 0, "full: exit status")
    st = c.state()
    check(st.get("state") == "failed" and st.get("detail") == "lobby full", "full: state %r" % st)
    wait_for(lambda: (small.roster() or {}).get("players") == ["a", "b", "h"], 5, "roster of 3")

    # ---- bad codes ----
    for text, msg in (("!!!!", "not valid base32"), ("AA", "code too short"),
                      ("74AAAAAAAAAAAAAAAAAAAAAAAA", "locked code too short")):
        out = subprocess.run([LOBBY_BIN, "code", text], capture_output=True, text=True)
        check(out.returncode == 2 and msg in out.stderr, "code %r: %d %r" % (text, out.returncode,
                                                                            out.stderr))
    badj = Lobby(env, "join", code="AA", name="x", wait_ready=False, proc_name="j-badcode")
    check(badj.wait_exit(10) == 2, "join with a bad code: exit status")
    badj.wait_status("failed", "^bad code: code too short$")
    env.daemons_alive(host, small, a, b)


run(scenario)
