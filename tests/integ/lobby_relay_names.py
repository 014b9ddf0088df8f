#!/usr/bin/env python3
"""1,000 distinct names join a relay and leave, and nothing hangs.

netpunch's relay remembers every name's letter for ever and hangs on the
703rd distinct name (a..zz are all the letters there are). Here eight
players stay the whole time while four others join and leave under 1,000
fresh names: every join is welcomed, every roster gives present players
distinct letters, the eight keep theirs (they are present, so never
given away), relay_letters.json ends with the 702 most recently seen
names (the first churners were forgotten) and loads again after a
restart."""

import json
import os

from harness import Lobby, check, run, wait_for
from harness import Peer

STAYERS = 8
CHURNERS = 4
NAMES = 1000


def scenario(env):
    io = os.path.join(env.dir, "relay-io")
    relay = Lobby(env, "host", name="relay", args=["--relay-only"], io=io)
    code = relay.wait_code()
    stay = []
    for i in range(STAYERS):
        p = Peer(env, code, "stay%d" % i)
        p.join("stay%d" % i)
        p.wait_msg(lambda m: m.get("t") == "welcome", 10, "welcome")
        stay.append(p)
    stay[0].forget()
    r = stay[-1].wait_msg(lambda m: m.get("t") == "roster" and len(m["players"]) == STAYERS,
                          10, "a roster of the stayers")
    mine = {n: r["letters"][n] for n in r["players"]}
    check(sorted(mine.values()) == sorted("abcdefgh"), "the stayers' letters: %r" % mine)

    churn = [Peer(env, code, "churn%d" % k) for k in range(CHURNERS)]
    done = 0
    while done < NAMES:
        batch = []
        for p in churn:
            if done >= NAMES:
                break
            name = "n%04d" % done
            done += 1
            p.forget()
            p.join(name)
            batch.append((p, name))
        for p, name in batch:
            w = p.wait_msg(lambda m: m.get("t") == "welcome" and m.get("you") == name, 10,
                           "the welcome of %s" % name)
            check(w["relay"] is True, "a relay's welcome")
        for p, name in batch:
            p.send({"t": "leave"})
        # Every join: the relay still answers at once (no hang), and a
        # roster of the moment gives present players distinct letters.
        if done % 100 == 0:
            rs = stay[0].msgs(lambda m: m.get("t") == "roster")
            check(rs, "rosters keep coming")
            for ros in rs[-20:]:
                vals = [ros["letters"][n] for n in ros["players"]]
                check(len(set(vals)) == len(vals), "two present players share a letter: %r"
                      % ros["letters"])
                for n, v in mine.items():
                    check(n not in ros["players"] or ros["letters"].get(n) == v,
                          "%s lost its letter: %r" % (n, ros))
            stay[0].forget()
    check(not relay.grep(r"relay-no-letter"), "a name went without a letter")
    wait_for(lambda: relay.grep(r"peer-gone .*name=\"n%04d\"" % (NAMES - 1)), 10,
             "the last churner gone")
    with open(os.path.join(io, "relay_letters.json")) as f:
        letters = json.load(f)
    check(len(letters) == 702, "the table is full, not more: %d" % len(letters))
    check(len(set(letters.values())) == 702, "702 distinct letters")
    for n, v in mine.items():
        check(letters.get(n) == v, "the stayer %s kept %s: %r" % (n, v, letters.get(n)))
    check("n0000" not in letters and "n%04d" % (NAMES - 1) in letters,
          "the least recently seen were forgotten, the recent kept")
    for p in churn + stay:
        p.script({"send": {"t": "leave"}}, {"quit": True})
        p.wait_exit(5)
    relay.command(cmd="quit")
    check(relay.wait_exit(10) == 0, "the relay quits")
    again = Lobby(env, "host", name="relay", args=["--relay-only"], io=io)
    again.wait_code()
    again.wait_line(r"relay-state letters=702 ")


run(scenario)
