#!/usr/bin/env python3
"""Players who come late to a save, as netpunch's host serves them.

alice hosts with bob; carol joins while the round to bob runs (a 96 MiB
save over UDP, --bulk-tcp off, at --max-rate 48 MB/s, so it lasts): she is not one of its
targets, and once bob has it and is started she is sent the same save
(netpunch's serve-again) and starts with it. dave joins after the start:
he hears 'game already started -- ask the host to press START GAME again',
then is sent the last shared save too and starts. And strangers on the
host's bulk TCP port (no hello, a hello too long, the wrong token, the
wrong sid, more than 32 waiting at once) are closed without a word while a
round goes on unaffected."""

import hashlib
import os
import socket
import time

from harness import Lobby, check, run, wait_for

MiB = 1 << 20


def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def save(d, size):
    os.makedirs(d, exist_ok=True)
    p = os.path.join(d, "world.sav")
    with open(p, "wb") as f:
        f.write(os.urandom(size))
    return p


def joined(env, code, name):
    j = Lobby(env, "join", code=code, name=name)
    j.wait_status("connected", "^joined the host$")
    return j


def late_players(env):
    # --max-rate: the round to bob lasts (2 s), however fast this machine.
    host = Lobby(env, "host", name="alice", args=["--bulk-tcp", "off", "--max-rate", "48000000"])
    code = host.wait_code()
    bob = joined(env, code, "bob")
    sav = save(os.path.join(env.dir, "save"), 96 * MiB)
    host.command(cmd="start", save=sav)
    host.wait_event(lambda e: e.get("type") == "transfer" and e.get("peer") == "bob", 10,
                    "the round to bob under way")
    carol = joined(env, code, "carol")
    carol.wait_event(lambda e: e == {"type": "start", "save": True}, 60, "carol's start")
    bob.wait_event(lambda e: e == {"type": "start", "save": True}, 5, "bob's start")
    evs = host.events("transfer")
    first = [e for e in evs if e.get("state") == "done"]
    check([e["peer"] for e in first] == ["bob", "carol"],
          "done in this order, carol in a round of her own: %r" % first)
    check(carol.events("start") == [{"type": "start", "save": True}], "carol starts once")
    # After the start: the late player's notice, then the last save.
    dave = joined(env, code, "dave")
    dave.wait_event(lambda e: e.get("type") == "status" and e.get("detail") ==
                    "game already started -- ask the host to press START GAME again", 5,
                    "dave's notice")
    dave.wait_event(lambda e: e == {"type": "start", "save": True}, 60, "dave's start")
    for j in (bob, carol, dave):
        check(sha(os.path.join(j.io, "incoming_save.sav")) == sha(sav), "%s's save" % j.name)
    check(len(host.events("start")) == 3, "the host started 3 times: %r" % host.events("start"))
    return host, (bob, carol, dave)


def strangers(env):
    host = Lobby(env, "host", name="alice")
    code = host.wait_code()
    bob = joined(env, code, "bob")
    port = host.udp_port
    sav = save(os.path.join(env.dir, "save2"), 32 * MiB)

    def conn():
        s = socket.create_connection(("127.0.0.1", port), timeout=3)
        s.settimeout(6)
        return s

    def closed_silently(s, send=b""):
        if send:
            try:
                s.sendall(send)
            except OSError:
                return True
        try:
            data = s.recv(16)
        except ConnectionResetError:
            data = b""
        s.close()
        return data == b""

    host.command(cmd="start", save=sav)
    host.wait_event(lambda e: e.get("type") == "transfer" and e.get("peer") == "bob", 10,
                    "the round under way")
    token = "00" * 16
    check(closed_silently(conn(), b"TPF2BULK1 recv 1 %s mallory\n" % token.encode()),
          "a wrong sid and token got an answer")
    check(closed_silently(conn(), b"TPF2BULK1 recv 1 " + b"x" * 300 + b"\n"),
          "a hello over 256 bytes got an answer")
    check(closed_silently(conn(), b"GET / HTTP/1.0\r\n\r\n"), "HTTP got an answer")
    # More than 32 waiting at once: the 33rd is closed at once.
    t0 = time.monotonic()
    waiting = [conn() for _ in range(32)]
    extra = conn()
    check(closed_silently(extra), "a 33rd pending hello was kept")
    # A silent one is closed after 5 s: the first of them (the last may have
    # been refused at once if one of bob's own links was pending meanwhile).
    check(closed_silently(waiting[0]), "a silent connection got an answer")
    check(4.5 <= time.monotonic() - t0 <= 8.0, "the silent one was closed after %.1f s" %
          (time.monotonic() - t0))
    for s in waiting[1:]:
        s.close()
    bob.wait_event(lambda e: e == {"type": "start", "save": True}, 60, "bob's start")
    check(sha(os.path.join(bob.io, "incoming_save.sav")) == sha(sav), "bob's save")
    host.wait_line(r"bulk-refused .*reason=\"no round waits for that sid and token\"")
    host.wait_line(r"bulk-refused .*reason=\"hello over 256 bytes\"")
    host.wait_line(r"bulk-refused .*reason=\"no hello within 5 s\"")


def scenario(env):
    late_players(env)
    strangers(env)


run(scenario)
