#!/usr/bin/env python3
"""tools/monitoring: the example Prometheus rules are valid (`promtool check
rules`), fire on the series their unit tests give and stay silent on the
others (`promtool test rules` with rallypoint-rules.test.yml), and name only
metrics, labels and label values the daemons export: every rally_* name in a
rule's expression, the labels it matches or groups by, and the values it
compares with = are looked up in /metrics of a real rally-master,
rally-relay (with relay ports, heartbeating, fronting a tunnel) and a
dedicated relay lobby (rally-lobby host --relay-only --metrics, publishing
to the master, a player in), so a renamed
metric or label fails here instead of leaving an alert that never fires.
Needs Debian's prometheus (promtool): tools/dev.sh test installs it;
missing, this fails, never skips."""

import os
import re
import shutil
import subprocess

from harness import check, run
from monitoring import MON, start_daemons, unknown_names

RULES = os.path.join(MON, "rallypoint-rules.yml")
TESTS = os.path.join(MON, "rallypoint-rules.test.yml")


def promtool(*args):
    r = subprocess.run(["promtool"] + list(args), capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout + r.stderr


def scenario(env):
    check(shutil.which("promtool"), "promtool is missing: apt-get install prometheus "
          "(tools/dev.sh test does)")
    rc, out = promtool("check", "rules", RULES)
    check(rc == 0, "promtool check rules: %s" % out)
    env.log(out.strip().splitlines()[-1])
    cases = open(TESTS).read().count("alertname:")
    check(cases >= 5, "only %d alert cases in %s" % (cases, TESTS))
    text = open(RULES).read()
    for job in ("rally-master", "rally-relay", "rally-lobby"):
        check(re.search(r'job(?:=~"rally-\.\*"|="%s")' % job, text) and
              'job="%s"' % job in open(TESTS).read(),
              "no rule or unit test covers job %s" % job)
    rc, out = promtool("test", "rules", TESTS)
    check(rc == 0, "promtool test rules: %s" % out)
    env.log("promtool test rules: %s" % out.strip().splitlines()[-1])

    daemons, _, have = start_daemons(env)

    exprs = re.findall(r"^\s*expr:\s*(.+)$", text, re.M)
    check(len(exprs) >= 10 and any("rally_lobby_" in e for e in exprs),
          "only %d expressions in the rules, or none for rally-lobby" % len(exprs))
    missing = []
    for e in exprs:
        missing += unknown_names(e, have)
    check(not missing, "the rules name metrics, labels or label values no daemon exports: %s" %
          sorted(set(missing)))
    env.log("%d expressions, every rally_* metric, label and compared label value in them "
            "exported" % len(exprs))
    env.daemons_alive(*daemons)


run(scenario)
