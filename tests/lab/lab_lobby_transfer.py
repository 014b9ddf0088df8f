#!/usr/bin/python3
"""Lab: the save transfer across real NATs, a relay port and a bottleneck.

Sites a and b sit behind port-restricted cone NATs, site s behind a
symmetric one. alice hosts on a.

1. bob on b joins through the knock (a direct path across two cone NATs).
   A bottleneck inside site a's router: tbf at 20 Mbit/s with a 50 ms
   drop-tail queue on its WAN side (alice's uplink), netsim adding 10 ms of
   delay to what alice and bob send. Game frames (tools/bridge-sim, 100/s,
   bob's bridge echoing them) measure the round trip idle, then beside the
   transfer of a 12 MiB save (rally's extension: 1,350-byte chunks off
   loopback; the bulk TCP port is behind alice's NAT, so it goes over UDP):
   bob's three files are byte-identical, he and alice start with it, the
   rate is reported against the link (utilisation; at least half of it
   asserted, a floor on a shared machine: the figure is PERFORMANCE.md's),
   the game's frames keep flowing (at least 90 % of them) and their round
   trip is reported beside the idle one.
2. The link back to normal, carol on s can only come in through the
   master's relay port; she joins after the start, so alice serves her the
   last shared save over the relay, byte-identical.
Every namespace is deleted."""

import hashlib
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from lab import Lab  # noqa: E402
from harness import check, run, wait_for  # noqa: E402
from lobbylab import (bridge, close_lab, host_lobby, join_lobby, path_of,  # noqa: E402
                      wait_joined)

MiB = 1 << 20
LINK_MBIT = 20


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
        f.write(b'["lockstep.lua"] = { }\n' + os.urandom(2000))
    with open(os.path.join(d, "world.jpg"), "wb") as f:
        f.write(os.urandom(5000))
    return sav


def check_files(j, sav):
    d = os.path.dirname(sav)
    for name, src in (("incoming_save.sav", sav), ("incoming_save.sav.lua", sav + ".lua"),
                      ("incoming_save.jpg", os.path.join(d, "world.jpg"))):
        check(sha(os.path.join(j.io, name)) == sha(src), "%s: %s differs" % (j.name, name))


def stamp(line):
    m = re.match(r"^\d+-\d+-\d+T(\d+):(\d+):([\d.]+)Z", line)
    return int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3))


def round_secs(host, j, start):
    """From the host's fbegin for the round to j's last chunk."""
    begin = host.grep(r"xfer-send-begin ", start=start)[-1]
    done = j.grep(r"xfer-recv-complete ")[-1]
    return stamp(done) - stamp(begin)


def scenario(env):
    lab = Lab(env, deadline=150)
    a = lab.site("a", kind="cone")
    b = lab.site("b", kind="cone")
    s = lab.site("s", kind="symmetric")
    ha, hb, hc = a.host("alice"), b.host("bob"), s.host("carol")

    bh = bridge(lab, ha, 1)
    host = host_lobby(lab, ha, "alice", bridge=bh)
    bb = bridge(lab, hb, 2, echo=True, duration_ms=140000)
    bob = join_lobby(lab, hb, host.code, "bob", bridge=bb)
    ip, port, _, _ = wait_joined(bob, 30)
    check(path_of(lab, host, ip) == "direct", "bob's path %s:%d" % (ip, port))

    # The bottleneck: alice's uplink at 20 Mbit/s with a 50 ms queue; 10 ms
    # more delay on what alice and bob send.
    a.router.sh("tc", "qdisc", "add", "dev", "wan", "root", "tbf", "rate", "%dmbit" % LINK_MBIT,
                "burst", "32kbit", "latency", "50ms")
    for lb in (host, bob):
        m0 = len(lb.output())
        with open(os.path.join(lb.io, "tpf2mp_netsim.txt"), "w") as f:
            f.write("delay=0.01\n")
        lb.command(cmd="netsim")
        lb.wait_line(r"netsim loss=0\.000 delay_ms=10 ", start=m0)
    bh.result(5)

    def frames(secs_):
        """alice's bridge sends 100 frames a second for secs_ to bob's,
        which echoes them back (the round trip, measured by alice's)."""
        br = bridge(lab, ha, 1, port=bh.port, send=int(100 * secs_), rate=100,
                    duration_ms=int(secs_ * 1000) + 1500, wait_go=True)
        br.connect(host)
        br.go()
        return br

    idle = frames(3).result(15)
    check(idle.get("rtt", {}).get("n", 0) >= 270, "idle frames %r" % idle)

    # 1. Across two cone NATs (directly) and the bottleneck, the game's
    # frames flowing beside it.
    sav1 = make_save(os.path.join(env.dir, "save1"), 12 * MiB)
    busy = frames(6)
    mark = len(host.output())
    host.command(cmd="start", save=sav1)
    bob.wait_event(lambda e: e == {"type": "start", "save": True}, 60, "bob's start")
    check_files(bob, sav1)
    check(bob.grep(r"xfer-recv-begin .*chunk=1350 .*rally=1"), "bob's round was not rally's")
    busy = busy.result(30)
    secs = round_secs(host, bob, mark)
    util = 12 * MiB * 8 / secs / (LINK_MBIT * 1e6)
    env.log("cone x cone through %d Mbit/s: 12 MiB in %.2f s, %.1f Mbit/s of payload, %.0f %% "
            "of the link" % (LINK_MBIT, secs, 12 * MiB * 8 / secs / 1e6, 100 * util))
    env.log("game frames idle: rtt p50 %.1f ms p99 %.1f ms (%d); beside the transfer: p50 %.1f "
            "ms p99 %.1f ms (%d of 600)" % (
                idle["rtt"]["p50"] / 1000, idle["rtt"]["p99"] / 1000, idle["rtt"]["n"],
                busy["rtt"]["p50"] / 1000, busy["rtt"]["p99"] / 1000, busy["rtt"]["n"]))
    for ln in host.grep(r"xfer-send-stats ", start=mark):
        env.log("host: " + ln.split(" ", 1)[1])
    check(util >= 0.5, "the transfer used %.0f %% of the link" % (100 * util))
    check(busy.get("rtt", {}).get("n", 0) >= 540, "game frames beside the transfer %r" % busy)

    # 2. carol, behind a symmetric NAT, through the relay port, the link
    # back to what it was; she comes after the start and is sent the last
    # shared save.
    a.router.sh("tc", "qdisc", "del", "dev", "wan", "root")
    mark = len(host.output())
    carol = join_lobby(lab, hc, host.code, "carol")
    ip, port, _, _ = wait_joined(carol, 40)
    check(path_of(lab, host, ip) == "relay", "carol's path %s:%d" % (ip, port))
    carol.wait_event(lambda e: e == {"type": "start", "save": True}, 60, "carol's start")
    check_files(carol, sav1)
    secs = round_secs(host, carol, mark)
    env.log("through the relay port: 12 MiB to carol in %.2f s (%.1f MB/s)" % (
        secs, 12 * MiB / secs / 1e6))

    for lb in (host, bob, carol):
        lb.command(cmd="quit")
    for lb in (host, bob, carol):
        check(lb.wait_exit(15) == 0, "%s exit status" % lb.name)
    close_lab(lab)


if __name__ == "__main__":
    run(scenario)
