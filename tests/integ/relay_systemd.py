#!/usr/bin/env python3
"""What systemd sees: READY=1 once bound, WATCHDOG=1 at half the watchdog
period, STOPPING=1 on SIGTERM (sd_notify over $NOTIFY_SOCKET); journal-style
lines ("<6>ready ...", no timestamp) when stderr is the journal; SIGHUP
re-reads the token file (and keeps the old one if the new one is bad)."""

import os
import socket
import time

from harness import TOKEN, OAServer, Relay, check, http, run, wait_for


def scenario(env):
    oa = OAServer(env)
    path = os.path.join(env.dir, "notify.sock")
    ns = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    ns.bind(path)
    env.socks.append(ns)
    got = []

    def collect():
        ns.settimeout(0.05)
        try:
            while True:
                got.append((time.monotonic(), ns.recv(4096).decode()))
        except socket.timeout:
            pass
        return got

    os.environ["NOTIFY_SOCKET"] = path
    os.environ["WATCHDOG_USEC"] = "400000"
    try:
        relay = Relay(env, oa.addr, args=["--log", "journal"])
    finally:
        del os.environ["NOTIFY_SOCKET"], os.environ["WATCHDOG_USEC"]
    check(relay.grep(r"^<6>ready listen=127\.0\.0\.1:\d+ control=127\.0\.0\.1:\d+$"),
          "no journal-style ready line: %r" % relay.output()[:5])
    check(relay.grep(r"^<7>session|^<6>bans-loaded"), "journal priorities missing")
    check(not relay.grep(r"^\d{4}-\d\d-\d\dT"), "timestamps in journal mode")
    wait_for(lambda: [m for _, m in collect() if m == "READY=1"], 5, "READY=1")
    t0 = time.monotonic()
    wait_for(lambda: len([t for t, m in collect() if m == "WATCHDOG=1" and t > t0]) >= 3, 5,
             "three WATCHDOG=1 (every 200 ms)")

    # SIGHUP re-reads the token file.
    new = "rotated-token-" + "z" * 40
    with open(relay.token_file, "w") as f:
        f.write(new + "\n")
    mark = len(relay.output())
    relay.signal(1)
    relay.wait_line(r"reload signal=SIGHUP", start=mark)
    wait_for(lambda: http("GET", relay.url("/bans"), token=new)[0] == 200, 3, "the new token")
    check(http("GET", relay.url("/bans"), token=TOKEN)[0] == 401, "the old token still works")
    with open(relay.token_file, "w") as f:
        f.write("short\n")
    mark = len(relay.output())
    relay.signal(1)
    relay.wait_line(r"token-reload-refused", start=mark)
    check(http("GET", relay.url("/bans"), token=new)[0] == 200, "a bad token file replaced the good one")

    env.daemons_alive(relay, oa)
    check(relay.stop() == 0, "exit status")
    wait_for(lambda: [m for _, m in collect() if m == "STOPPING=1"], 3, "STOPPING=1")


run(scenario)
