#!/usr/bin/python3
"""Lab: two cone NATs, and two players behind one NAT.

Sites a and b sit behind port-restricted cone NATs (nftables masquerade,
the router dropping unsolicited WAN packets). The host (alice, on a) has
no UPnP. Checks:

- without the master, a joiner on b cannot get in (the host's NAT drops
  its HELLOs) and gives up with exit 1 after --timeout: the knock is what
  makes the next case work, not an open port;
- bob on b connects through the knock: his sealed knock reaches the host's
  poll, the host punches toward his public address, his HELLOs get through;
  the path is the host's public address, not a relay port;
- carol on a (same public address as the host) takes the LAN path at once,
  without knocking;
- the lobby works over those paths: roster, chat, game frames both ways
  through real bridges (tools/bridge-sim) on each side, start;
- the host quits: both joiners hear "bye" and exit 0;
- every namespace is deleted.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from lab import Lab  # noqa: E402
from harness import check, run, wait_for  # noqa: E402
from lobbylab import (bridge, close_lab, expect_failed, host_lobby, join_lobby,  # noqa: E402
                      observed, path_of, punches, wait_joined)


def names(lb):
    r = lb.roster()
    return r["players"] if r else None


def scenario(env):
    lab = Lab(env, deadline=150)
    a = lab.site("a", kind="cone")
    b = lab.site("b", kind="cone")
    ha, hc = a.host("alice"), a.host("carol")
    hb, hn = b.host("bob"), b.host("nobody")

    bh = bridge(lab, ha, 1, send=200, rate=100, duration_ms=6000, wait_go=True)
    host = host_lobby(lab, ha, "alice", bridge=bh)
    prof = observed(host)
    check(prof["lan"] == "%s:29471" % ha.addr, "host lan %r" % prof)
    check(prof["public"] == "%s:29471" % a.public_ip, "host public %r (a cone keeps the port)" % prof)
    check(prof["stun"] == "2/2" and prof["open"] == "0" and prof["symmetric"] == "0" and
          prof["cgnat"] == "0", "host profile %r" % prof)

    # No master: the cone drops the joiner's HELLOs; it gives up cleanly.
    j0 = join_lobby(lab, hn, host.code, "nobody", rendezvous=False, args=["--timeout", "5"])
    ev = expect_failed(j0, 20)
    check("host" in ev.get("detail", "") or "reach" in ev.get("detail", ""),
          "the failed status says why: %r" % ev)
    check(not host.grep(r"\bjoin peer="), "nobody got into the lobby")
    # Its traversal record says so: no path, every candidate unanswered.
    tr = j0.state().get("traversal")
    check(tr and tr["result"] == "failed" and tr["path"] is None and
          tr["detail"] == ev.get("detail") and tr["knocks"] == 0 and tr["plan"] == "race" and
          "--rendezvous off" in tr["plan_why"] and tr["candidates"] and
          all(c["result"] == "no answer" for c in tr["candidates"]) and
          tr["ms"]["failed"] is not None and tr["ms"]["connected"] is None,
          "the failed join's traversal record: %r" % tr)
    j0.wait_line(r"\btraversal result=failed path=- ", 5)

    # Through the knock.
    bb = bridge(lab, hb, 2, send=200, rate=100, duration_ms=6000, wait_go=True)
    j1 = join_lobby(lab, hb, host.code, "bob", bridge=bb)
    ip, port, secs, after_ms = wait_joined(j1, 30)
    check(path_of(lab, host, ip) == "direct" and port == 29471,
          "bob's path: %s:%d (wanted alice's public %s:29471)" % (ip, port, a.public_ip))
    check(j1.grep(r"\bknock n=1 "), "bob knocked")
    check(punches(host), "alice punched toward bob's knock")
    check(not j1.grep(r"relay-bound"), "no relay port was needed by the time bob got in")
    env.log("cone x cone: bob in after %.2f s (%d ms after his first HELLO)" % (secs, after_ms))

    # Same NAT: the LAN path, no knock.
    j2 = join_lobby(lab, hc, host.code, "carol")
    ip2, port2, secs2, _ = wait_joined(j2, 15)
    check(path_of(lab, host, ip2) == "lan" and port2 == 29471,
          "carol's path: %s:%d (wanted alice's LAN %s:29471)" % (ip2, port2, ha.addr))
    check(not j2.grep(r"\bknock n="), "carol did not need to knock")
    env.log("same NAT: carol in after %.2f s over the LAN" % secs2)

    for who in (host, j1, j2):
        wait_for(lambda: names(who) == ["alice", "bob", "carol"], 10, "%s's roster" % who.name)

    j1.command(cmd="chat", text="bob through the cone")
    for who in (host, j2):
        who.wait_event(lambda e: e.get("type") == "chat" and e.get("text") == "bob through the cone",
                       10, "bob's chat")

    # Game frames both ways across the two NATs.
    bh.go()
    bb.go()
    rh, rb = bh.result(), bb.result()
    check(rh["sent"] == 200 and rb["sent"] == 200, "sent %r %r" % (rh, rb))
    got_b = rb["from"].get(1, {}).get("frames", 0)
    got_h = rh["from"].get(2, {}).get("frames", 0)
    check(got_b >= 190 and got_h >= 190, "frames across: bob got %d, alice got %d of 200" % (
        got_b, got_h))
    env.log("frames: bob got %d/200 of alice's, alice %d/200 of bob's" % (got_b, got_h))

    host.command(cmd="start")
    for j in (j1, j2):
        j.wait_event(lambda e: e == {"type": "start", "save": False}, 10, "start")

    host.command(cmd="quit")
    check(host.wait_exit(10) == 0, "alice exit status")
    for j in (j1, j2):
        check(j.wait_exit(15) == 0, "%s exit status after the host quit" % j.name)
    close_lab(lab)


if __name__ == "__main__":
    run(scenario)
