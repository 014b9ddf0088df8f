#!/usr/bin/env python3
"""Log forwarding (netpunch-wire.md §7 log, §15 lobby_peers.log).

A host alice and a joiner bob, each with a --forward-log file: bob's log
lines and his file's new lines reach alice's lobby_peers.log tagged
"[bob]", alice's own lines and her file's tagged "[alice]"; a file that
existed at start is read from its end, one that appears later from its
start; lines over 240 characters are cut with "...". A hostile joiner
(tools/lobby-peer) floods log messages: at most 8 a second are taken, at
most 64 lines each, control characters blanked. Public IPv4 addresses are
masked in the logs (and in what is forwarded) unless TPF2MP_LOG_IPS=1;
tpf2mp_keep_logs.txt keeps the previous merged log and appends."""

import os
import re

from harness import Lobby, check, run, wait_for
from harness import Peer

VERSION = "0.6.1.24"


def peers_log(lb):
    try:
        with open(os.path.join(lb.io, "lobby_peers.log"), encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def tagged(lb, who):
    return [ln.split("] ", 1)[1] for ln in peers_log(lb).splitlines()
            if re.match(r"^\d\d:\d\d:\d\d \[%s\] " % re.escape(who), ln)]


def scenario(env):
    hfile = os.path.join(env.dir, "host-extra.log")
    bfile = os.path.join(env.dir, "bob-bridge.log")
    with open(hfile, "w") as f:
        f.write("old host line\n")
    host = Lobby(env, "host", name="alice", args=["--forward-log", hfile])
    code = host.wait_code()
    check(peers_log(host).startswith("# merged lobby log, started "), "banner: %r" %
          peers_log(host)[:80])
    bob = Lobby(env, "join", code=code, name="bob", args=["--forward-log", bfile])
    bob.wait_status("connected", "^joined the host$")
    with open(hfile, "a") as f:
        f.write("host tail line 1\n\n   \n")
    with open(bfile, "w") as f:
        f.write("bridge says hi\r\n" + "x" * 300 + "\n")
    # bob's own log, his file, alice's own log and file.
    wait_for(lambda: any('status state=connected detail="joined the host"' in ln
                         for ln in tagged(host, "bob")), 10, "bob's own lines in the merged log")
    wait_for(lambda: "[bob-bridge.log] bridge says hi" in tagged(host, "bob"), 10,
             "bob's forwarded file")
    wait_for(lambda: "[host-extra.log] host tail line 1" in tagged(host, "alice"), 10,
             "alice's forwarded file")
    wait_for(lambda: any(ln.startswith("join peer=") for ln in tagged(host, "alice")), 10,
             "alice's own lines")
    check(not [ln for ln in peers_log(host).splitlines() if "old host line" in ln],
          "a file that existed is read from its end")
    # The next line of that file may ride the next batch (1,000 bytes each).
    wait_for(lambda: [ln for ln in tagged(host, "bob") if ln.startswith("[bob-bridge.log] xxx")],
             10, "bob's long line")
    long = [ln for ln in tagged(host, "bob") if ln.startswith("[bob-bridge.log] xxx")]
    check(len(long) == 1 and len(long[0]) == 240 and long[0].endswith("..."),
          "the long line: %r" % long)

    # A hostile joiner: a flood of log messages, long lists, control bytes.
    mal = Peer(env, code)
    mal.send({"t": "join", "version": VERSION, "name": "mallory", "mesh": False,
              "recovery": 0, "batches": 1})
    wait_for(lambda: mal.msgs(lambda m: m.get("t") == "welcome"), 5, "mallory's welcome")
    mal.script(*[{"send": {"t": "log", "lines": ["flood %d" % i]}} for i in range(40)])
    # A second later the window is new: one message of 100 lines, 64 taken.
    mal.script({"sleep_ms": 1100}, {"send": {"t": "log", "lines": ["many %d" % i for i in range(100)]}})
    mal.send({"t": "log", "lines": ["evil\x01\x1b[2J\n12:00:00 [alice] forged", 7, "z" * 500]})
    mal.send({"t": "chat", "text": "after the logs"})
    host.wait_event(lambda e: e.get("type") == "chat" and e.get("text") == "after the logs", 10,
                    "mallory's chat after the logs")
    mlines = tagged(host, "mallory")
    floods = [ln for ln in mlines if ln.startswith("flood ")]
    many = [ln for ln in mlines if ln.startswith("many ")]
    env.log("mallory: %d of 40 flood messages taken, %d of 100 lines" % (len(floods), len(many)))
    # 8 a second (the burst may straddle two seconds), the rest dropped.
    check(1 <= len(floods) <= 16, "flood messages taken: %d" % len(floods))
    check(len(many) == 64 and many[-1] == "many 63", "lines of one message taken: %d" % len(many))
    evil = [ln for ln in mlines if ln.startswith("evil")]
    check(evil == ["evil  [2J 12:00:00 [alice] forged"], "the blanked line: %r" % evil)
    check(["z" * 240] == [ln for ln in mlines if ln.startswith("z")], "a peer's line is cut at 240")
    for ln in peers_log(host).splitlines():
        check("\x01" not in ln and "\x1b" not in ln, "a control byte in %r" % ln)
        check(not re.match(r"^12:00:00 \[alice\] forged", ln), "a forged line: %r" % ln)
    mal.script({"quit": True})

    # Masking: a host advertising a public LAN candidate (it sends nothing
    # to it) logs it as 198.51.100.x, in its log and in its merged log.
    masked = Lobby(env, "host", name="carol", log_ips=False,
                   args=["--lan-ip", "198.51.100.7:29999"], proc_name="lobby-masked")
    masked.wait_code()
    wait_for(lambda: any("lan=198.51.100.x:29999" in ln for ln in tagged(masked, "carol")), 10,
             "the masked address in carol's merged log")
    check(masked.grep(r"lan=198\.51\.100\.x:29999") and not masked.grep(r"198\.51\.100\.7"),
          "carol's log shows the address masked only")
    check(host.grep(r"127\.0\.0\.1"), "loopback addresses stay")
    masked.command(cmd="quit")
    masked.wait_exit(10)

    bob.command(cmd="quit")
    check(bob.wait_exit(10) == 0, "bob exit")
    wait_for(lambda: any("left lobby" in ln for ln in tagged(host, "bob")), 10,
             "bob's last words")
    host.command(cmd="quit")
    check(host.wait_exit(10) == 0, "host exit")
    before = peers_log(host)

    # Again in the same io dir: truncated without the switch, kept with it.
    with open(os.path.join(host.io, "tpf2mp_keep_logs.txt"), "w") as f:
        f.write("1\n")
    again = Lobby(env, "host", name="alice", io=host.io, proc_name="lobby-again")
    again.wait_code()
    text = peers_log(again)
    check(text.startswith(before) and
          "\n\n# merged lobby log, started " in text[len(before) - 1:] and
          "(tpf2mp_keep_logs.txt present: appending)" in text, "kept log: %r" % text[-200:])
    again.command(cmd="quit")
    again.wait_exit(10)
    os.remove(os.path.join(host.io, "tpf2mp_keep_logs.txt"))
    third = Lobby(env, "host", name="alice", io=host.io, proc_name="lobby-third")
    third.wait_code()
    check(peers_log(third).startswith("# merged lobby log, started ") and
          "old host line" not in peers_log(third) and "bob" not in peers_log(third).split("\n")[0],
          "truncated without the switch")
    check(len(peers_log(third)) < len(before), "the third run's log is new")
    third.command(cmd="quit")
    third.wait_exit(10)


if __name__ == "__main__":
    run(scenario)
