#!/usr/bin/env python3
"""PUT is an upsert, so game servers that keep heartbeating survive a
restart of the repository: a PUT for a server the master does not know is
201 registered, for one it knows 202 updated. rally-master also snapshots
the list, so after a restart with its state directory the servers are
back at once (and PUT says 202); a master that lost its state (a fresh
directory, as the Go service after any restart) recreates them on the
next PUT (201)."""

import json
import os

from harness import Master, check, http_raw, run

BODY = {"name": "heartbeat server", "game_version": 2, "current_players": 1,
        "max_players": 6, "is_joinable": True}


def put(m, port, body=BODY):
    st, data, _ = http_raw("PUT", m.url("/servers/127.0.0.1:%d" % port),
                           body=json.dumps(body).encode())
    return st, json.loads(data)


def listed(m):
    st, data, _ = http_raw("GET", m.url("/servers"))
    check(st == 200, "GET /servers -> %s" % st)
    return {e["port"]: e for e in json.loads(data)}


def scenario(env):
    state = os.path.join(env.dir, "state-a")
    m = Master(env, args=["--stale", "60"], state_dir=state)
    check(put(m, 45677) == (201, {"result": "registered"}), "first PUT")
    check(put(m, 45677) == (202, {"result": "updated"}), "second PUT")
    check(put(m, 45680, dict(BODY, name="other")) == (201, {"result": "registered"}), "other")
    before = listed(m)
    check(set(before) == {45677, 45680}, "before restart: %r" % before)
    check(m.stop() == 0, "master did not stop cleanly")

    snap = json.load(open(os.path.join(state, "registry.json")))
    fug = snap["kinds"]["fugitive"]
    check(sorted(e["port"] for e in fug) == [45677, 45680], "snapshot: %r" % fug)
    check(all(set(e) >= {"ip", "port", "name", "game_version", "current_players",
                         "max_players", "is_joinable", "seen_ms"} for e in fug),
          "snapshot fields: %r" % fug)

    # Same state directory: restored, and a heartbeat is an update.
    m2 = Master(env, args=["--stale", "60"], state_dir=state, name="master2")
    after = listed(m2)
    check(set(after) == {45677, 45680}, "after restart: %r" % after)
    for port in after:
        a, b = before[port], after[port]
        check(all(a[k] == b[k] for k in a if k != "last_seen"), "restored %r as %r" % (a, b))
        check(b["last_seen"] == a["last_seen"], "last_seen changed: %r %r" % (a, b))
    check(put(m2, 45677) == (202, {"result": "updated"}), "PUT of a restored server")
    # A server the master never heard of: recreated by its heartbeat.
    check(put(m2, 45690) == (201, {"result": "registered"}), "PUT of an unknown server")
    check(set(listed(m2)) == {45677, 45680, 45690}, "list: %r" % listed(m2))
    env.daemons_alive(m2)

    # A master that lost its state (the Go service's case after any
    # restart): the next heartbeat of each server registers it again.
    m3 = Master(env, args=["--stale", "60"], state_dir=os.path.join(env.dir, "state-b"),
                name="master3")
    check(listed(m3) == {}, "a fresh master lists %r" % listed(m3))
    check(put(m3, 45677) == (201, {"result": "registered"}), "PUT after a lost state")
    check(put(m3, 45677) == (202, {"result": "updated"}), "PUT after that")
    check(set(listed(m3)) == {45677}, "list: %r" % listed(m3))
    env.daemons_alive(m2, m3)


if __name__ == "__main__":
    run(scenario)
