#!/usr/bin/env python3
"""A hostile host against a rally-lobby joiner's save receiver.

mallory is a host of this test's own in a plaintext session (its join code
carries no secret, so its NP1 frames are plain D, which a joiner takes in
such a session, and no seal is needed here): it answers the joiner's HELLO,
welcomes it, then proposes saves a joiner must refuse or fail cleanly:
  - a file outside the whitelist and a ../ path (netpunch's refusal text,
    with Python's repr of the names),
  - 1 TB declared,
  - a chunk that writes past total_bytes,
  - data that does not match its SHA-256 (re-requested from base 0 three
    times, then "hash mismatch"),
  - chunks of a sid the joiner never accepted (ignored).
Each time: the joiner says so in a failed status, answers fdone ok:false
final:true, writes nothing outside its io dir and leaves no temporary, and
keeps running: after it all, an honest round from mallory lands whole.
Then what netpunch's joiner says of the host's save and its mods: a save
whose .sav.lua lacks ["lockstep.lua"] (made without the mod) is taken but
said, once, after save_ready; a welcome whose mods are unknown (null) is
said once; a new list is told (mods_manifest, mods_clear) once; a list
that is not [folder, version] pairs makes the joiner leave (mods_cancelled,
exit 0, the state "disconnected")."""

import base64
import hashlib
import json
import os
import socket
import struct
import threading
import time

from harness import Lobby, check, run, wait_for


def code_for(port):
    # netpunch-wire.md §4.1: flags (0x08: a LAN candidate), unix time, the
    # LAN IPv4 and port; no secret, so the session is plaintext.
    blob = bytes([0x08]) + struct.pack(">I", int(time.time())) + socket.inet_aton(
        "127.0.0.1") + struct.pack(">H", port)
    return base64.b32encode(blob).decode().rstrip("=")


class Mallory:
    def __init__(self, env):
        self.sock = env.udp()
        self.port = self.sock.getsockname()[1]
        self.joiner = None
        self.msgs = []
        self.chunks = {}   # seq -> bytes, resent on every fack naming them
        self.sid = None
        self.lock = threading.Lock()
        self.stop = False
        self.t = threading.Thread(target=self.loop, daemon=True)
        self.t.start()
        env.cleanups.append(self.close)

    def send(self, obj):
        self.sock.sendto(b"NP1:D" + json.dumps(obj).encode(), self.joiner)

    def chunk(self, sid, seq, data):
        self.sock.sendto(b"NP1:D" + b"NPF1" + struct.pack(">II", sid, seq) + data, self.joiner)

    def loop(self):
        self.sock.settimeout(0.05)
        while not self.stop:
            try:
                data, src = self.sock.recvfrom(65535)
            except OSError:
                continue
            if data.startswith(b"NP1:H"):
                self.joiner = src
                self.sock.sendto(b"NP1:A" + data[5:], src)
            elif data.startswith(b"NP1:D{"):
                m = json.loads(data[5:])
                with self.lock:
                    self.msgs.append(m)
                if m.get("t") == "join":
                    self.send({"t": "welcome", "version": m.get("version"),
                               "transport_lobby": "ab" * 16, "you": "bob", "host": "mallory",
                               "recovery": 0, "lobby": "", "relay": False, "mods": [],
                               "mods_unknown": False})
                elif m.get("t") == "fack" and m.get("sid") == self.sid:
                    for s in m.get("nack", []) + ([0] if m.get("base") == 0 else []):
                        if s in self.chunks:
                            self.chunk(self.sid, s, self.chunks[s])

    def got(self, pred):
        with self.lock:
            return [m for m in self.msgs if pred(m)]

    def fbegin(self, sid, files, data, chunk=8192, total=None, sha=None, payload=None):
        """payload: the bytes the chunks really carry (default: data, which
        the hashes are of); set before the fbegin goes, as the joiner's
        first fack comes at once."""
        body = data if payload is None else payload
        self.sid = sid
        self.chunks = {i: body[i * chunk:(i + 1) * chunk] for i in range(
            (len(body) + chunk - 1) // chunk)}
        total = len(data) if total is None else total
        self.send({"t": "fbegin", "sid": sid, "total_bytes": total, "chunk": chunk,
                   "total_chunks": (total + chunk - 1) // chunk, "files": files,
                   "sha256": sha or hashlib.sha256(data).hexdigest(), "kind": "save",
                   "mods": [], "mods_unknown": False})

    def close(self):
        self.stop = True
        self.t.join(2)


def entry(name, data):
    return {"name": name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def failed_with(bob, mal, sid, detail, n_before):
    def newer():
        new = [e for e in bob.events("status")[n_before:] if e.get("state") == "failed"]
        return new[0] if new else None
    ev = wait_for(newer, 10, "a failed status")
    check(ev["detail"] == detail, "detail %r, want %r" % (ev["detail"], detail))
    wait_for(lambda: mal.got(lambda m: m == {"t": "fdone", "sid": sid, "ok": False,
                                             "final": True}), 5, "fdone ok:false final")
    check(bob.alive(), "the joiner died")
    left = [n for n in os.listdir(bob.io) if n.startswith("incoming_save")]
    check(not left, "left in the io dir: %r" % left)


def scenario(env):
    # bob's io dir sits two levels down in a directory of this test's own,
    # so whatever a ../ name could reach is ours to list (the system's
    # /tmp is shared with the scenarios running beside this one).
    outside = os.path.join(env.dir, "jail")
    os.makedirs(os.path.join(outside, "cell"))
    before = set(os.listdir(outside)) | set(os.listdir(os.path.join(outside, "cell")))
    mal = Mallory(env)
    bob = Lobby(env, "join", code=code_for(mal.port), name="bob",
                io=os.path.join(outside, "cell", "io-bob"))
    bob.wait_status("connected", "^joined the host$")
    data = os.urandom(20000)

    n = len(bob.events("status"))
    mal.fbegin(101, [entry("incoming_save.sav", data), entry("evil.exe", b"x"),
                     entry("../incoming_save.sav", b"y")], data + b"xy")
    failed_with(bob, mal, 101, "save transfer failed: refused: sender proposed unexpected "
                "filename(s) ['evil.exe', '../incoming_save.sav']", n)

    n = len(bob.events("status"))
    tb = 1 << 40
    mal.fbegin(102, [{"name": "incoming_save.sav", "size": tb, "sha256": "0" * 64}], b"",
               total=tb)
    failed_with(bob, mal, 102, "save transfer failed: refused: %d bytes is over this lobby's "
                "cap of %d" % (tb, 4 << 30), n)

    n = len(bob.events("status"))
    small = os.urandom(100)
    mal.fbegin(103, [entry("incoming_save.sav", small)], small)
    mal.chunk(103, 0, small + b"more than was declared")
    failed_with(bob, mal, 103, "save transfer failed: refused: chunk 0 would write 0..122 past "
                "100", n)

    n = len(bob.events("status"))
    # Chunks that are not what was hashed.
    mal.fbegin(104, [entry("incoming_save.sav", data)], data, payload=bytes(len(data)))
    for s, c in list(mal.chunks.items()):
        mal.chunk(104, s, c)
    failed_with(bob, mal, 104, "save transfer failed: hash mismatch", n)
    restarts = mal.got(lambda m: m.get("t") == "fack" and m.get("sid") == 104 and
                       m.get("base") == 0 and m.get("verifying") is False)
    check(len(restarts) >= 3, "re-requests after a mismatch: %d" % len(restarts))

    # Chunks of a round never proposed: nothing happens.
    for s in range(4):
        mal.chunk(999, s, os.urandom(8192))

    # And an honest round still lands whole.
    good = os.urandom(50000)
    mal.fbegin(105, [entry("incoming_save.sav", good)], good)
    for s, c in mal.chunks.items():
        mal.chunk(105, s, c)
    ready = bob.wait_event(lambda e: e.get("type") == "save_ready", 10, "save_ready")
    check(ready["files"] == ["incoming_save.sav"], "files %r" % ready["files"])
    with open(os.path.join(bob.io, "incoming_save.sav"), "rb") as f:
        check(f.read() == good, "the honest save differs")
    wait_for(lambda: mal.got(lambda m: m == {"t": "fdone", "sid": 105, "ok": True}), 5, "fdone")
    after = set(os.listdir(outside)) | set(os.listdir(os.path.join(outside, "cell")))
    check(after - before <= {"io-bob"}, "written outside the io dir: %r" % (after - before))
    check(sorted(os.listdir(bob.io)) == ["incoming_save.sav", "lobby_in.jsonl",
                                         "lobby_out.jsonl", "lobby_panel.txt",
                                         "lobby_state.json"],
          "the io dir: %r" % sorted(os.listdir(bob.io)))

    # A save made without the mod: taken, and said once after save_ready.
    no_mod = "The host's save does not have the Transport Fever 2 Multiplayer mod enabled, " \
             "so nothing will sync. Ask the host to enable it in that save's Mods panel and " \
             "share it again."
    def notices():
        return [e["text"] for e in bob.events("chat") if e["from"] == "MULTIPLAYER"]
    lua = b"-- scripts\n[\"other.lua\"] = { }\n"
    mal.fbegin(106, [entry("incoming_save.sav", good), entry("incoming_save.sav.lua", lua)],
               good + lua)
    for s, c in mal.chunks.items():
        mal.chunk(106, s, c)
    wait_for(lambda: mal.got(lambda m: m == {"t": "fdone", "sid": 106, "ok": True}), 10,
             "fdone 106")
    evs = bob.events()
    ready = [i for i, e in enumerate(evs) if e.get("type") == "save_ready"][-1]
    check(evs[ready + 1] == {"type": "chat", "from": "MULTIPLAYER", "text": no_mod},
          "after save_ready: %r" % evs[ready:ready + 2])
    check(notices() == [no_mod], "notices %r" % notices())
    # With the mod: nothing more.
    lua = b'["lockstep.lua"] = { }\n'
    mal.fbegin(107, [entry("incoming_save.sav", good), entry("incoming_save.sav.lua", lua)],
               good + lua)
    for s, c in mal.chunks.items():
        mal.chunk(107, s, c)
    wait_for(lambda: mal.got(lambda m: m == {"t": "fdone", "sid": 107, "ok": True}), 10,
             "fdone 107")
    check(notices() == [no_mod], "notices after a save with the mod %r" % notices())

    # The mods a host's save needs, in its welcomes (a rename is answered
    # with one): unknown is said once; a new list told once, then clear.
    unknown = "The host could not read which mods its save needs, so none can be offered to " \
              "you. If your game refuses the save, install the host's mods by hand."
    def welcome(mods, mods_unknown):
        mal.send({"t": "welcome", "version": "0.6.1.24", "transport_lobby": "ab" * 16,
                  "you": "bob", "host": "mallory", "recovery": 0, "lobby": "", "relay": False,
                  "mods": mods, "mods_unknown": mods_unknown})
    for _ in range(2):
        welcome(None, True)
    wait_for(lambda: unknown in notices(), 5, "the unknown-mods notice")
    welcome([["1234", 2]], False)
    welcome([["1234", 2]], False)
    # Unknown again after a list: said again (the list reset it). It also
    # shows the second copy of the list was read, to no effect.
    welcome(None, True)
    wait_for(lambda: notices() == [no_mod, unknown, unknown], 5, "unknown, after a list")
    check(bob.events("mods_manifest") == [{"type": "mods_manifest", "mods": []},
                                          {"type": "mods_manifest", "mods": [["1234", 2]]}],
          "manifests %r" % bob.events("mods_manifest"))
    check(len(bob.events("mods_clear")) == 2, "clears %r" % bob.events("mods_clear"))
    # A list that is not [folder, version] pairs: the joiner leaves.
    welcome([["../x", 1]], False)
    check(bob.wait_exit(5) == 0, "exit status after a bad mod list")
    check(bob.events()[-1]["type"] == "mods_cancelled", "last event %r" % bob.events()[-1])
    check(mal.got(lambda m: m.get("t") == "leave"), "no leave")
    st = bob.state()
    check(st["state"] == "disconnected" and st["started"] is False, "state %r" % st)


run(scenario)
