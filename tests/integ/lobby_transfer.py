#!/usr/bin/env python3
"""The save transfer, netpunch's --selftest-transfer matrix on loopback.

A host and two joiners (alice, bob, carol); the host starts with a save
(world.sav of random bytes, its world.sav.lua and world.jpg): fbegin, NPF1
chunks as plain D frames, facks, fdone. Over UDP only (--bulk-tcp off, as
netpunch's self-test turns BULK_TCP off): clean 20 MiB, clean 16 MiB,
12 MiB with 8 % loss, 10 MiB with 15 % loss, the loss switched on (netsim,
on everything each lobby sends) only after both joined; once with
netpunch's protocol alone (--fast-transfer off: what a netpunch peer gets)
and once with rally's extension (docs/transfer.md), each checked to be the
one that ran. Then 64 MiB with
the bulk TCP channel, and 8 MiB with a TCP listener no one can reach (a
namespace of the test's own drops its SYNs), which goes over UDP. Each
asserts, as netpunch's self-test does: both joiners' three files
byte-identical to the host's, save_ready names incoming_save and lists
incoming_save.sav, the host reported done for each peer and started after
both, both joiners started with save true, and TCP used exactly when it
could be. Then a round in which carol cannot take the save (her io dir is
a 1 MiB tmpfs: the disk is full), which surfaces as netpunch words it and
starts nobody, and a retry once her disk has room, which starts everyone.
The host's events follow netpunch's: each peer's done, then its "save
received, loading" roster, then the start once every peer is in; we cannot
read a save's mods, so every START says so beside the host (a notice) and
to everyone (a MULTIPLAYER chat), and later rosters say the list is
unknown, which each joiner says once. A save whose .sav.lua lacks
["lockstep.lua"] (made without the mod) is refused before anything is sent,
its chat at most once a minute; one without a .sav.lua is shared anyway.
Loopback candidates only, no STUN, no UPnP, no master."""

import hashlib
import os
import re
import subprocess
import time

from harness import Lobby, Netns, check, run, wait_for

MiB = 1 << 20


def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def make_save(d, size):
    os.makedirs(d, exist_ok=True)
    sav = os.path.join(d, "world.sav")
    with open(sav, "wb") as f:
        f.write(os.urandom(size))
    with open(sav + ".lua", "wb") as f:
        f.write(b'["lockstep.lua"] = { }\n-- meta\n' + os.urandom(2048))
    with open(os.path.join(d, "world.jpg"), "wb") as f:
        f.write(os.urandom(4096))
    return sav


def lobby_set(env, tag, io=None, host_args=(), prefix=(), fast=True):
    more = () if fast else ("--fast-transfer", "off")
    host = Lobby(env, "host", name="alice", proc_name="host-%s" % tag,
                 args=tuple(host_args) + more, argv_prefix=prefix)
    code = host.wait_code()
    bob = Lobby(env, "join", code=code, name="bob", proc_name="bob-%s" % tag, args=more,
                argv_prefix=prefix)
    bob.wait_status("connected", "^joined the host$")
    carol = Lobby(env, "join", code=code, name="carol", proc_name="carol-%s" % tag, io=io,
                  args=more, argv_prefix=prefix)
    carol.wait_status("connected", "^joined the host$")
    wait_for(lambda: (host.roster() or {}).get("players") == ["alice", "bob", "carol"], 5,
             "the host's roster")
    return host, bob, carol


def netsim(lobbies, loss):
    for l in lobbies:
        mark = len(l.output())
        with open(os.path.join(l.io, "tpf2mp_netsim.txt"), "w") as f:
            f.write("loss=%s\n" % loss)
        l.command(cmd="netsim")
        l.wait_line(r"netsim loss=%.3f" % loss, start=mark)


def check_round(host, joiners, sav, tcp=False):
    d = os.path.dirname(sav)
    want = {"incoming_save.sav": sha(sav), "incoming_save.sav.lua": sha(sav + ".lua"),
            "incoming_save.jpg": sha(os.path.join(d, "world.jpg"))}
    for j in joiners:
        for name, digest in want.items():
            check(sha(os.path.join(j.io, name)) == digest, "%s: %s differs" % (j.name, name))
        ready = j.events("save_ready")[-1]
        check(ready["name"] == "incoming_save" and "incoming_save.sav" in ready["files"] and
              ready["dir"] == os.path.realpath(j.io), "%s save_ready %r" % (j.name, ready))
        check(not [n for n in os.listdir(j.io) if n.endswith(".tmp")],
              "%s left temporaries: %r" % (j.name, os.listdir(j.io)))
    # The host settles once every fdone is in (one may be lost to netsim
    # and come again 0.2 s later) and it has started.
    wait_for(lambda: host.events("start"), 10, "the host's start")
    evs = host.events()
    done = [i for i, e in enumerate(evs) if e.get("type") == "transfer" and
            e.get("state") == "done"]
    starts = [i for i, e in enumerate(evs) if e.get("type") == "start"]
    check(len(done) == len(joiners), "host done events: %r" % [evs[i] for i in done])
    check(starts and evs[starts[-1]] == {"type": "start", "save": True} and
          starts[-1] > done[-1], "the host's start: %r" % [evs[i] for i in starts])
    # Each peer's done, then its roster saying so, all before the start.
    for j in joiners:
        who = j.roster()["you"]
        d = [i for i in done if evs[i]["peer"] == who]
        r = [i for i, e in enumerate(evs) if e.get("type") == "roster" and
             e["stages"].get(who) == "save received, loading"]
        check(d and r and d[0] < r[0] < starts[-1], "%s: done %r, roster %r, start %r" % (
            who, d, r[:1], starts[-1:]))
    # The mods of the save are unknown here: said once for this START.
    name = os.path.basename(sav)
    notes = [e for e in evs if e.get("type") == "chat" and e.get("from") == "MULTIPLAYER"]
    check(len(notes) == 2 and "ts" not in notes[0] and "ts" in notes[1] and
          notes[0]["text"].startswith("Could not read which mods %s needs;" % name) and
          notes[1]["text"].startswith("The host could not read which mods %s needs:" % name),
          "the host's mods notes %r" % notes)
    unknown = ("The host could not read which mods its save needs, so none can be offered to "
               "you. If your game refuses the save, install the host's mods by hand.")
    for j in joiners:
        wait_for(lambda: [e["text"] for e in j.events("chat") if e["from"] == "MULTIPLAYER"]
                 == [notes[1]["text"], unknown], 10,
                 "%s: the host's chat, then unknown mods said once" % j.name)
    for j in joiners:
        j.wait_event(lambda e: e == {"type": "start", "save": True}, 10, "start save true")
    tcp_sends = [e for e in evs if e.get("type") == "transfer" and e.get("state") == "tcp"]
    for j in joiners:
        got = [e for e in j.events("transfer") if e.get("state") == "tcp"]
        check(len(got) == (1 if tcp else 0), "%s tcp events: %r" % (j.name, got))
    check(len(tcp_sends) == (len(joiners) if tcp else 0), "host tcp events: %r" % tcp_sends)


def quit_all(lobbies):
    for l in lobbies:
        l.command(cmd="quit")
    for l in lobbies:
        check(l.wait_exit(10) == 0, "%s exit status" % l.name)


def matrix_run(env, tag, size, loss, tcp=False, host_args=("--bulk-tcp", "off"), prefix=(),
               fast=True):
    host, bob, carol = lobby_set(env, tag, host_args=host_args, prefix=prefix, fast=fast)
    sav = make_save(os.path.join(env.dir, "save-" + tag), size)
    if loss:
        netsim((host, bob, carol), loss)
    t0 = time.monotonic()
    host.command(cmd="start", save=sav)
    for j in (bob, carol):
        j.wait_event(lambda e: e.get("type") == "save_ready", 120, "save_ready")
    secs = time.monotonic() - t0
    check_round(host, (bob, carol), sav, tcp=tcp)
    # Which transfer ran: rally's between two rally-lobbies (60 KiB chunks
    # on loopback), netpunch's (8 KiB) when either side turned it off.
    for j in (bob, carol):
        begin = j.grep(r"xfer-recv-begin ")[-1]
        want = "chunk=61440 .*rally=1" if fast else "chunk=8192 .*rally=0"
        check(re.search(want, begin), "%s: %s" % (j.name, begin))
    print("[xfer:%s] OK  (%d MB, loss=%d%%, %.2fs, ~%.1f MB/s to 2 peers)" % (
        tag, size // MiB, int(loss * 100), secs, size / MiB / secs), flush=True)
    quit_all((host, bob, carol))


def fail_then_retry(env):
    small = os.path.join(env.dir, "io-carol-small")
    os.makedirs(small)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", small], check=True)
    env.cleanups.append(lambda: subprocess.run(["umount", "-l", small]))
    host, bob, carol = lobby_set(env, "fail", io=small)
    sav = make_save(os.path.join(env.dir, "save-fail"), 4 * MiB)
    host.command(cmd="start", save=sav)
    st = host.wait_event(lambda e: e.get("type") == "status" and e.get("state") == "failed",
                         20, "the failed round")
    check(st["detail"] == "save transfer failed for carol -- press START GAME to retry",
          "failure text %r" % st["detail"])
    fail = carol.wait_event(lambda e: e.get("type") == "status" and e.get("state") == "failed",
                            5, "carol's failure")
    check(fail["detail"].startswith("save transfer failed: write error:") and
          "No space left on device" in fail["detail"], "carol: %r" % fail["detail"])
    bob.wait_event(lambda e: e.get("type") == "save_ready", 10, "bob's save_ready")
    # Nobody starts: not the host, not bob who verified, not carol.
    host.wait_event(lambda e: e.get("type") == "transfer" and e.get("peer") == "carol" and
                    e.get("state") == "failed", 5, "carol failed on the host")
    for l in (host, bob, carol):
        check(not l.events("start"), "%s started after a failed round" % l.name)
    check(not [n for n in os.listdir(small) if n.startswith("incoming_save")],
          "carol's full disk holds: %r" % os.listdir(small))
    # Room now: START again, everyone starts.
    subprocess.run(["mount", "-o", "remount,size=16m", small], check=True)
    host.command(cmd="start", save=sav)
    for j in (bob, carol):
        j.wait_event(lambda e: e == {"type": "start", "save": True}, 30, "start after retry")
    check(sha(os.path.join(small, "incoming_save.sav")) == sha(sav), "carol's retry")
    quit_all((host, bob, carol))


def refused_without_mod(env):
    host = Lobby(env, "host", name="alice", proc_name="host-nomod")
    code = host.wait_code()
    bob = Lobby(env, "join", code=code, name="bob", proc_name="bob-nomod")
    bob.wait_status("connected", "^joined the host$")
    sav = make_save(os.path.join(env.dir, "save-nomod"), 256 * 1024)
    with open(sav + ".lua", "wb") as f:
        f.write(b'["other.lua"] = { }\n')
    status = ("Not shared: 'world' does not have the Transport Fever 2 Multiplayer mod enabled "
              "(see chat)")
    chat = ("'world' was saved without the Transport Fever 2 Multiplayer mod, so nothing would "
            "sync. Load it, enable the mod in its Mods panel on the load screen, save, and press "
            "START GAME again.")
    for _ in range(2):
        host.command(cmd="start", save=sav)
    wait_for(lambda: [e for e in host.events("status") if e["detail"] == status] ==
             [{"type": "status", "state": "connected", "detail": status}] * 2, 5, "refused twice")
    check([e for e in host.events("chat")] == [{"type": "chat", "from": "MULTIPLAYER",
                                               "text": chat}], "the chat once a minute")
    check(not host.events("transfer") and not host.events("start"), "the host sent it anyway")
    # Without a .sav.lua there is no way to tell: shared.
    os.remove(sav + ".lua")
    host.command(cmd="start", save=sav)
    bob.wait_event(lambda e: e == {"type": "start", "save": True}, 20, "start save true")
    check(not [e for e in bob.events("chat") if "does not have the" in e["text"]],
          "bob said a save without a .sav.lua lacks the mod")
    check(bob.events("save_ready")[-1]["files"] == ["incoming_save.sav", "incoming_save.jpg"],
          "files %r" % bob.events("save_ready"))
    quit_all((host, bob))


def unreachable_tcp(env):
    """The host offers TCP on its port, but SYNs to it are dropped: each
    joiner gives up after three tries and the save comes over UDP."""
    ns = Netns(env, "x")
    port = 29471
    ns.run("nft", "-f", "-", check=True, input=(
        "table inet rallytest { chain in { type filter hook input priority 0; "
        "tcp dport %d drop; }; }" % port).encode())
    host_args = ("--local-port", str(port))
    matrix_run(env, "tcp-unreachable-udp-fallback", 8 * MiB, 0, tcp=False, host_args=host_args,
               prefix=ns.argv())


def scenario(env):
    refused_without_mod(env)
    # netpunch's protocol alone (what a netpunch peer gets), then rally's.
    for fast in (False, True):
        mode = "rally" if fast else "netpunch"
        matrix_run(env, mode + "-clean-1", 20 * MiB, 0, fast=fast)
        matrix_run(env, mode + "-clean-2", 16 * MiB, 0, fast=fast)
        matrix_run(env, mode + "-lossy-8pct", 12 * MiB, 0.08, fast=fast)
        matrix_run(env, mode + "-lossy-15pct", 10 * MiB, 0.15, fast=fast)
    matrix_run(env, "tcp-64MB", 64 * MiB, 0, tcp=True, host_args=())
    unreachable_tcp(env)
    fail_then_retry(env)


run(scenario)
