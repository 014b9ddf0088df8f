#!/usr/bin/env python3
"""Resume (rally's extension, docs/transfer.md): a joiner that leaves in
the middle of a round keeps what it has, and when it comes back it is sent
only the rest.

alice hosts bob and carol with --max-rate 12 MB/s (so a 40 MiB round lasts
long enough to leave in the middle of, deterministically) over UDP
(--bulk-tcp off). Once bob has at least 30 % he quits: his io dir keeps
the chunks under .rally-partial.* beside the journal .rally-partial (and
no incoming_save.* that the game could load); the host reports him
dropped and starts carol when she is done. bob comes back (the same name,
the same io dir) after the start: the host serves him the last shared save
as a late player; his fbegin_ack names what he kept, both ends log the same
count, the host sends him no more first transmissions than the chunks he
lacks, and his three files are byte-identical to the host's, with nothing
kept left over. Then the journal is corrupted before a third visit: it is
dropped with a warning (a corrupt state file loses nothing but the head
start), and the whole save comes again and lands whole."""

import hashlib
import os
import re

from harness import Lobby, check, run, wait_for

MiB = 1 << 20
SIZE = 40 * MiB
RATE = 12000000


def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def make_save(d):
    os.makedirs(d, exist_ok=True)
    sav = os.path.join(d, "world.sav")
    with open(sav, "wb") as f:
        f.write(os.urandom(SIZE))
    with open(sav + ".lua", "wb") as f:
        f.write(b'["lockstep.lua"] = { }\n' + os.urandom(1000))
    with open(os.path.join(d, "world.jpg"), "wb") as f:
        f.write(os.urandom(3000))
    return sav


def kept_chunks(io):
    """The journal's ranges, summed; None when there is no journal."""
    path = os.path.join(io, ".rally-partial")
    if not os.path.exists(path):
        return None
    n = 0
    for line in open(path):
        m = re.match(r"^have (\d+) (\d+)$", line)
        if m:
            n += int(m.group(2)) - int(m.group(1))
    return n


def check_files(j, sav):
    d = os.path.dirname(sav)
    for name, src in (("incoming_save.sav", sav), ("incoming_save.sav.lua", sav + ".lua"),
                      ("incoming_save.jpg", os.path.join(d, "world.jpg"))):
        check(sha(os.path.join(j.io, name)) == sha(src), "%s: %s differs" % (j.name, name))
    left = [n for n in os.listdir(j.io) if n.startswith(".rally-partial") or
            n.endswith(".tmp")]
    check(not left, "%s left %r" % (j.name, left))



def scenario(env):
    host = Lobby(env, "host", name="alice", args=("--bulk-tcp", "off", "--max-rate", str(RATE)))
    code = host.wait_code()
    bob = Lobby(env, "join", code=code, name="bob")
    bob.wait_status("connected", "^joined the host$")
    carol = Lobby(env, "join", code=code, name="carol")
    carol.wait_status("connected", "^joined the host$")
    sav = make_save(os.path.join(env.dir, "save"))
    host.command(cmd="start", save=sav)

    # bob leaves once he has 30 % or more.
    bob.wait_event(lambda e: e.get("type") == "transfer" and e.get("pct", 0) >= 30, 30,
                   "bob at 30 %")
    pct = [e for e in bob.events("transfer") if "pct" in e][-1]
    blob = sum(os.path.getsize(p) for p in (sav, sav + ".lua",
                                            os.path.join(os.path.dirname(sav), "world.jpg")))
    check(0 < pct.get("bytes", 0) < blob and pct.get("total") == blob and
          pct.get("eta", -1) >= 0 and 0 < pct.get("rate", 0) <= 2 * RATE,
          "bob's progress event %r" % pct)
    bob.command(cmd="quit")
    check(bob.wait_exit(10) == 0, "bob's exit status")
    kept = kept_chunks(bob.io)
    check(kept is not None and kept > 0, "bob kept nothing: %r" % os.listdir(bob.io))
    check(not [n for n in os.listdir(bob.io) if n.startswith("incoming_save")],
          "bob left a save the game could load: %r" % os.listdir(bob.io))
    line = bob.grep(r"xfer-recv-kept sid=\d+ chunks=(\d+) of=(\d+)")[-1]
    total = int(re.search(r"of=(\d+)", line).group(1))
    check(kept == int(re.search(r"chunks=(\d+)", line).group(1)) and kept < total,
          "bob's journal says %d, his log %r" % (kept, line))
    env.log("bob kept %d of %d chunks" % (kept, total))

    dropped = wait_for(lambda: [e for e in host.events("transfer") if e.get("peer") == "bob" and
                                e.get("state") == "dropped"], 10, "bob dropped")[0]
    check(dropped.get("detail") == "dropped mid-transfer", "bob %r" % dropped)
    carol.wait_event(lambda e: e == {"type": "start", "save": True}, 60, "carol's start")
    check_files(carol, sav)

    # bob comes back after the start: a late player, served the last save,
    # resuming from what he kept.
    mark = len(host.output())
    bob2 = Lobby(env, "join", code=code, name="bob", proc_name="bob-again", io=bob.io)
    bob2.wait_event(lambda e: e == {"type": "start", "save": True}, 60, "bob's start")
    check_files(bob2, sav)
    res = bob2.grep(r"xfer-recv-resume sid=\d+ kept=(\d+) of=(\d+)")
    check(res, "bob did not resume")
    took = int(re.search(r"kept=(\d+)", res[-1]).group(1))
    # The ack names at most 256 runs of what is kept; the host takes them.
    check(0 < took <= kept, "bob took back %d of the %d he kept" % (took, kept))
    hres = host.grep(r"xfer-send-resume sid=\d+ name=\"bob\" kept=(\d+)", start=mark)
    check(hres and int(re.search(r"kept=(\d+)", hres[-1]).group(1)) == took,
          "the host's resume %r, bob's %d" % (hres, took))
    stats = host.grep(r"xfer-send-stats .*name=\"bob\"", start=mark)[-1]
    dgrams = int(re.search(r"dgrams=(\d+)", stats).group(1))
    retx = int(re.search(r"retx=(\d+)", stats).group(1))
    check(dgrams - retx <= total - took,
          "the host sent %d first transmissions for the %d bob lacked: %s" % (
              dgrams - retx, total - took, stats))
    env.log("bob resumed with %d of %d chunks; the host sent %d datagrams (%d again)" % (
        took, total, dgrams, retx))

    # A third visit with a corrupt journal: dropped, the whole save again.
    bob2.command(cmd="quit")
    check(bob2.wait_exit(10) == 0, "bob's exit status")
    for n in os.listdir(bob.io):
        if n.startswith("incoming_save"):
            os.unlink(os.path.join(bob.io, n))
    with open(os.path.join(bob.io, ".rally-partial.incoming_save.sav"), "wb") as f:
        f.write(os.urandom(4096))
    with open(os.path.join(bob.io, ".rally-partial"), "w") as f:
        f.write("rally-partial 1\nblob %s %d 61440\nhave 0 99999999\n" % ("0" * 64, SIZE))
    mark = len(host.output())
    bob3 = Lobby(env, "join", code=code, name="bob", proc_name="bob-third", io=bob.io)
    bob3.wait_event(lambda e: e == {"type": "start", "save": True}, 60, "bob's third start")
    check(bob3.grep(r"xfer-recv-partial-corrupt"), "the corrupt journal was not noticed")
    check(not bob3.grep(r"xfer-recv-resume "), "bob resumed from a corrupt journal")
    check_files(bob3, sav)
    check(not host.grep(r"xfer-send-resume .*name=\"bob\"", start=mark), "the host skipped chunks")

    for l in (host, carol, bob3):
        l.command(cmd="quit")
    for l in (host, carol, bob3):
        check(l.wait_exit(10) == 0, "%s exit status" % l.name)


run(scenario)
