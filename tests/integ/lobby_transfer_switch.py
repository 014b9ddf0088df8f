#!/usr/bin/env python3
"""A world switch (netpunch-wire.md §15: start {save, switch: true}), as
netpunch's host and joiners do it.

alice hosts bob and carol and starts with world1 (both start with it).
START GAME with world2 and no switch changes nothing (everyone is started:
"everyone already has this save"). With switch: true the host mints a new
transport_lobby nonce (an event, and the next roster carries it), says
"Switching everyone to world2.sav…", sends world2 to everyone, and starts
them with start {save: true, switch: true}; each joiner emits that start
(a second start in the session: the one a joiner takes although it is
playing), has world2 byte for byte, and tells the host it is "loading the
host's new world"; the host's start event carries switch too. A second
copy of the start burst does not make a second start."""

import hashlib
import os

from harness import Lobby, check, run, wait_for

MiB = 1 << 20


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def make_save(d, name, size):
    os.makedirs(d, exist_ok=True)
    sav = os.path.join(d, name)
    with open(sav, "wb") as f:
        f.write(os.urandom(size))
    with open(sav + ".lua", "wb") as f:
        f.write(b'["lockstep.lua"] = { }\n')
    return sav


def scenario(env):
    host = Lobby(env, "host", name="alice")
    code = host.wait_code()
    joiners = []
    for n in ("bob", "carol"):
        j = Lobby(env, "join", code=code, name=n)
        j.wait_status("connected", "^joined the host$")
        joiners.append(j)
    wait_for(lambda: (host.roster() or {}).get("players") == ["alice", "bob", "carol"], 5,
             "the roster")
    d = os.path.join(env.dir, "saves")
    w1, w2 = make_save(d, "world1.sav", 3 * MiB), make_save(d, "world2.sav", 5 * MiB)
    host.command(cmd="start", save=w1)
    for j in joiners:
        j.wait_event(lambda e: e == {"type": "start", "save": True}, 30, "%s's start" % j.name)
        check(sha(os.path.join(j.io, "incoming_save.sav")) == sha(w1), "%s: world1" % j.name)

    # No switch: everyone is started already, nothing is pushed.
    mark = len(host.output())
    host.command(cmd="start", save=w2)
    host.wait_line(r"xfer-nothing-to-push ", start=mark)

    epochs = [e["epoch"] for e in host.events("transport_lobby")]
    host.command(cmd="start", save=w2, switch=True)
    host.wait_status("connected", "^Switching everyone to world2.sav\u2026$")
    new = wait_for(lambda: [e["epoch"] for e in host.events("transport_lobby")
                            if e["epoch"] not in epochs], 5, "a new nonce")[0]
    for j in joiners:
        j.wait_event(lambda e: e == {"type": "start", "save": True, "switch": True}, 30,
                     "%s's switch start" % j.name)
        check(sha(os.path.join(j.io, "incoming_save.sav")) == sha(w2), "%s: world2" % j.name)
        wait_for(lambda: new in [e["epoch"] for e in j.events("transport_lobby")], 5,
                 "%s got the new nonce" % j.name)
    wait_for(lambda: [e for e in host.events("start") if e.get("switch")], 5,
             "the host's switch start")
    check(host.events("start")[-1] == {"type": "start", "save": True, "switch": True},
          "host start %r" % host.events("start")[-1])
    for n in ("bob", "carol"):
        wait_for(lambda: [e for e in host.events("roster") if (e.get("stages") or {}).get(n) ==
                          "loading the host's new world"], 5, "%s's stage on the host" % n)
    # The burst's copies: one switch start per joiner.
    for j in joiners:
        starts = [e for e in j.events("start") if e.get("switch")]
        check(len(starts) == 1, "%s switch starts: %r" % (j.name, starts))
    for lb in [host] + joiners:
        lb.command(cmd="quit")
    for lb in [host] + joiners:
        check(lb.wait_exit(10) == 0, "%s exit status" % lb.name)


run(scenario)
