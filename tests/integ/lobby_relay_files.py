#!/usr/bin/env python3
"""A relay's state files that fail their check stop it, named, untouched;
and put-save replaces the stored world from outside.

Each of relay_letters.json (not JSON, a letter twice, a letter past zz),
relay_companies.json (a company 0, a string) and relay_secret.bin (11
bytes) in turn: the relay exits 1 before it binds anything, its log and
stderr name the file and what is wrong, and the file's bytes are as they
were. Then put-save: a save made without the mod is refused (exit 1, the
stored world as it was), one over --max-save too; a good one lands as
incoming_save.* (a .jpg the new save lacks is removed), and a relay that
runs serves it to its next leader without a restart."""

import hashlib
import os
import subprocess

from harness import LOBBY_BIN, Lobby, check, run

BAD = [
    ("relay_letters.json", b'{"alice": "a", "bob": ', "corrupt: "),
    ("relay_letters.json", b'{"alice": "a", "bob": "a"}', "another's too"),
    ("relay_letters.json", b'{"alice": "aaa"}', "not a..zz"),
    ("relay_companies.json", b'{"alice": 0}', "not 1..200"),
    ("relay_companies.json", b'{"alice": "1"}', "not a number"),
    ("relay_secret.bin", b"0123456789a", "11 bytes, a secret is 12"),
]


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def save(d, name, mod=True, size=300000):
    os.makedirs(d, exist_ok=True)
    p = os.path.join(d, name + ".sav")
    with open(p, "wb") as f:
        f.write(os.urandom(size))
    with open(p + ".lua", "w") as f:
        f.write('return { ["lockstep.lua"] = { }, }\n' if mod else "return { }\n")
    return p


def put(io, path, *extra):
    return subprocess.run([LOBBY_BIN, "put-save", path, "--io-dir", io, "--log", "plain"] +
                          list(extra), capture_output=True, timeout=20)


def scenario(env):
    for i, (name, data, why) in enumerate(BAD):
        io = os.path.join(env.dir, "bad%d" % i)
        os.makedirs(io)
        path = os.path.join(io, name)
        with open(path, "wb") as f:
            f.write(data)
        relay = Lobby(env, "host", name="relay", args=["--relay-only"], io=io,
                      wait_ready=False, proc_name="bad%d" % i)
        check(relay.wait_exit(10) == 1, "%s: exit 1" % name)
        check(relay.grep(r"relay-state-unusable file=%s error=\".*%s" % (path, why)),
              "%s: the log names it and why (%r): %r" % (name, why, relay.output()[-3:]))
        check(relay.grep(r"^rally-lobby: %s: .*left as it is" % path),
              "%s: a plain line on stderr: %r" % (name, relay.output()[-3:]))
        check(not relay.grep(r"ready udp="), "%s: nothing was started" % name)
        check(not relay.grep(r"Sanitizer"), "%s: a clean exit: %r" % (name, relay.output()[-5:]))
        with open(path, "rb") as f:
            check(f.read() == data, "%s: untouched" % name)
        # --check-config reads it as the start does, and writes nothing.
        r = subprocess.run([LOBBY_BIN, "host", "--relay-only", "--io-dir", io, "--check-config",
                            "--log", "plain"], capture_output=True, text=True, timeout=10)
        check(r.returncode == 1 and "%s: " % path in r.stderr and why in r.stderr and
              "config-ok" not in r.stdout + r.stderr,
              "%s: --check-config: %r %r" % (name, r.returncode, r.stderr[-300:]))
        with open(path, "rb") as f:
            check(f.read() == data, "%s: untouched by --check-config" % name)

    # Good files: config-ok, and a missing secret is not made by a check.
    io = os.path.join(env.dir, "good")
    os.makedirs(io)
    with open(os.path.join(io, "relay_letters.json"), "w") as f:
        f.write('{"alice": "a", "bob": "b"}')
    r = subprocess.run([LOBBY_BIN, "host", "--relay-only", "--io-dir", io, "--check-config"],
                       capture_output=True, text=True, timeout=10)
    check(r.returncode == 0 and "config-ok mode=relay" in r.stdout + r.stderr,
          "good files: %r %r" % (r.returncode, r.stderr))
    check(sorted(os.listdir(io)) == ["relay_letters.json"], "a check wrote %r" % os.listdir(io))

    # put-save into a relay's io dir, the relay running.
    io = os.path.join(env.dir, "relay-io")
    relay = Lobby(env, "host", name="relay", args=["--relay-only"], io=io)
    code = relay.wait_code()
    d = os.path.join(env.dir, "saves")
    first = save(d, "first")
    with open(os.path.join(d, "first.jpg"), "wb") as f:
        f.write(b"jpeg" * 100)
    r = put(io, first)
    check(r.returncode == 0, "put-save: %r" % r.stderr)
    check(sha(os.path.join(io, "incoming_save.sav")) == sha(first), "the world landed")
    check(os.path.exists(os.path.join(io, "incoming_save.jpg")), "with its picture")
    nomod = save(d, "nomod", mod=False)
    r = put(io, nomod)
    check(r.returncode == 1 and b"without the" in r.stderr, "no mod refused: %r" % r.stderr)
    big = save(d, "big", size=2 << 20)
    r = put(io, big, "--max-save", str(1 << 20))
    check(r.returncode == 1 and b"over --max-save" in r.stderr, "too big refused: %r" % r.stderr)
    check(sha(os.path.join(io, "incoming_save.sav")) == sha(first), "the world as it was")
    second = save(d, "second")
    r = put(io, second)
    check(r.returncode == 0, "put-save: %r" % r.stderr)
    check(not os.path.exists(os.path.join(io, "incoming_save.jpg")), "the old picture went")
    check(not [f for f in os.listdir(io) if ".put." in f], "no temporary left")
    alice = Lobby(env, "join", code=code, name="alice")
    alice.wait_event(lambda e: e == {"type": "start", "save": True}, 30, "alice's start")
    check(sha(os.path.join(alice.io, "incoming_save.sav")) == sha(second),
          "the running relay served the new world")


run(scenario)
