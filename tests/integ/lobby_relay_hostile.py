#!/usr/bin/env python3
"""Hostile players against a relay: what only the leader may do, and a
leader uploading garbage.

mallory (tools/lobby-peer) leads; eve (lobby-peer too) is second. eve's
fbegin and start are dropped (relay-refused, nothing received, nobody
started), her /new is answered that only the leader ('mallory') may, her
company for mallory is refused, her mode ignored. mallory's uploads are
refused or fail cleanly, each with fdone ok:false final:true and nothing
stored: a file name outside the whitelist, a size over the relay's
--max-save, chunks that do not match their SHA-256 (re-asked from base 0
three times, then failed). The relay runs on, and once they are gone an
honest leader's upload is stored and shared."""

import hashlib
import os
import struct

from harness import Lobby, check, run, wait_for
from harness import Peer

CHUNK = 8192


def fbegin(sid, files, chunk=CHUNK):
    total = sum(f["size"] for f in files)
    return {"t": "fbegin", "sid": sid, "total_bytes": total, "chunk": chunk,
            "total_chunks": (total + chunk - 1) // chunk, "files": files,
            "sha256": hashlib.sha256(b"not it").hexdigest(), "kind": "save", "mods": [],
            "mods_unknown": False}


def fdone_bad(p, sid):
    return p.wait_msg(lambda m: m.get("t") == "fdone" and m.get("sid") == sid and
                      m.get("ok") is False and m.get("final") is True, 15,
                      "fdone ok:false for sid %d" % sid)


def chunk_hex(sid, seq, data):
    return (b"NP1:D" + b"NPF1" + struct.pack(">II", sid, seq) + data).hex()


def scenario(env):
    relay = Lobby(env, "host", name="relay", args=["--relay-only", "--max-save", str(1 << 20)])
    code = relay.wait_code()
    io = relay.io
    mal = Peer(env, code, "mallory")
    mal.join("mallory")
    mal.wait_msg(lambda m: m.get("t") == "welcome", 10, "welcome")
    eve = Peer(env, code, "eve")
    eve.join("eve")
    eve.wait_msg(lambda m: m.get("t") == "welcome" and m.get("host") == "mallory", 10,
                 "welcome naming mallory leader")

    # What only the leader may do.
    f = [{"name": "incoming_save.sav", "size": 100, "sha256": "00" * 32}]
    eve.send(fbegin(11, f))
    relay.wait_line(r"relay-refused what=fbegin name=\"eve\" reason=\"only the leader starts\"")
    eve.send({"t": "start"})
    eve.send({"t": "chat", "text": " /NEW "})
    eve.wait_msg(lambda m: m.get("t") == "status" and m.get("detail") ==
                 "only the leader ('mallory') can start a new world", 10, "the /new refusal")
    eve.send({"t": "company", "player": "mallory", "id": 9})
    relay.wait_line(r"company-refused name=\"eve\" target=\"mallory\"")
    eve.send({"t": "mode", "mode": "companies"})
    eve.send({"t": "chat", "text": "marker"})
    eve.wait_msg(lambda m: m.get("t") == "chat" and m.get("text") == "marker", 10, "the marker")
    check(not relay.grep(r"^\S+ start save="), "nobody was started: %r" % relay.grep(r"start"))
    check(not relay.grep(r"xfer-recv-begin sid=11 "), "eve's fbegin was taken")
    check(relay.roster()["mode"] == "coop", "eve set the mode")
    check(not eve.msgs(lambda m: m.get("t") in ("fbegin_ack", "fack", "fdone")),
          "eve heard about a transfer")

    # The leader's garbage.
    mal.send(fbegin(21, [{"name": "../../evil.sh", "size": 100, "sha256": "00" * 32}]))
    fdone_bad(mal, 21)
    mal.send(fbegin(22, [{"name": "incoming_save.sav", "size": 2 << 20, "sha256": "00" * 32}]))
    fdone_bad(mal, 22)
    data = os.urandom(5 * CHUNK)
    mal.send(fbegin(23, [{"name": "incoming_save.sav", "size": len(data),
                          "sha256": hashlib.sha256(b"something else").hexdigest()}]))
    mal.wait_msg(lambda m: m.get("t") == "fbegin_ack" and m.get("sid") == 23, 10, "the ack")
    for attempt in range(1, 5):
        mal.script(*[{"raw_hex": chunk_hex(23, k, data[k * CHUNK:(k + 1) * CHUNK])}
                     for k in range(5)])
        if attempt <= 3:
            relay.wait_line(r"xfer-recv-mismatch sid=23 attempt=%d" % attempt, 15)
    fdone_bad(mal, 23)
    relay.wait_line(r"xfer-recv-fail sid=23 reason=\"hash mismatch\"")
    check(not os.path.exists(os.path.join(io, "incoming_save.sav")), "garbage was stored")
    check(not [n for n in os.listdir(io) if n.startswith("incoming_save") or ".tmp" in n],
          "temporaries left: %r" % os.listdir(io))
    env.daemons_alive(relay)

    # A push (TPF2BULK1 send) nobody expects, and one with a wrong token:
    # closed without a word, counted; the relay runs on.
    import socket as _socket
    for hello in (b"TPF2BULK1 send 23 " + b"0" * 32 + b" mallory\n",
                  b"TPF2BULK1 send 999 " + b"ab" * 16 + b" eve\n"):
        s = _socket.create_connection(("127.0.0.1", relay.udp_port), timeout=5)
        s.sendall(hello)
        s.settimeout(5)
        check(s.recv(16) == b"", "a stranger's push was answered")
        s.close()
    relay.wait_line(r'bulk-refused .*reason="no upload waits for that sid and token"', 10)
    env.daemons_alive(relay)

    # They go; an honest leader's upload is stored and shared.
    for p in (mal, eve):
        p.script({"send": {"t": "leave"}}, {"quit": True})
        p.wait_exit(5)
    alice = Lobby(env, "join", code=code, name="alice")
    alice.wait_status("connected", "press START GAME to send your most recent save")
    d = os.path.join(env.dir, "saves")
    os.makedirs(d)
    sav = os.path.join(d, "w.sav")
    with open(sav, "wb") as fh:
        fh.write(os.urandom(300000))
    bob = Lobby(env, "join", code=code, name="bob")
    bob.wait_status("connected", "^joined the host$")
    alice.command(cmd="start", save=sav)
    bob.wait_event(lambda e: e == {"type": "start", "save": True}, 60, "bob's start")
    with open(sav, "rb") as a, open(os.path.join(io, "incoming_save.sav"), "rb") as b:
        check(a.read() == b.read(), "the honest world is stored")


run(scenario)
