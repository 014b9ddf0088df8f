#!/usr/bin/python3
"""Lab: the NAT matrix on the fast schedule, each pair on its expected path,
and the traversal record that says so.

One lab, one host per pair, all joiners at once (fresh processes):

    pair          host site              joiner site   path     plan
    cone-cone     a cone                 b cone        punched  knock
    cone-sym      b cone                 s symmetric   relay    knock+relay
    sym-cone      s symmetric            a cone        relay    knock+relay
    sym-sym       t symmetric            s symmetric   relay    knock+relay
    cgnat-cone    c cone behind a sym-   a cone        relay    knock+relay
                  metric CGN
    cgnat-sym     d UPnP router behind   t symmetric   relay    knock+relay
                  a cone CGN (flags
                  itself CGNAT)
    upnp-cone     u UPnP (mapped)        b cone        public   direct
    np-cone-cone  a cone                 b cone,       punched  netpunch
                                         --schedule netpunch
    np-sym-cone   s symmetric            a cone,       relay    netpunch
                                         --schedule netpunch

For every joiner: it is in within the 40 s timeout; the host's address it
connected from is the one the path means (a relay port of the lab master,
or the host's public address); lobby_state.json's traversal, the
traversal event in lobby_out.jsonl and the traversal log line agree on the
path and plan; a knock went at once (fast schedule: before the first
second, where a direct race cannot win alone) or not at all (UPnP), and
after 4 s with the relay from the 2nd knock on netpunch's schedule (the
reference's timings, against our fast host); a relayed record says why,
naming the NAT class that forced it. The host's own traversal line names
the same path for that player. Then `rally-lobby observe` (words) and
`--json` on a symmetric site say what the profile means.

Timing goals are the benchmark's (tools/bench/lab-connect), not asserted
here beyond the schedule's own order of events.
"""

import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from lab import Lab  # noqa: E402
from harness import LOBBY_BIN, check, run, wait_for  # noqa: E402
from lobbylab import close_lab, host_lobby, join_lobby, lobby_args, path_of, wait_joined  # noqa: E402

# name, host site, joiner site, host UPnP, joiner schedule, path, plan, why
PAIRS = [
    ("cone-cone", "a", "b", False, "fast", "punched", "knock", None),
    ("cone-sym", "b", "s", False, "fast", "relay", "knock+relay", "you are behind a symmetric"),
    ("sym-cone", "s", "a", False, "fast", "relay", "knock+relay", "the host is behind a symmetric"),
    ("sym-sym", "t", "s", False, "fast", "relay", "knock+relay", "both sides"),
    ("cgnat-cone", "c", "a", False, "fast", "relay", "knock+relay", "the host is behind a symmetric"),
    ("cgnat-sym", "d", "t", True, "fast", "relay", "knock+relay", "both sides"),
    ("upnp-cone", "u", "b", True, "fast", "public", "direct", None),
    ("np-cone-cone", "a", "b", False, "netpunch", "punched", "netpunch", None),
    ("np-sym-cone", "s", "a", False, "netpunch", "relay", "netpunch", "the host is behind a symmetric"),
]

TRAV = re.compile(r"\btraversal result=(\S+) path=(\S+) via=(\S+) plan=(\S+) knocks=(\d+) "
                  r"relay_at_knock=(-?\d+)")


def scenario(env):
    lab = Lab(env, deadline=140)
    sites = {
        "a": lab.site("a", kind="cone"),
        "b": lab.site("b", kind="cone"),
        "s": lab.site("s", kind="symmetric"),
        "t": lab.site("t", kind="symmetric"),
        "c": lab.site("c", kind="cgnat", cgn="symmetric"),
        "d": lab.site("d", kind="cgnat", cgn="cone", upnp=True),
        "u": lab.site("u", kind="upnp"),
    }
    hosts, jwhere = {}, {}
    for i, (name, hs, js, upnp, _, _, _, _) in enumerate(PAIRS):
        hosts[name] = host_lobby(lab, sites[hs].host("h%d" % i), "h-" + name, upnp=upnp)
        jwhere[name] = sites[js].host("j%d" % i)
    joins = {}
    for name, _, _, _, sched, _, _, _ in PAIRS:
        joins[name] = join_lobby(lab, jwhere[name], hosts[name].code, "j-" + name,
                                 args=["--schedule", sched])

    table = []
    for name, hs, js, upnp, sched, want_path, want_plan, want_why in PAIRS:
        j, h = joins[name], hosts[name]
        ip, port, secs, after_ms = wait_joined(j, 40)
        coarse = path_of(lab, h, ip)
        want_coarse = "relay" if want_path == "relay" else "direct"
        check(coarse == want_coarse, "%s: connected over %s (%s:%d), wanted %s" % (
            name, coarse, ip, port, want_coarse))

        # The record follows the status that says "joined": the event
        # first, then lobby_state.json.
        j.wait_event(lambda e: e.get("type") == "traversal", 5, "the traversal event")
        st = wait_for(lambda: (j.state() or {}).get("traversal"), 5, "traversal in the state")
        evs = j.events("traversal")
        check(len(evs) == 1, "%s: traversal events %r" % (name, evs))
        ev = dict(evs[0])
        ev.pop("type")
        check(ev == st, "%s: the event and lobby_state.json differ:\n%r\n%r" % (name, ev, st))
        check(st["result"] == "connected" and st["path"] == want_path and
              st["plan"] == want_plan, "%s: traversal %s" % (name, json.dumps(st)))
        check(st["via"] == "%s:%d" % (ip, port), "%s: via %r, connected to %s:%d" % (
            name, st["via"], ip, port))
        won = [c for c in st["candidates"] if c["result"] == "won"]
        check(len(won) == 1 and won[0]["addr"] == st["via"], "%s: candidates %r" % (
            name, st["candidates"]))
        ms = st["ms"]
        check(ms["observed"] is not None and ms["race"] is not None and
              ms["connected"] is not None and ms["joined"] is not None and
              ms["race"] <= ms["connected"] <= ms["joined"], "%s: ms %r" % (name, ms))
        m = j.wait_line(TRAV.pattern, 5)
        check(m.group(1) == "connected" and m.group(2) == want_path and m.group(4) == want_plan,
              "%s: log line %r" % (name, m.group(0)))

        if want_plan == "direct":
            check(st["knocks"] == 0 and ms["knock"] is None, "%s: knocked: %r" % (name, st))
        elif want_plan == "netpunch":
            check(ms["knock"] is not None and ms["knock"] - ms["race"] >= 3900,
                  "%s: netpunch's first knock comes after 4 s: %r" % (name, ms))
            if want_path == "relay":
                check(st["relay_asked_at_knock"] == 2, "%s: relay from the 2nd knock: %r" % (
                    name, st))
        else:
            # The fast plan knocks at the race's start (the timer fires
            # with the first loop turn after it).
            check(ms["knock"] is not None and ms["knock"] - ms["race"] < 1000,
                  "%s: the knock did not go at once: %r" % (name, ms))
            if want_path == "relay":
                check(st["relay_asked_at_knock"] == 1, "%s: relay with the 1st knock: %r" % (
                    name, st))
        if want_why is not None:
            check(st["why_relayed"] and want_why in st["why_relayed"],
                  "%s: why relayed %r (wanted %r)" % (name, st["why_relayed"], want_why))
        else:
            check(st["why_relayed"] is None, "%s: why_relayed %r" % (name, st["why_relayed"]))
        # The host says the same of this player.
        hm = h.wait_line(r'\btraversal role=host peer="j-%s" path=(\S+) ' % re.escape(name), 5)
        check(hm.group(1) == want_path, "%s: the host says %r" % (name, hm.group(0)))
        table.append("%-13s %-8s %-12s %5.2f s  knocks=%d" % (name, want_path, want_plan, secs,
                                                           st["knocks"]))
    env.log("matrix:\n  " + "\n  ".join(table))

    # observe: in words, and as JSON.
    where = sites["t"].host("obs")
    argv = where.argv() + [LOBBY_BIN, "observe"] + lobby_args(lab, upnp=False)
    words = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    check(words.returncode == 0 and "a symmetric NAT" in words.stdout and
          "The internet sees you as 198.18.1." in words.stdout,
          "observe: %d %r %r" % (words.returncode, words.stdout, words.stderr[-400:]))
    js = subprocess.run(argv + ["--json"], capture_output=True, text=True, timeout=20)
    check(js.returncode == 0, "observe --json: %d %r" % (js.returncode, js.stderr[-400:]))
    prof = json.loads(js.stdout)
    check(prof["nat"] == "symmetric" and prof["symmetric"] is True and
          prof["public"].startswith(sites["t"].public_ip + ":") and
          prof["lan"].startswith(where.addr + ":"), "observe --json: %r" % prof)

    for lb in list(joins.values()) + list(hosts.values()):
        lb.stop()
    close_lab(lab)


run(scenario)
