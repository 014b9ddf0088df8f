#!/usr/bin/env python3
"""A hostile joiner against a rally-lobby host's save round.

alice hosts (--bulk-tcp off: the round is UDP only), bob is a real
rally-lobby joiner, and mallory is tools/lobby-peer joining with alice's
code: a proper join, the welcome, then, once alice starts with a 32 MiB
save, every lie a receiver can tell (netpunch-wire.md §11): an fbegin_ack
for another sid; facks with base -1, 10**12 and total_chunks + 5; a fack
with 10,000 NACKs (negative, past 2**64, strings) and verifying as a
string; a fack claiming every chunk, an fdone ok:true for another sid and
an fdone ok:false final:false for the right one; then, every 50 ms, a
claim of every chunk and a restart from base 0, which would have the host
send her the whole save again each time. Asserted: the host never dies and
its memory stays bounded (VmRSS grows by less than 16 MiB over the hostile
traffic); bob's save lands whole (SHA-256), he reports save_ready and the
host reports him done; none of mallory's lies makes her done; the host
takes at most LOBBY_XFER_MAX_REWINDS (4) restarts from her (an honest
receiver restarts at most 3 times) and then fails her ("restarted too
often"), so the round resolves as lobby_host.c's xfer_resolved has it: a
failed target, so nobody starts and the host says "save transfer failed
for mallory". Then everyone quits cleanly."""

import hashlib
import json
import os
import subprocess
import threading
import time

from harness import BUILD, Lobby, Peer, Proc, check, run, wait_for

VERSION = "0.6.1.24"
MiB = 1 << 20
SAVE_BYTES = 32 * MiB


def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def vm_rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for ln in f:
            if ln.startswith("VmRSS:"):
                return int(ln.split()[1])
    raise AssertionError("no VmRSS for %d" % pid)


def transfer_events(host, peer, state=None):
    return [e for e in host.events("transfer") if e.get("role") == "send" and
            e.get("peer") == peer and "state" in e and (state is None or e["state"] == state)]


def hostile_nacks(n):
    """n NACK entries a receiver must never send: mostly out of the round
    (negative, 10**12 and past, beyond 2**64), strings, and a few valid
    seqs between them."""
    out = []
    for i in range(n):
        k = i % 6
        out.append(-1 - i if k == 0 else 10 ** 12 + i if k == 1 else 2 ** 64 + i if k == 2 else
                   10 ** 30 if k == 3 else str(i) if k == 4 else i)
    return out


def scenario(env):
    t0 = time.monotonic()
    host = Lobby(env, "host", name="alice", args=("--bulk-tcp", "off"))
    code = host.wait_code()
    bob = Lobby(env, "join", code=code, name="bob")
    bob.wait_status("connected", "^joined the host$")
    mal = Peer(env, code)
    mal.send({"t": "join", "version": VERSION, "name": "mallory", "mesh": False,
              "recovery": 0, "batches": 1})
    welcome = wait_for(lambda: mal.msgs(lambda m: m.get("t") == "welcome"), 5,
                       "mallory's welcome")[0]
    check(welcome["you"] == "mallory" and welcome["version"] == VERSION,
          "welcome %r" % welcome)
    wait_for(lambda: (host.roster() or {}).get("players") == ["alice", "bob", "mallory"], 5,
             "the host's roster")

    d = os.path.join(env.dir, "save")
    os.makedirs(d)
    sav = os.path.join(d, "world.sav")
    with open(sav, "wb") as f:
        f.write(os.urandom(SAVE_BYTES))
    want = sha(sav)
    host.command(cmd="start", save=sav)

    fb = wait_for(lambda: mal.msgs(lambda m: m.get("t") == "fbegin"), 15,
                  "mallory's fbegin")[0]
    sid, total = fb["sid"], fb["total_chunks"]
    check(fb["total_bytes"] == SAVE_BYTES and total == (SAVE_BYTES + fb["chunk"] - 1) //
          fb["chunk"], "fbegin %r" % fb)
    other = (sid + 1) & 0xffffffff
    rss0 = vm_rss_kib(host.pid)

    def fack(base, nack=(), verifying=False):
        return {"send": {"t": "fack", "sid": sid, "base": base, "nack": list(nack),
                         "verifying": verifying}}

    # 10**30 and 2**64 + i survive only as text: json-c would cut them.
    big = json.dumps({"t": "fack", "sid": sid, "base": 0, "nack": hostile_nacks(10000),
                      "verifying": "yes"})
    check(len(big) > 100000, "the big fack is %d bytes" % len(big))
    restarts = []
    for _ in range(12):
        restarts += [fack(total), fack(0), {"sleep_ms": 50}]
    mal.script({"send": {"t": "fbegin_ack", "sid": other, "need": [], "ask": False}},
               fack(-1), fack(10 ** 12), fack(total + 5),
               {"send_text": big},
               fack(total),
               {"send": {"t": "fdone", "sid": other, "ok": True}},
               {"send": {"t": "fdone", "sid": sid, "ok": False, "final": False}})
    # The host believes a claim of every chunk only once it has sent them
    # all (a claim past what was sent is no receiver of ours): the restarts
    # start when the last chunk has reached her, or a slow host would
    # ignore the first claims and count fewer restarts.
    last = '"seq": %d,' % (total - 1)
    wait_for(lambda: any(ln.startswith('{"chunk"') and last in ln for ln in mal.output()), 30,
             "the last chunk of the round to reach mallory")
    mal.script(*restarts, {"send": {"t": "chat", "text": "mallory is done lying"}})
    # The host relays the chat once it has read everything before it.
    wait_for(lambda: mal.msgs(lambda m: m.get("t") == "chat" and
                              m.get("text") == "mallory is done lying"), 10,
             "mallory's script to reach the host")
    env.daemons_alive(host, bob)
    rss1 = vm_rss_kib(host.pid)
    env.log("host VmRSS %d KiB before the hostile traffic, %d KiB after (+%d KiB)" % (
        rss0, rss1, rss1 - rss0))
    check(rss1 - rss0 < 16 * 1024, "the host grew by %d KiB" % (rss1 - rss0))
    # The log lines may still be on their way through the pipe: waited for.
    host.wait_line(r"xfer-send-rewind sid=%d name=\"mallory\" from=\d+ to=0$" % sid, 5)
    failed = wait_for(lambda: transfer_events(host, "mallory", "failed"), 10,
                      "mallory failed for restarting")[0]
    check(failed.get("detail") == "restarted too often", "mallory %r" % failed)
    rewinds = host.grep(r"xfer-send-rewind sid=%d name=\"mallory\"" % sid)
    check(1 <= len(rewinds) <= 4, "the host took %d restarts" % len(rewinds))

    ready = bob.wait_event(lambda e: e.get("type") == "save_ready", 25, "bob's save_ready")
    check(ready["files"] == ["incoming_save.sav"], "save_ready %r" % ready)
    check(sha(os.path.join(bob.io, "incoming_save.sav")) == want, "bob's save differs")
    wait_for(lambda: transfer_events(host, "bob", "done"), 10, "the host's done for bob")
    check(not transfer_events(host, "mallory", "done"), "the host reported mallory done")
    # xfer_resolved: a failed target means no start and a failed status.
    host.wait_status("failed", r"^save transfer failed for mallory -- press START GAME "
                     r"to retry$", timeout=10)
    check(not host.events("start"), "the host started after a failed round")
    check(not [m for m in mal.msgs(lambda m: m.get("t") == "start")], "mallory was started")
    mal.send({"t": "leave"})
    env.daemons_alive(host, bob)
    check(len(host.events("transfer")) < 1000, "transfer events: %d" % len(host.events("transfer")))
    env.log("mallory: %d lines received, %d bad" % (len(mal.output()), len(mal.bad())))

    mal.script({"quit": True})
    check(mal.wait_exit(5) == 0, "lobby-peer exit status")
    host.command(cmd="quit")
    bob.command(cmd="quit")
    for l in (host, bob):
        check(l.wait_exit(10) == 0, "%s exit status" % l.name)
    check(not host.grep(r"runtime error|AddressSanitizer|LeakSanitizer"), "sanitizer reports")
    env.log("scenario took %.1fs" % (time.monotonic() - t0))
    check(time.monotonic() - t0 < 30, "the scenario took %.1fs" % (time.monotonic() - t0))


run(scenario)
