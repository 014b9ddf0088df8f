#!/usr/bin/env python3
"""tools/monitoring: the example Prometheus rules are valid (`promtool check
rules`), fire on the series their unit tests give and stay silent on the
others (`promtool test rules` with rallypoint-rules.test.yml), and name only
metrics and labels the daemons export: every rally_* name in a rule's
expression is looked up in /metrics of a real rally-master and rally-relay
(with relay ports, heartbeating, fronting a tunnel), so a renamed metric fails here instead
of leaving an alert that never fires. Needs Debian's prometheus (promtool):
tools/dev.sh test installs it; missing, this fails, never skips."""

import os
import re
import shutil
import subprocess

from harness import TOKEN, Echo, Master, Relay, check, http, run

HERE = os.path.dirname(os.path.abspath(__file__))
MON = os.path.join(HERE, "..", "..", "tools", "monitoring")
RULES = os.path.join(MON, "rallypoint-rules.yml")
TESTS = os.path.join(MON, "rallypoint-rules.test.yml")


def promtool(*args):
    r = subprocess.run(["promtool"] + list(args), capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout + r.stderr


def families(text):
    """Metric names and, per name, the label names seen."""
    out = {}
    for ln in text.splitlines():
        if not ln or ln.startswith("#"):
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?\s", ln)
        if m is None:
            continue
        labels = set(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="', m.group(3) or ""))
        out.setdefault(m.group(1), set()).update(labels)
    return out


def scenario(env):
    check(shutil.which("promtool"), "promtool is missing: apt-get install prometheus "
          "(tools/dev.sh test does)")
    rc, out = promtool("check", "rules", RULES)
    check(rc == 0, "promtool check rules: %s" % out)
    env.log(out.strip().splitlines()[-1])
    cases = open(TESTS).read().count("alertname:")
    check(cases >= 5, "only %d alert cases in %s" % (cases, TESTS))
    rc, out = promtool("test", "rules", TESTS)
    check(rc == 0, "promtool test rules: %s" % out)
    env.log("promtool test rules: %s" % out.strip().splitlines()[-1])

    # What the daemons export: a master with relay ports; a relay that
    # heartbeats it; a relay fronting the tunnel with its realm keys in a
    # PostgreSQL that is not there (it exports the key database's gauges,
    # down, and keeps retrying).
    m = Master(env, args=["--relay-ip", "127.0.0.1", "--relay-bind", "127.0.0.1"])
    echo = Echo(env)
    plain = Relay(env, echo.addr, name="relay",
                  args=["--master", "127.0.0.1:%d" % m.udp_addr[1],
                        "--heartbeat-tag", "QuakeArena-1"])
    tun = Relay(env, echo.addr, name="relay-tunnel", state_dir=os.path.join(env.dir, "st2"),
                args=["--tunnel-listen", "127.0.0.1:0", "--tunnel-relay-host", "127.0.0.1",
                      "--tunnel-pg", "host=127.0.0.1 port=1 dbname=none connect_timeout=1"],
                wait_ready=False)
    ln = tun.wait_line(r"^(?:<\d>)?ready listen=\S+ .*control=(\S+)", 10)
    tun_url = "http://%s/metrics" % ln.group(1)
    have = {}
    for url, tok in ((m.url("/metrics"), None), (plain.url("/metrics"), TOKEN),
                     (tun_url, TOKEN)):
        st, text, _ = http("GET", url, token=tok)
        check(st == 200, "GET %s: %s" % (url, st))
        for k, v in families(text).items():
            have.setdefault(k, set()).update(v)

    text = open(RULES).read()
    exprs = re.findall(r"^\s*expr:\s*(.+)$", text, re.M)
    check(len(exprs) >= 10, "only %d expressions in the rules" % len(exprs))
    missing = []
    for e in exprs:
        for name, sel in re.findall(r"\b(rally_[a-z0-9_]+)(\{[^}]*\})?", e):
            if name not in have:
                missing.append(name)
                continue
            for label in re.findall(r'([a-z_]+)\s*=~?"', sel or ""):
                if label not in have[name]:
                    missing.append("%s{%s}" % (name, label))
    check(not missing, "the rules name metrics or labels no daemon exports: %s" %
          sorted(set(missing)))
    env.log("%d expressions, every rally_* metric and label in them exported" % len(exprs))
    env.daemons_alive(m, plain, tun)


run(scenario)
