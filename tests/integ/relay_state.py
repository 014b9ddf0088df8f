#!/usr/bin/env python3
"""bans.json: a corrupt or unreadable file stops the relay at start with a
message naming it, the file untouched; the temporaries of a save cut short
by a crash are removed at start, nothing else, the bans intact; an
unwritable state dir or a full disk keeps the relay serving, the ban active
in memory, the API saying it was not saved and the old file intact; SIGHUP
reloads the file (a corrupt one is refused and the current bans kept)."""

import json
import os
import subprocess
import time

from harness import (RELAY_BIN, OAServer, Proc, Relay, check, file_digest, query, run, wait_for)


def start_fails(env, oa, state_dir, why):
    p = Proc(env, "relay-bad", [RELAY_BIN, "--listen", "127.0.0.1:0", "--server", "%s:%d" % oa.addr,
                                "--no-heartbeat", "--state-dir", state_dir])
    status = p.wait_exit(10)
    check(status != 0, "%s: the relay started anyway" % why)
    return p


def scenario(env):
    oa = OAServer(env)
    c = env.udp()

    # ---- corrupt files at start ----
    corrupt = {
        "not json": b"{\"version\":1,\"bans\":[",
        "wrong version": b'{"version":2,"bans":[]}',
        "bad ip": b'{"version":1,"bans":[{"ip":"1.2.3.999","reason":"x","created":1}]}',
        "binary": bytes(range(256)),
        "empty": b"",
    }
    for why, content in corrupt.items():
        d = os.path.join(env.dir, "corrupt-" + why.replace(" ", "-"))
        os.makedirs(d)
        path = os.path.join(d, "bans.json")
        with open(path, "wb") as f:
            f.write(content)
        before = file_digest(path)
        p = start_fails(env, oa, d, why)
        check(p.grep(r"bans-corrupt file=%s error=" % path), "%s: no message naming the file: %r" % (
            why, p.output()))
        check(file_digest(path) == before, "%s: the corrupt file was changed" % why)
        check(sorted(os.listdir(d)) == ["bans.json"], "%s: files appeared: %r" % (why, os.listdir(d)))
    d = os.path.join(env.dir, "dir-as-file")
    os.makedirs(os.path.join(d, "bans.json"))
    p = start_fails(env, oa, d, "bans.json is a directory")
    check(p.grep(r"bans-unreadable file=%s/bans.json" % d), "directory: %r" % p.output())

    # ---- a save cut short by a crash (kill -9) leaves its temporary beside
    # an intact bans.json: the next start removes those, and only those ----
    d = os.path.join(env.dir, "crashed")
    os.makedirs(d)
    path = os.path.join(d, "bans.json")
    with open(path, "w") as f:
        json.dump({"version": 1, "bans": [{"ip": "127.0.0.11", "reason": "kept",
                                           "created": int(time.time()), "expires": None}]}, f)
    for tmp in ("bans.json.tmp.Ab3xYz", "bans.json.tmp.000000"):
        with open(os.path.join(d, tmp), "w") as f:
            f.write('{"version":1,"ba')
    others = ["bans.json.tmp.keep", "bans.json.tmp.Ab3xYz.bak", "other.json.tmp.Ab3xYz", "notes"]
    for name in others:
        with open(os.path.join(d, name), "w") as f:
            f.write("not the relay's\n")
    before = file_digest(path)
    relay = Relay(env, oa.addr, state_dir=d, name="relay-crashed")
    check(sorted(os.listdir(d)) == sorted(["bans.json"] + others),
          "stale temporaries after the start: %r" % sorted(os.listdir(d)))
    check(file_digest(path) == before, "bans.json changed by the start")
    st, bans, _ = relay.api("GET", "/bans")
    check(st == 200 and [b["ip"] for b in bans] == ["127.0.0.11"], "bans after the crash: %r" % bans)
    check(query(env.udp("127.0.0.11"), relay.addr, "getchallenge", timeout=0.5) is None,
          "the ban kept across the crash is not applied")
    env.daemons_alive(relay)
    relay.stop()

    # ---- unwritable state dir: keeps serving, ban active, not saved ----
    blocker = os.path.join(env.dir, "a-file")
    with open(blocker, "w") as f:
        f.write("not a directory\n")
    relay = Relay(env, oa.addr, state_dir=os.path.join(blocker, "state"), name="relay-ro")
    check(relay.grep(r"state-dir-unusable dir=.*a-file/state"), "no warning about the state dir")
    v = env.udp("127.0.0.6")
    check(query(v, relay.addr, "getinfo", timeout=2), "relay not serving")
    st, body, _ = relay.api("PUT", "/bans/127.0.0.6", {"reason": "x"})
    check(st == 500 and "active but was not saved" in body["error"], "PUT -> %s %r" % (st, body))
    check(query(v, relay.addr, "getinfo", timeout=0.5) is None, "the unsaved ban is not active")
    check(query(c, relay.addr, "getinfo", timeout=2), "relay stopped serving others")
    check(relay.metrics()["rally_relay_state_write_errors_total"] >= 1, "write error not counted")
    env.daemons_alive(relay)
    relay.stop()

    # ---- full disk (a tiny tmpfs): the old file survives ----
    if os.geteuid() == 0:
        mnt = os.path.join(env.dir, "tiny")
        os.makedirs(mnt)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", mnt], check=True)
        env.cleanups.append(lambda: subprocess.run(["umount", "-l", mnt]))
        relay = Relay(env, oa.addr, state_dir=mnt, name="relay-full")
        st, _, _ = relay.api("PUT", "/bans/127.0.0.7", {"reason": "before full"})
        check(st == 201, "first ban -> %s" % st)
        path = os.path.join(mnt, "bans.json")
        good = file_digest(path)
        filler = os.path.join(mnt, "filler")
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError:
            pass
        finally:
            os.close(fd)
        st, body, _ = relay.api("PUT", "/bans/127.0.0.8", {"reason": "disk full " + "y" * 200})
        check(st == 500 and "No space left" in body["error"], "full disk PUT -> %s %r" % (st, body))
        check(file_digest(path) == good, "bans.json changed by a failed save")
        check(sorted(os.listdir(mnt)) == ["bans.json", "filler"], "temp files left: %r" % os.listdir(mnt))
        with open(path) as f:
            check([b["ip"] for b in json.load(f)["bans"]] == ["127.0.0.7"], "old file unreadable")
        os.unlink(filler)
        st, _, _ = relay.api("PUT", "/bans/127.0.0.9", {"reason": "after"})
        check(st == 201, "save after space came back -> %s" % st)
        with open(path) as f:
            ips = sorted(b["ip"] for b in json.load(f)["bans"])
        check(ips == ["127.0.0.7", "127.0.0.8", "127.0.0.9"], "bans after recovery: %r" % ips)
        relay.stop()
    else:
        print("SKIP full-disk part: mounting a tmpfs needs root")

    # ---- SIGHUP reload ----
    sd = os.path.join(env.dir, "hup")
    relay = Relay(env, oa.addr, state_dir=sd, name="relay-hup")
    h = env.udp("127.0.0.10")
    check(query(h, relay.addr, "getchallenge", timeout=2), "not served before reload")
    path = os.path.join(sd, "bans.json")
    with open(path, "w") as f:
        json.dump({"version": 1, "bans": [{"ip": "127.0.0.10", "reason": "by hand",
                                           "created": int(time.time()), "expires": None}]}, f)
    mark = len(relay.output())
    relay.signal(1)  # SIGHUP
    relay.wait_line(r"bans-reloaded file=.* count=1", start=mark)
    check(query(h, relay.addr, "getchallenge", timeout=0.5) is None, "reloaded ban not applied")
    with open(path, "w") as f:
        f.write("{corrupt")
    before = file_digest(path)
    mark = len(relay.output())
    relay.signal(1)
    relay.wait_line(r"bans-reload-refused file=.* kept=1", start=mark)
    check(query(h, relay.addr, "getchallenge", timeout=0.5) is None, "ban lost on a corrupt reload")
    check(file_digest(path) == before, "corrupt file touched on reload")
    check(query(c, relay.addr, "getchallenge", timeout=2), "relay stopped serving")
    env.daemons_alive(relay, oa)


run(scenario)
