#!/usr/bin/env python3
"""Fugitive servers that stop heartbeating are pruned once they have not
been seen for --stale seconds, and not before; one that keeps sending PUT
stays listed. (The Go service sweeps every stale/2, so it may list a dead
server for up to 1.5 x stale; we drop it within about a second.)"""

import json
import time

from harness import Master, check, http_raw, run, wait_for

STALE = 2
BODY = json.dumps({"name": "short lived", "game_version": 1, "current_players": 0,
                   "max_players": 4, "is_joinable": True}).encode()


def put(m, port):
    st, _, _ = http_raw("PUT", m.url("/servers/127.0.0.1:%d" % port), body=BODY)
    return st


def ports(m):
    return {e["port"] for e in json.loads(http_raw("GET", m.url("/servers"))[1])}


def scenario(env):
    m = Master(env, args=["--stale", str(STALE)])
    check(put(m, 45677) == 201 and put(m, 45678) == 201, "PUTs")
    t0 = time.monotonic()
    check(ports(m) == {45677, 45678}, "both listed")

    def gone():
        # 45678 keeps heartbeating, well within the threshold.
        check(put(m, 45678) == 202, "heartbeat refused")
        left = ports(m)
        check(45678 in left, "the heartbeating server was pruned")
        if 45677 in left:
            check(time.monotonic() - t0 < STALE + 1.5, "45677 still listed after %.1fs" %
                  (time.monotonic() - t0))
            return False
        return True

    wait_for(gone, STALE + 3, "the silent server to be pruned", interval=0.25)
    took = time.monotonic() - t0
    print("pruned after %.2f s (--stale %d)" % (took, STALE))
    check(took >= STALE - 0.1, "pruned after %.2fs, before --stale %d" % (took, STALE))
    mt = m.metrics()
    check(mt.get('rally_master_entries_expired_total{kind="fugitive"}', 0) >= 1, "not counted")
    check(mt.get('rally_master_entries{kind="fugitive"}') == 1, "entries gauge")
    # A pruned server that heartbeats again is simply recreated.
    check(put(m, 45677) == 201, "PUT after pruning is not 201")
    env.daemons_alive(m)


if __name__ == "__main__":
    run(scenario)
