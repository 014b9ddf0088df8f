#!/usr/bin/env python3
"""rally-master with two HTTP listeners: --http 127.0.0.1:0 --http [::1]:0.

The ready line names the first listener, a log line the second; both
answer /health; a knock posted over IPv6 (a v6-only joiner's) is in the
poll over IPv4 (its dual-stack host's): one registry behind both. /metrics
counts both listeners' requests. A fifth --http is a usage error."""

import json
import re
import subprocess

from harness import MASTER_BIN, Master, check, http_raw, run

TAG = "bf621fd0f94caef64dc3a0bd"
BLOB = "C63wDQAAAAFtuH2KaoykaJbN7ZmIH77Z40DFhRQdbRB1gS6S3IzzZF80FeAEnqgHm1zKoGuujgwI1oZhlesarw=="


def scenario(env):
    m = Master(env, args=["--http", "[::1]:0"])
    check(m.http_addr[0] == "127.0.0.1", "the ready line names the first listener: %r" % (
        m.http_addr,))
    ln = m.wait_line(r"\bhttp-listening http=\[::1\]:(\d+)$", 5)
    url6 = "http://[::1]:%s" % ln.group(1)
    for base in (m.url(""), url6):
        st, body, _ = http_raw("GET", base + "/health")
        check(st == 200, "GET %s/health -> %s %r" % (base, st, body))
    st, body, _ = http_raw("POST", url6 + "/knock",
                           body=json.dumps({"s": TAG, "blob": BLOB}).encode())
    check(st == 200, "POST /knock over IPv6 -> %s %r" % (st, body))
    st, body, _ = http_raw("GET", m.url("/knock?s=%s" % TAG))
    notes = json.loads(body)["knocks"]
    check(st == 200 and [n["blob"] for n in notes] == [BLOB],
          "the v6 knock in the v4 poll: %s %r" % (st, body))
    st, text, _ = http_raw("GET", url6 + "/metrics")
    got = {e: int(n) for e, n in re.findall(
        rb'rally_master_http_requests_total\{endpoint="(\w+)",status="200"\} (\d+)', text)}
    check(got.get(b"health") == 2 and got.get(b"knock_post") == 1 and got.get(b"knock_get") == 1,
          "counters across both listeners: %r" % got)
    env.daemons_alive(m)

    r = subprocess.run([MASTER_BIN, "--check-config"] +
                       ["--http", "127.0.0.1:0"] * 5, capture_output=True, text=True)
    check(r.returncode == 2 and "at most 4" in r.stderr, "five --http: %d %r" % (
        r.returncode, r.stderr))


if __name__ == "__main__":
    run(scenario)
