"""tools/lobby-peer driven from a scenario: a scripted joiner whose stdout
lines are JSON (one per datagram received) once it prints "connected";
script() feeds it lines on stdin (tools/lobby-peer.c has the language)."""

import json
import os
import subprocess
import threading

from harness import BUILD, Proc, wait_for

PEER_BIN = os.path.join(BUILD, "tools", "lobby-peer")
VERSION = "0.6.1.24"


class Peer(Proc):
    def __init__(self, env, code, name="mallory"):
        super().__init__(env, name, [PEER_BIN, code], stdin=subprocess.PIPE)
        self.seen = 0
        self.parsed = []
        self.plock = threading.RLock()
        self.wait_line(r"^connected$", timeout=10)

    def script(self, *lines):
        self.p.stdin.write("".join(json.dumps(ln) + "\n" for ln in lines).encode())
        self.p.stdin.flush()

    def send(self, obj):
        self.script({"send": obj})

    def join(self, name):
        self.send({"t": "join", "version": VERSION, "name": name, "mesh": False,
                   "recovery": 0, "batches": 1})

    def msgs(self, pred=lambda m: True):
        """The lobby messages received so far (parsed once each)."""
        with self.plock:
            out = self.output()
            for ln in out[self.seen:]:
                if ln.startswith("{\"msg\": "):
                    self.parsed.append(json.loads(ln)["msg"])
            self.seen = len(out)
            return [m for m in self.parsed if pred(m)]

    def wait_msg(self, pred, timeout=10, what="a message"):
        return wait_for(lambda: next(iter(self.msgs(pred)), None), timeout,
                        "%s: %s" % (self.name, what))

    def forget(self):
        """Drops what was received so far (long scenarios)."""
        with self.plock:
            self.msgs()
            self.parsed = []
