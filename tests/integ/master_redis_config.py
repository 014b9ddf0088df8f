#!/usr/bin/env python3
"""The --redis flags as an operator meets them: a password in the URL, a
bad URL, a bad prefix or node name, --redis-* without --redis and a user
without a password file are usage errors (exit 2, the reason named);
--check-config refuses a missing or empty password file (exit 1) and takes
a good one without connecting anywhere; --help documents every flag. A
master pointed at a Redis that is not there starts, serves from its own
registry, says "disconnected" on /healthz and logs redis-down once; when
a real redis-server (reached by a host name, resolved off the loop)
appears there, it connects and publishes what it held; a master on the
server's unix socket gets it. Without --redis,
/healthz is exactly as before and /metrics has no rally_master_redis_
line."""

import json
import os
import subprocess

from harness import MASTER_BIN, Master, RedisServer, check, http_raw, run, wait_for


def usage(env, args, msg):
    r = subprocess.run([MASTER_BIN, "--state-dir", os.path.join(env.dir, "x")] + args,
                       capture_output=True, text=True, timeout=20)
    check(r.returncode == 2 and msg in r.stderr,
          "%r: exit %s, stderr %r; want 2 and %r" % (args, r.returncode, r.stderr, msg))


def scenario(env):
    pw = os.path.join(env.dir, "pw")
    with open(pw, "w") as f:
        f.write("secret-pass\n")
    empty = os.path.join(env.dir, "empty")
    open(empty, "w").close()
    usage(env, ["--redis", "redis://u:pw@127.0.0.1:6379"], "no password in the URL")
    usage(env, ["--redis", "http://127.0.0.1:6379"], "only redis:// and unix: URLs")
    usage(env, ["--redis", "127.0.0.1"], "expected HOST:PORT")
    usage(env, ["--redis", "127.0.0.1:99999"], "bad port")
    usage(env, ["--redis", "127.0.0.1:6379", "--redis-prefix", "a:b"], "--redis-prefix a:b")
    usage(env, ["--redis", "127.0.0.1:6379", "--redis-node", ""], "--redis-node")
    usage(env, ["--redis-prefix", "x"], "the --redis-* flags need --redis")
    usage(env, ["--redis", "redis://me@127.0.0.1:6379"], "a Redis user needs")
    usage(env, ["--redis", "redis://me@127.0.0.1:6379", "--redis-user", "you",
                "--redis-password-file", pw], "the URL names user me")
    for bad, msg in ((os.path.join(env.dir, "none"), "redis-password-file-unreadable"),
                     (empty, "reason=empty")):
        r = subprocess.run([MASTER_BIN, "--check-config", "--udp", "127.0.0.1:0",
                            "--state-dir", os.path.join(env.dir, "x"), "--redis",
                            "127.0.0.1:6379", "--redis-password-file", bad],
                           capture_output=True, text=True, timeout=20)
        check(r.returncode == 1 and msg in r.stderr, "check-config %s: %s %r" % (
            bad, r.returncode, r.stderr))
    r = subprocess.run([MASTER_BIN, "--check-config", "--udp", "127.0.0.1:0",
                        "--state-dir", os.path.join(env.dir, "x"), "--redis",
                        "redis://me@127.0.0.1:6379/2", "--redis-password-file", pw],
                       capture_output=True, text=True, timeout=20)
    check(r.returncode == 0 and "config-ok" in r.stderr and "redis-up" not in r.stderr,
          "check-config: %s %r" % (r.returncode, r.stderr))
    h = subprocess.run([MASTER_BIN, "--help"], capture_output=True, text=True, timeout=10).stdout
    for flag in ("--redis URL", "--redis-password-file", "--redis-user", "--redis-prefix",
                 "--redis-timeout", "--redis-node"):
        check(flag in h, "--help lacks %s" % flag)

    # Without --redis: /healthz as before, no redis lines.
    plain = Master(env, state_dir=os.path.join(env.dir, "state-plain"), name="plain")
    st, data, _ = http_raw("GET", plain.url("/healthz"))
    check((st, data) == (200, b'{"status":"ok"}'), "plain healthz %r" % data)
    check(not [k for k in plain.metrics() if k.startswith("rally_master_redis_")],
          "redis metrics without --redis")

    # A Redis that is not there yet (by host name: resolved on the worker
    # thread), then there.
    rs = RedisServer(env, password="secret-pass")
    rs.signal(15)
    rs.wait_exit(10)
    # "127.B.C*256+D": not an address inet_pton takes, so the master
    # resolves it as a name (getaddrinfo reads the old inet_aton form; no
    # DNS query leaves the machine).
    o = [int(x) for x in rs.ip.split(".")]
    target = "127.%d.%d:%d" % (o[1], o[2] * 256 + o[3], rs.port)
    m = Master(env, args=["--redis", target, "--redis-password-file", pw, "--redis-node", "m"],
               state_dir=os.path.join(env.dir, "state-m"), name="m")
    m.wait_line(r"redis-down redis=\S+ error=", 10)
    st, data, _ = http_raw("POST", m.url("/announce"),
                           body=json.dumps({"id": "x1", "code": "C", "name": "held"}).encode(),
                           headers={"Content-Type": "application/json"})
    check(st == 200, "announce without Redis -> %s" % st)
    st, data, _ = http_raw("GET", m.url("/healthz"))
    check(json.loads(data) == {"status": "ok", "redis": "disconnected"}, "healthz %r" % data)
    wait_for(lambda: len(m.grep(r"redis-retry-fail ")) >= 2, 10, "two more attempts")
    check(len(m.grep(r"redis-down ")) == 1, "redis-down logged more than once")
    rs.restart(env)
    m.wait_line(r"redis-up ", 10)
    wait_for(lambda: len(rs.cmd("KEYS", "rally:reg:lobbies:*")) == 1, 3,
             "the lobby held while Redis was away, published")
    check(m.grep(r"redis-up redis=%s " % target.replace(".", r"\.")), "not the name")
    # The same server through its unix socket.
    u = Master(env, args=["--redis", "unix:" + rs.sock, "--redis-password-file", pw,
                          "--redis-node", "u"],
               state_dir=os.path.join(env.dir, "state-u"), name="u")
    u.wait_line(r"redis-synced redis=unix:\S+ remote=1 ", 10)
    wait_for(lambda: b"held" in http_raw("GET", u.url("/list"))[1], 2, "u to list m's lobby")
    env.daemons_alive(m, plain, rs, u)


run(scenario)
