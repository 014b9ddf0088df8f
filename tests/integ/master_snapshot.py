#!/usr/bin/env python3
"""The registry survives a restart: it is snapshotted atomically to the
state dir (every --snapshot-interval and at shutdown) and restored at start,
so the browser is not emptied; entries keep their age and still expire on
time. A corrupt snapshot gives a clear error, is moved aside untouched, and
nothing of it is loaded (not even its valid part); an unwritable state dir
leaves the master serving and counts the failed saves."""

import glob
import json
import os
import time

from harness import Master, check, file_digest, run, wait_for


def announce(master, i, **extra):
    body = {"id": "lobby%d" % i, "name": "Lobby %d" % i, "code": "CODE%d" % i, "players": i,
            "max": 8, "type": "host", "version": "0.6.1.24"}
    body.update(extra)
    st, resp, _ = master.call("POST", "/announce", body)
    check(st == 200, "announce %d -> %s %r" % (i, st, resp))


def names(master):
    st, body, _ = master.call("GET", "/list")
    check(st == 200, "GET /list -> %s" % st)
    return [r["name"] for r in body["servers"]], body


def scenario(env):
    sd = os.path.join(env.dir, "state")
    m = Master(env, args=["--snapshot-interval", "200"], state_dir=sd)
    for i in range(3):
        announce(m, i)
    path = os.path.join(sd, "registry.json")
    wait_for(lambda: os.path.exists(path) and "CODE2" in open(path).read(), 5,
             "the periodic snapshot")
    # The rows age a second before the restart (the master's own count).
    wait_for(lambda: all(r["age"] >= 1 for r in names(m)[1]["servers"]), 5,
             "the rows to be a second old")
    check(m.stop() == 0, "master exit status")
    snap = json.load(open(path))
    check(len(snap["kinds"]["lobbies"]) == 3, "snapshot: %r" % snap)

    m = Master(env, state_dir=sd, name="master2")
    m.wait_line(r"snapshot-loaded file=%s entries=3" % path)
    got, body = names(m)
    check(got == ["Lobby 2", "Lobby 1", "Lobby 0"], "after restart: %r" % got)
    check(all(r["age"] >= 1 for r in body["servers"]), "ages reset by the restart: %r" % body)
    check(body["servers"][0]["code"] == "CODE2" and body["servers"][0]["players"] == 2,
          "row content: %r" % body["servers"][0])
    check(m.metrics()['rally_master_entries{kind="lobbies"}'] == 3, "metrics after restore")
    m.stop()

    # Rows keep expiring across a restart: a 2 s TTL that runs out while
    # the master is down. The snapshot says when the row was last seen (wall
    # clock, as the master compares it at load); the restart waits until
    # that is more than the TTL ago, with 50 ms for the clocks' rounding.
    m = Master(env, args=["--lobby-ttl", "2000"], state_dir=sd, name="master3")
    announce(m, 9)
    m.stop()
    seen = [r["seen_ms"] for r in json.load(open(path))["kinds"]["lobbies"] if r["id"] == "lobby9"]
    check(seen, "lobby9 is not in the shutdown snapshot")
    wait_for(lambda: time.time() * 1000 > seen[0] + 2000 + 50, 5,
             "lobby9's 2 s TTL to run out while the master is down")
    m = Master(env, args=["--lobby-ttl", "2000"], state_dir=sd, name="master4")
    got, _ = names(m)
    check(got == [], "expired rows came back: %r" % got)
    m.stop()

    # A corrupt snapshot: clear error, moved aside untouched, start empty.
    for what, content in (("garbage", b"{\"version\":1,\"kinds\":{\"lobbies\":[{"),
                          ("half valid", json.dumps({"version": 1, "saved_ms": 1, "kinds": {"lobbies": [
                              {"seen_ms": int(time.time() * 1000), "id": "ok", "name": "Fine",
                               "code": "C", "players": 1, "max": 8, "type": "host",
                               "version": "", "locked": False, "from": "127.0.0.1:1"},
                              {"seen_ms": int(time.time() * 1000), "id": "bad", "name": "Broken",
                               "code": "C", "players": 99999, "max": 8, "type": "host",
                               "version": "", "locked": False, "from": "127.0.0.1:1"}]}}).encode()),
                          ("wrong version", b'{"version": 7, "kinds": {}}')):
        for old in glob.glob(path + ".corrupt-*"):
            os.unlink(old)
        with open(path, "wb") as f:
            f.write(content)
        digest = file_digest(path)
        m = Master(env, state_dir=sd, name="master-corrupt")
        m.wait_line(r"snapshot-corrupt file=%s error=\".+\" moved-to=%s\.corrupt-\d+ loaded=0" % (
            path, path))
        moved = glob.glob(path + ".corrupt-*")
        check(len(moved) == 1 and file_digest(moved[0]) == digest,
              "%s: the corrupt file was not kept as it was: %r" % (what, moved))
        got, _ = names(m)
        check(got == [], "%s: something was loaded: %r" % (what, got))
        announce(m, 5)
        env.daemons_alive(m)
        m.stop()
        check("CODE5" in open(path).read(), "%s: no fresh snapshot after the corrupt one" % what)

    # An unwritable state dir: keeps serving, counts the failed saves.
    blocker = os.path.join(env.dir, "file")
    open(blocker, "w").write("x")
    m = Master(env, args=["--snapshot-interval", "100"], state_dir=os.path.join(blocker, "s"),
               name="master-ro")
    m.wait_line(r"state-dir-unusable dir=.*file/s")
    announce(m, 7)
    wait_for(lambda: m.metrics().get('rally_master_snapshots_total{result="error"}', 0) >= 2, 5,
             "failed saves to be counted")
    check(names(m)[0] == ["Lobby 7"], "not serving with an unwritable state dir")
    env.daemons_alive(m)


run(scenario)
