#!/usr/bin/env python3
"""kill -9 while a relay writes its state never leaves a file that fails
to load.

A player renames itself again and again (every new name is a letter
written to relay_letters.json) and changes its company (a write to
relay_companies.json) while the relay is killed with SIGKILL at a moment
picked at random among those writes, twelve times over. After every kill
the files are whole JSON of netpunch's form, and the relay starts again on
them (it loads and checks both; a start on a broken file would exit 1),
with what it had written so far (the names only grow, up to 702), and no
temporary of theirs is left once it has started."""

import glob
import json
import os
import random
import signal

from harness import Lobby, check, run
from harness import Peer

ROUNDS = 12
BURST = 200


def scenario(env):
    io = os.path.join(env.dir, "relay-io")
    rnd = random.Random()
    seed = rnd.randrange(1 << 30)
    rnd.seed(seed)
    env.log("seed %d" % seed)
    known = 0
    for rnd_i in range(ROUNDS):
        relay = Lobby(env, "host", name="relay", args=["--relay-only"], io=io,
                      proc_name="relay%d" % rnd_i)
        code = relay.wait_code()
        m = relay.wait_line(r"relay-state letters=(\d+) companies=(\d+) ")
        letters = int(m.group(1))
        check(letters >= known, "round %d: letters went back from %d to %d" %
              (rnd_i, known, letters))
        known = letters
        check(not glob.glob(os.path.join(io, "relay_*.json.tmp.*")),
              "temporaries left after a start: %r" % glob.glob(os.path.join(io, "*.tmp.*")))
        peer = Peer(env, code, "p%d" % rnd_i)
        lines = []
        for k in range(BURST):
            lines.append({"send": {"t": "join", "version": "0.6.1.24",
                                   "name": "r%02dn%03d" % (rnd_i, k), "mesh": False}})
            lines.append({"send": {"t": "company", "id": 1 + k % 200}})
        peer.script(*lines)
        k = rnd.randrange(1, BURST - 20)
        relay.wait_line(r"join peer=\S+ name=\"r%02dn%03d\"" % (rnd_i, k), timeout=20)
        os.kill(relay.pid, signal.SIGKILL)
        relay.wait_exit(5)
        peer.script({"quit": True})
        peer.wait_exit(5)
        for f in ("relay_letters.json", "relay_companies.json"):
            path = os.path.join(io, f)
            with open(path) as fh:
                d = json.load(fh)
            check(isinstance(d, dict) and d, "round %d: %s holds %r" % (rnd_i, f, d))
        with open(os.path.join(io, "relay_secret.bin"), "rb") as fh:
            check(len(fh.read()) == 12, "the secret is whole")
    last = Lobby(env, "host", name="relay", args=["--relay-only"], io=io, proc_name="relay-last")
    last.wait_code()
    m = last.wait_line(r"relay-state letters=(\d+) companies=(\d+) ")
    check(int(m.group(1)) >= known and int(m.group(2)) > 0, "what was written is there")


run(scenario)
