#!/usr/bin/env python3
"""Frames an attacker can make without the session key go nowhere: a
proxy sits between a joiner and the host (the host advertises the proxy as
its LAN candidate) and, besides forwarding faithfully, replays recorded
sealed frames, flips a bit in copies of them, and injects frames of random
bytes, both ways. Each side drops them and counts them (replayed, bad
seal), says nothing plain back to a known peer, and the session goes on
(chat still crosses once). Garbage that is not NP1 at all is counted too."""

import os
import re
import socket
import threading

from harness import Lobby, check, run, wait_for


class Proxy:
    def __init__(self, env):
        self.sock = env.udp()
        self.addr = self.sock.getsockname()
        self.host = None      # the host's address, set once it is up
        self.joiner = None    # learned from its first datagram
        self.rec = {"to_host": [], "to_joiner": []}
        self.stop = False
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()
        env.cleanups.append(self.close)

    def run(self):
        self.sock.settimeout(0.05)
        while not self.stop:
            try:
                data, src = self.sock.recvfrom(65535)
            except OSError:
                continue
            if self.host is None:
                continue
            if src == self.host:
                if self.joiner:
                    self.rec["to_joiner"].append(data)
                    self.sock.sendto(data, self.joiner)
            else:
                self.joiner = src
                self.rec["to_host"].append(data)
                self.sock.sendto(data, self.host)

    def inject(self, data, to_host):
        self.sock.sendto(data, self.host if to_host else self.joiner)

    def close(self):
        self.stop = True
        self.t.join(2)


def sealed(frames):
    return [f for f in frames if f.startswith(b"NP1:E") and len(f) >= 29]


def exit_counts(lobby):
    m = lobby.grep(r"exit status=\d+ rx=\d+ tx=\d+ bad_seal=(\d+) replayed=(\d+)")
    check(m, "%s printed no exit counters" % lobby.name)
    g = re.search(r"bad_seal=(\d+) replayed=(\d+)", m[-1])
    return int(g.group(1)), int(g.group(2))


def scenario(env):
    px = Proxy(env)
    host = Lobby(env, "host", name="alice", args=["--lan-ip", "127.0.0.1:%d" % px.addr[1]])
    px.host = ("127.0.0.1", host.udp_port)
    code = host.wait_code()
    j = Lobby(env, "join", code=code, name="bob")
    j.wait_status("connected", "^joined the host$")
    # Some traffic to record: chats both ways.
    for i in range(4):
        j.command(cmd="chat", text="warm-up %d" % i)
        host.command(cmd="chat", text="host warm-up %d" % i)
    wait_for(lambda: len(sealed(px.rec["to_host"])) >= 5 and len(sealed(px.rec["to_joiner"])) >= 5,
             10, "sealed frames both ways")

    # Replays, bit flips and random frames, both ways.
    n = 0
    for to_host, key in ((True, "to_host"), (False, "to_joiner")):
        for f in sealed(px.rec[key])[:5]:
            px.inject(f, to_host)                               # replay
            flipped = bytearray(f)
            flipped[-1] ^= 0x80                                 # the tag
            px.inject(bytes(flipped), to_host)
            flipped = bytearray(f)
            flipped[14] ^= 0x01                                 # the ciphertext
            px.inject(bytes(flipped), to_host)
            px.inject(b"NP1:E" + os.urandom(60), to_host)       # a foreign key
            n += 1
        px.inject(b"garbage, not NP1", to_host)
        px.inject(b"NP1:", to_host)
    check(n == 10, "injected %d frames of each kind" % n)

    # Each lobby reads its one socket in order, and all of the above came
    # from the proxy's socket: a frame the proxy passes on after them is
    # handled after them. Bob's chat is that frame for the host...
    j.command(cmd="chat", text="after the injections")
    host.wait_event(lambda e: e.get("type") == "chat" and e["text"] == "after the injections", 5,
                    "bob's chat after the injections")

    # ...and the host's for bob. The session goes on, and the host sent no
    # plain reject to its peer (it would have come before this chat).
    host.command(cmd="chat", text="still fine")
    j.wait_event(lambda e: e.get("type") == "chat" and e["text"] == "still fine", 5, "chat after")
    check(not [f for f in px.rec["to_joiner"] if f.startswith(b"NP1:D")],
          "the host answered a peer's bad frames in clear")
    check(len([e for e in j.events("chat") if e["text"] == "still fine"]) == 1,
          "chat duplicated: %r" % j.events("chat"))
    env.daemons_alive(host, j)

    j.command(cmd="quit")
    check(j.wait_exit(5) == 0, "joiner exit")
    host.command(cmd="quit")
    check(host.wait_exit(5) == 0, "host exit")
    hb, hr = exit_counts(host)
    jb, jr = exit_counts(j)
    # Per direction: 5 replays (seen already), 10 tampered + 5 random (bad seal).
    check(hr >= 5 and hb >= 15, "host counted replayed=%d bad_seal=%d" % (hr, hb))
    check(jr >= 5 and jb >= 15, "joiner counted replayed=%d bad_seal=%d" % (jr, jb))


run(scenario)
