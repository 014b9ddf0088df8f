#!/usr/bin/env python3
"""The dedicated relay lobby (--relay-only), as netpunch's relay behaves.

A relay with no world: alice joins first and leads (the roster says host
alice, relay true, her letter a, stored_age -1, stored_max 180) and is told
to press START GAME; bob, second, is told to wait for her. bob's START is
his own lobby's to refuse (he does not lead). alice's START GAME uploads
her save (with its .sav.lua and .jpg) to the relay, which keeps it as
incoming_save.* and pushes it to bob; both start with save true. carol,
late, is sent the stored world (fresh). alice, leading, sets bob's company
and the mode; carol may not set bob's. Everyone leaves: the session
closes, the world stays. The relay restarts on the same port and io dir:
the old code still joins (the secret was kept), alice gets her letter back,
bob his company; a leader arriving at a relay that holds a world and runs
no session is pushed it after 3 s and starts with it."""

import hashlib
import json
import os
import re

from harness import Lobby, check, run, wait_for

MiB = 1 << 20


def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def make_save(d, size):
    os.makedirs(d, exist_ok=True)
    p = os.path.join(d, "world.sav")
    with open(p, "wb") as f:
        f.write(os.urandom(size))
    with open(p + ".lua", "w") as f:
        f.write('return { ["lockstep.lua"] = { }, }\n')
    with open(os.path.join(d, "world.jpg"), "wb") as f:
        f.write(os.urandom(4096))
    return p


def joined(env, code, name):
    j = Lobby(env, "join", code=code, name=name)
    j.wait_status("connected", "^joined the host$")
    return j


def status(j, detail, timeout=10):
    return j.wait_event(lambda e: e.get("type") == "status" and e.get("detail") == detail,
                        timeout, "status %r" % detail)


def started(j, timeout=30):
    return j.wait_event(lambda e: e == {"type": "start", "save": True}, timeout,
                        "%s's start" % j.name)


def last_roster(j, pred, timeout=10, what="a roster"):
    return wait_for(lambda: next((r for r in reversed(j.events("roster")) if pred(r)), None),
                    timeout, lambda: "%s: %s (last %r)" % (j.name, what, j.roster()))


def scenario(env):
    io = os.path.join(env.dir, "relay-io")
    relay = Lobby(env, "host", name="relay", args=["--relay-only"], io=io)
    code = relay.wait_code()
    port = relay.udp_port
    relay.wait_line(r"relay-state letters=0 companies=0 stored_age=-1")
    with open(os.path.join(io, "relay_secret.bin"), "rb") as f:
        secret = f.read()
    check(len(secret) == 12, "a 12-byte secret was kept")
    check(os.stat(os.path.join(io, "relay_secret.bin")).st_mode & 0o777 == 0o600,
          "the secret is 0600")

    alice = joined(env, code, "alice")
    status(alice, "this relay has no saved world yet -- press START GAME to send your most "
           "recent save")
    bob = joined(env, code, "bob")
    status(bob, "waiting for the leader ('alice') to press START GAME")
    r = last_roster(bob, lambda r: r["players"] == ["alice", "bob"], what="alice and bob")
    check(r["host"] == "alice" and r["relay"] is True, "alice leads a relay: %r" % r)
    check(r["letters"] == {"alice": "a", "bob": "b"}, "letters: %r" % r)
    check(r["stored_age"] == -1 and r["stored_max"] == 180, "no world yet: %r" % r)
    rr = relay.roster()
    check(rr["players"] == ["alice", "bob"] and rr["host"] == "alice" and rr["relay"] is True,
          "the relay's own roster event: %r" % rr)

    sav = make_save(os.path.join(env.dir, "saves"), 6 * MiB)
    # bob does not lead: his own lobby keeps his START to itself.
    bob.command(cmd="start", save=sav)
    bob.wait_line(r"ipc-command-ignored cmd=start reason=\"the leader is alice\"")
    alice.command(cmd="start", save=sav)
    status(alice, "uploading the save to the relay...")
    status(alice, "save uploaded -- the relay is sharing it...", 60)
    # The upload rode the relay's listener: alice pushed (TPF2BULK1 send) to
    # the port its fbegin_ack named, the relay took the stream.
    # (The stream may end cut short when UDP, running beside it until the
    # OK, brought the last chunks first: the upload is whole either way.)
    check(alice.grep(r"xfer-send-tcp sid=\d+ .*how=push") and
          relay.grep(r"xfer-recv-push sid=") and relay.grep(r"xfer-recv-tcp sid="),
          "the upload over TCP: %r" % [ln for ln in alice.output() if "tcp" in ln])
    started(bob, 60)
    started(alice, 30)
    for f in ("incoming_save.sav", "incoming_save.sav.lua", "incoming_save.jpg"):
        src = os.path.join(os.path.dirname(sav), f.replace("incoming_save", "world"))
        check(sha(os.path.join(io, f)) == sha(src), "the relay stored %s" % f)
        check(sha(os.path.join(bob.io, f)) == sha(src), "bob received %s" % f)
    check(alice.events("start") == [{"type": "start", "save": True}], "alice starts once")

    # A late joiner gets the stored world while it is fresh.
    carol = joined(env, code, "carol")
    ev = carol.wait_event(lambda e: e.get("type") == "status" and
                          e.get("detail", "").startswith("joining the running game: the relay "
                                                         "is sending you its world ("), 10,
                          "carol told she gets the stored world")
    check(re.match(r"^joining the running game: the relay is sending you its world "
                   r"\(\d+ s old\)\u2026$", ev["detail"]), "the detail: %r" % ev)
    started(carol, 60)
    check(sha(os.path.join(carol.io, "incoming_save.sav")) == sha(sav), "carol's save")
    r = last_roster(carol, lambda r: len(r["players"]) == 3, what="three players")
    check(r["letters"] == {"alice": "a", "bob": "b", "carol": "c"}, "letters: %r" % r)
    check(0 <= r["stored_age"] <= 180, "a fresh world: %r" % r)

    # The leader sets anyone's company and the mode; carol only her own.
    carol.command(cmd="company", player="bob", id=9)
    relay.wait_line(r"company-refused name=\"carol\" target=\"bob\"")
    alice.command(cmd="company", player="bob", id=7)
    last_roster(carol, lambda r: r["companies"].get("bob") == 7, what="bob in company 7")
    alice.command(cmd="mode", mode="companies")
    last_roster(carol, lambda r: r["mode"] == "companies", what="companies mode")

    for j in (carol, bob, alice):
        j.command(cmd="quit")
        j.wait_exit(10)
    relay.wait_line(r"relay-session-closed stored_age=\d+")
    relay.command(cmd="quit")
    check(relay.wait_exit(10) == 0, "the relay quits cleanly")
    with open(os.path.join(io, "relay_letters.json")) as f:
        letters = json.load(f)
    check(letters == {"alice": "a", "bob": "b", "carol": "c"}, "letters kept: %r" % letters)
    with open(os.path.join(io, "relay_companies.json")) as f:
        chips = json.load(f)
    check(chips.get("bob") == 7 and chips.get("alice") == 1, "companies kept: %r" % chips)

    # Restarted: the same secret, so the old code joins; alice returns to
    # her letter, bob to his company, and the stored world goes out.
    relay2 = Lobby(env, "host", name="relay", io=io,
                   args=["--relay-only", "--local-port", str(port), "--companies"])
    relay2.wait_code()
    relay2.wait_line(r"relay-state letters=3 companies=3 stored_age=\d+")
    with open(os.path.join(io, "relay_secret.bin"), "rb") as f:
        check(f.read() == secret, "the secret is the same")
    bob2 = joined(env, code, "bob")
    bob2.wait_event(lambda e: e.get("type") == "status" and re.match(
        r"^loading the relay's world \(saved \d+ min ago\)\u2026$", e.get("detail", "")), 10,
        "bob told the stored world loads")
    alice2 = joined(env, code, "alice")
    started(bob2, 60)
    started(alice2, 60)
    check(sha(os.path.join(alice2.io, "incoming_save.sav")) == sha(sav), "alice got the world")
    r = last_roster(alice2, lambda r: len(r["players"]) == 2, what="two players")
    check(r["host"] == "bob", "bob leads now: %r" % r)
    check(r["letters"] == {"bob": "b", "alice": "a"}, "letters came back: %r" % r)
    check(r["companies"].get("bob") == 7, "bob's company came back: %r" % r)
    check(r["stored_age"] == 0, "the world the session resumed from is current: %r" % r)
    relay2.wait_line(r"relay-resume stored_age=\d+")


run(scenario)
