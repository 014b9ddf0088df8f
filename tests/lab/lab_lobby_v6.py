#!/usr/bin/python3
"""Lab: IPv6 where IPv4 cannot get through.

Every site sits behind a symmetric NAT, so no IPv4 punch can work, and the
lab master's relay ports are dropped in its namespace, so no relay can
either: whatever connects, connects over IPv6 (2001:db8::/32, routed, no
NAT66). Sites a and b have v6="open", f and g v6="firewall" (a home
router's stateful filter: established/related only).

(a) open: bob on b joins alice on a with --rendezvous off (no knock, no
    relay): his race dials alice's v6 candidate (her code carries
    [2001:db8:A::10]:29471, the port of her IPv4 socket) and gets in over
    it; game frames both ways through bridges and a 4 MiB save, sealed,
    over that path, byte-identical;
(b) firewalled: without the master nobody on g cannot get into fiona's
    lobby on f (her firewall drops his HELLOs) and gives up; gus on g gets
    in over v6 after his knock: fiona punches his v6 candidate (the punch
    line names it), which opens her firewall to him, while his own
    firewall lets her HELLOs in on the entry his HELLOs made;
(c) v6-only joiners (no IPv4 at all) reaching dual-stack hosts: vera on b
    joins alice over her v6 (open) at once; otto on b joins fiona
    (firewalled) after knocking through the master's v6 listener
    (lab.internet.master_url6), which fiona polls over IPv4: one registry;
    their profiles carry their v6 candidate alone.
The dual TCP backup link (lobby_dual) comes up over v6 for all four, the
firewalled ones by simultaneous open. Then the hosts quit, every joiner exits 0, every namespace is deleted.
"""

import hashlib
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from lab import Lab  # noqa: E402
from harness import LOBBY_BIN, check, run, wait_for  # noqa: E402
from lobbylab import (bridge, close_lab, expect_failed, host_lobby, join_lobby,  # noqa: E402
                      observed, path_of, punches, wait_joined)

MiB = 1 << 20


def decoded(code):
    out = subprocess.run([LOBBY_BIN, "code", code], capture_output=True, text=True)
    check(out.returncode == 0, "code %s: %s" % (code, out.stderr))
    return dict(ln.split("=", 1) for ln in out.stdout.splitlines() if "=" in ln)


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


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


def names(lb):
    r = lb.roster()
    return r["players"] if r else None


def scenario(env):
    lab = Lab(env, deadline=140)
    # No relay can win: its ports are dropped where the master runs.
    lab.internet.pub.nft("table inet norelay {\n  chain input {\n"
                         "    type filter hook input priority -10; policy accept;\n"
                         "    udp dport 29600-29699 counter drop\n  }\n}\n")
    a = lab.site("a", kind="symmetric", v6="open")
    b = lab.site("b", kind="symmetric", v6="open")
    f = lab.site("f", kind="symmetric", v6="firewall")
    g = lab.site("g", kind="symmetric", v6="firewall")
    ha, hf = a.host("alice"), f.host("fiona")
    hb, hv, ho = b.host("bob"), b.host("vera", v6only=True), b.host("otto", v6only=True)
    hg, hn = g.host("gus"), g.host("nobody")

    bh = bridge(lab, ha, 1, send=200, rate=100, duration_ms=6000, wait_go=True)
    alice = host_lobby(lab, ha, "alice", bridge=bh)
    fiona = host_lobby(lab, hf, "fiona")
    for lb, h in ((alice, ha), (fiona, hf)):
        prof = observed(lb)
        check(prof["symmetric"] == "1" and prof["v6"] == "[%s]:29471" % h.addr6,
              "%s's profile %r" % (lb.name, prof))
        c = decoded(lb.code)
        check(c.get("v6") == "[%s]:29471" % h.addr6 and c.get("public_v4") and c.get("lan_v4"),
              "%s's code: %r" % (lb.name, c))

    # Everyone at once.
    bb = bridge(lab, hb, 2, send=200, rate=100, duration_ms=6000, wait_go=True)
    bob = join_lobby(lab, hb, alice.code, "bob", rendezvous=False, bridge=bb)
    # The later --rendezvous wins: the master's v6 URL for v6-only hosts.
    v6only = ["--rendezvous", lab.internet.master_url6]
    vera = join_lobby(lab, hv, alice.code, "vera", args=v6only)
    otto = join_lobby(lab, ho, fiona.code, "otto", args=v6only)
    gus = join_lobby(lab, hg, fiona.code, "gus")
    nobody = join_lobby(lab, hn, fiona.code, "nobody", rendezvous=False, args=["--timeout", "5"])

    # (a) open x open, no knock.
    ip, port, secs, after_ms = wait_joined(bob, 20)
    check(path_of(lab, alice, ip) == "v6" and port == 29471,
          "bob's path: %s:%d (wanted alice's [%s]:29471)" % (ip, port, ha.addr6))
    check(bob.grep(r"\bdial-target target=\[%s\]:29471$" % ha.addr6), "bob dialled alice's v6")
    check(not bob.grep(r"\bknock n="), "bob did not knock (--rendezvous off)")
    env.log("(a) v6 open: bob in after %.2f s (%d ms after his first HELLO)" % (secs, after_ms))

    # (c) a v6-only joiner, open host: at once, over v6.
    ip, port, secs, _ = wait_joined(vera, 20)
    check(path_of(lab, alice, ip) == "v6", "vera's path: %s:%d" % (ip, port))
    pv = observed(vera)
    check(pv["lan"] == "-" and pv["public"] == "-" and pv["v6"].startswith("[%s]:" % hv.addr6),
          "vera's profile: %r" % pv)
    env.log("(c) v6-only vera in after %.2f s" % secs)

    # (b) the firewall: nobody cannot get in; gus through his knock.
    ev = expect_failed(nobody, 20)
    check("host" in ev.get("detail", "") or "reach" in ev.get("detail", ""),
          "nobody's failed status says why: %r" % ev)
    ip, port, secs, after_ms = wait_joined(gus, 30)
    check(path_of(lab, fiona, ip) == "v6" and port == 29471, "gus's path: %s:%d" % (ip, port))
    check(gus.grep(r"\bknock n=1 "), "gus knocked")
    # The firewall let him in only after his knock: the host punched first.
    tr = wait_for(lambda: (gus.state() or {}).get("traversal"), 5, "gus's traversal")
    check(tr["ms"]["knock"] is not None and tr["ms"]["host_punched"] is not None and
          tr["ms"]["knock"] <= tr["ms"]["host_punched"] <= tr["ms"]["connected"],
          "gus in before his knock (the firewall let him?): %r" % tr["ms"])
    pg = observed(gus)
    lines = punches(fiona)
    check(any("[%s]:%s" % (hg.addr6, pg["v6"].rsplit(":", 1)[1]) in ln for ln in lines),
          "fiona punched gus's v6 %s: %r" % (pg["v6"], lines))
    env.log("(b) v6 firewall: gus in after %.2f s (%d ms after his first HELLO)" % (
        secs, after_ms))

    # (c) a v6-only joiner, firewalled host: the knock over the master's v6.
    ip, port, secs, _ = wait_joined(otto, 30)
    check(path_of(lab, fiona, ip) == "v6", "otto's path: %s:%d" % (ip, port))
    check(otto.grep(r"\bknock n=1 "), "otto knocked")
    check(not otto.grep(r"\bknock-fail "), "otto's knocks reached the master over v6")
    po = observed(otto)
    check(any(po["v6"] in ln for ln in punches(fiona)), "fiona punched otto's %s" % po["v6"])
    env.log("(c) v6-only otto in after %.2f s through a knock over v6" % secs)

    for who in (bob, vera, gus, otto):
        check(not who.grep(r"\brelay-bound "), "%s: no relay was bound" % who.name)
    n = lab.internet.pub.nft_list("table", "inet", "norelay")
    env.log("relay ports: %s" % " ".join(n.split("counter")[1].split()[:4]))
    for h, want in ((alice, ["alice", "bob", "vera"]), (fiona, ["fiona", "gus", "otto"])):
        wait_for(lambda: names(h) == want, 10, "%s's roster" % h.name)
    # The dual TCP backup link over v6 too: straight in through alice's
    # open router; through fiona's firewall by the simultaneous open (both
    # ends dial from their lobby port every second, each SYN opening its
    # own firewall for the other's).
    for j, h, how in ((bob, ha, "open"), (vera, ha, "open"), (gus, hf, "firewall"),
                      (otto, hf, "firewall")):
        m = j.wait_line(r"dual-link-up peer=\[%s\]:29471 .*how=\"([^\"]*)\"" % h.addr6, 35)
        env.log("dual TCP link over v6 (%s), %s -> %s: %s" % (how, j.name, h.name, m.group(1)))
    gus.command(cmd="chat", text="through the v6 firewall")
    otto.wait_event(lambda e: e.get("type") == "chat" and e.get("text") ==
                    "through the v6 firewall", 10, "gus's chat at otto")

    # Game frames and a save over v6.
    bh.go()
    bb.go()
    rh, rb = bh.result(), bb.result()
    got_b = rb["from"].get(1, {}).get("frames", 0)
    got_h = rh["from"].get(2, {}).get("frames", 0)
    check(got_b >= 190 and got_h >= 190, "frames over v6: bob got %d, alice got %d of 200" % (
        got_b, got_h))
    env.log("frames over v6: bob got %d/200, alice %d/200" % (got_b, got_h))
    sav = make_save(os.path.join(env.dir, "save"), 4 * MiB)
    alice.command(cmd="start", save=sav)
    for j in (bob, vera):
        j.wait_event(lambda e: e == {"type": "start", "save": True}, 60, "%s's start" % j.name)
        for name, src in (("incoming_save.sav", sav), ("incoming_save.sav.lua", sav + ".lua"),
                          ("incoming_save.jpg", os.path.join(os.path.dirname(sav), "world.jpg"))):
            check(sha(os.path.join(j.io, name)) == sha(src), "%s: %s differs" % (j.name, name))
        tcp = any(e.get("state") == "tcp" for e in j.events("transfer"))
        env.log("4 MiB save to %s over v6 (%s)" % (j.name, "bulk TCP" if tcp else "UDP"))

    for h in (alice, fiona):
        h.command(cmd="quit")
    for h in (alice, fiona):
        check(h.wait_exit(10) == 0, "%s exit status" % h.name)
    for j in (bob, vera, gus, otto):
        check(j.wait_exit(15) == 0, "%s exit status after the host quit" % j.name)
    close_lab(lab)


if __name__ == "__main__":
    run(scenario)
