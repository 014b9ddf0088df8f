#!/usr/bin/env python3
"""The transfer's progress on a terminal (lobby_xprog): a joiner whose
stderr is a terminal (a pty of the test's own) draws a status line under
its log while a save comes in: the row "save  NN%  X of Y MiB  R MiB/s"
with its time left, redrawn in place ("\\r\\033[K"), the log lines written
above it, and the row's last state "done"; the host (--max-rate 8 MB/s,
so the 16 MiB round lasts two seconds) draws one row per peer the same way
on its own terminal. The same lobbies with stderr a pipe (every other test)
draw nothing: no escape in their output."""

import os
import pty
import re
import select
import subprocess
import threading
import time

from harness import LOBBY_BIN, Lobby, check, run, wait_for

MiB = 1 << 20


class TtyLobby:
    """rally-lobby with stderr on a pty; its bytes collected."""

    def __init__(self, env, role, args):
        self.master, slave = pty.openpty()
        self.io = os.path.join(env.dir, "io-tty-%s" % role)
        os.makedirs(self.io)
        argv = [LOBBY_BIN, role] + args + ["--io-dir", self.io, "--log", "plain",
                                           "--game-relay-port", "0", "--game-local-port", "9",
                                           "--stun", "off", "--upnp", "off", "--lan-ip",
                                           "127.0.0.1", "--rendezvous", "off", "--ipv6", "off"]
        self.p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=slave)
        os.close(slave)
        self.buf = b""
        self.lock = threading.Lock()
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()
        env.cleanups.append(self.stop)

    def _read(self):
        while True:
            r, _, _ = select.select([self.master], [], [], 0.2)
            if not r:
                if self.p.poll() is not None:
                    return
                continue
            try:
                data = os.read(self.master, 65536)
            except OSError:
                return
            if not data:
                return
            with self.lock:
                self.buf += data

    def text(self):
        with self.lock:
            return self.buf.decode("utf-8", "replace")

    def command(self, **cmd):
        import json
        with open(os.path.join(self.io, "lobby_in.jsonl"), "a") as f:
            f.write(json.dumps(cmd) + "\n")

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
        try:
            os.close(self.master)
        except OSError:
            pass


def scenario(env):
    host = TtyLobby(env, "host", ["--name", "alice", "--local-port", "0", "--bulk-tcp", "off",
                                  "--max-rate", "8000000"])
    code = wait_for(lambda: (host.p.stdout.readline().decode().strip()), 15, "the code")
    check(code.startswith("CODE="), "host printed %r" % code)
    code = code[5:]
    bob = TtyLobby(env, "join", [code, "--name", "bob"])
    wait_for(lambda: "joined the host" in bob.text(), 15, "bob joined")
    carol = Lobby(env, "join", code=code, name="carol")
    carol.wait_status("connected", "^joined the host$")
    d = os.path.join(env.dir, "save")
    os.makedirs(d)
    sav = os.path.join(d, "world.sav")
    with open(sav, "wb") as f:
        f.write(os.urandom(16 * MiB))
    with open(sav + ".lua", "wb") as f:
        f.write(b'["lockstep.lua"] = { }\n')
    host.command(cmd="start", save=sav)
    wait_for(lambda: "xfer-recv-done" in bob.text(), 30, "bob's save")
    carol.wait_event(lambda e: e.get("type") == "save_ready", 30, "carol's save")
    time.sleep(0.5)  # the last draw after done (every 0.2 s)
    row = re.compile(r"\r\x1b\[Ksave +(\d+)% +[\d.]+ of 16\.0 MiB +[\d.]+ MiB/s +(\S.*?)(?=\r|\n|$)")
    rows = row.findall(bob.text())
    check(len(rows) >= 3, "bob drew %d progress lines: %r" % (len(rows), bob.text()[-2000:]))
    pcts = [int(p) for p, _ in rows]
    check(pcts == sorted(pcts), "bob's percentages go down: %r" % pcts)
    check(any("left" in r for _, r in rows), "no time left shown: %r" % rows)
    check(rows[-1][1].startswith("done"), "bob's last row %r" % (rows[-1],))
    # The log goes above the row: a log line right after an erase.
    check(re.search(r"\r\x1b\[K\S+Z xfer-recv-", bob.text()), "bob's log lines are not above it")
    hrows = re.findall(r"(bob|carol) +(\d+)% +[\d.]+ of 16\.0 MiB", host.text())
    check({n for n, _ in hrows} == {"bob", "carol"}, "the host's rows: %r" % hrows[-6:])
    check("\x1b[K" not in "\n".join(carol.output()), "a pipe got escapes")
    for lb in (host, bob):
        lb.command(cmd="quit")
    carol.command(cmd="quit")
    for lb in (host, bob):
        check(lb.p.wait(10) == 0, "exit status")
    check(carol.wait_exit(10) == 0, "carol's exit status")


run(scenario)
