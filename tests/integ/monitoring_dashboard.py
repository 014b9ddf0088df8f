#!/usr/bin/env python3
"""tools/monitoring/rallypoint-dashboard.json, the Grafana dashboard, against
real daemons and a real Prometheus.

The JSON is a dashboard Grafana imports: unique panel ids, panels on the
24-column grid without overlap, every query on the ${datasource} variable,
every $variable defined. Every PromQL expression in it is valid (promtool
check rules over a rules file made of them, Grafana's variables replaced as
Grafana would), names only metrics, labels and label values real daemons
export (their /metrics, as monitoring_rules.py checks the rules), and
returns series: Debian's Prometheus, configured as tools/monitoring/README.md
says (the relay's token through credentials_file) and loaded with the
example rules, scrapes a real rally-master, two rally-relays and a dedicated
relay lobby (rally-lobby --metrics, a player in) on loopback,
and each panel's query, each variable's label_values() and the alerts table
are asked of it; each legend's {{label}} must be a label of the series it
names. Grafana itself is not in Debian's archive: no Grafana renders the
dashboard here. Needs Debian's prometheus
(prometheus, promtool): tools/dev.sh test installs it."""

import json
import os
import re
import shutil
import subprocess
import urllib.parse

from harness import Proc, check, http, run, wait_for
from monitoring import MON, TARGET_LABELS, start_daemons, unknown_names

DASHBOARD = os.path.join(MON, "rallypoint-dashboard.json")
RULES = os.path.join(MON, "rallypoint-rules.yml")
# Grafana's built-in variables, with what Grafana would put there for a
# Prometheus scraped every second (here) or every 15 s (the README).
BUILTINS = {"__rate_interval": "1m", "__interval": "15s", "__range": "1h"}


def walk_panels(panels):
    for p in panels:
        yield p
        yield from walk_panels(p.get("panels", []))


def grafana_expand(expr, variables):
    """expr as Grafana sends it: $var and ${var} replaced (an All of a
    multi-value variable becomes its allValue, .* here)."""
    def sub(m):
        name = m.group(1) or m.group(2)
        if name in BUILTINS:
            return BUILTINS[name]
        check(name in variables, "undefined variable $%s in %r" % (name, expr))
        return variables[name]
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", sub, expr)


def check_structure(dash):
    """What Grafana needs to import the JSON and what keeps it usable."""
    for k in ("title", "uid", "schemaVersion", "panels", "templating"):
        check(k in dash, "the dashboard has no %s" % k)
    check(isinstance(dash["schemaVersion"], int) and dash["schemaVersion"] >= 30,
          "schemaVersion %r" % dash["schemaVersion"])
    check(dash.get("id") is None, "a fixed id would clash on import")
    variables = {}
    for v in dash["templating"]["list"]:
        variables[v["name"]] = v
    check(variables.get("datasource", {}).get("type") == "datasource" and
          variables["datasource"].get("query") == "prometheus",
          "no Prometheus datasource variable")
    ids, rects, exprs = set(), [], []
    for p in walk_panels(dash["panels"]):
        check(isinstance(p.get("id"), int) and p["id"] not in ids, "panel id %r" % p.get("id"))
        ids.add(p["id"])
        g = p.get("gridPos", {})
        check(all(isinstance(g.get(k), int) for k in "hwxy") and g["x"] >= 0 and
              g["x"] + g["w"] <= 24 and g["h"] > 0, "panel %d gridPos %r" % (p["id"], g))
        for (x, y, w, h, other) in rects:
            check(g["x"] >= x + w or x >= g["x"] + g["w"] or g["y"] >= y + h or
                  y >= g["y"] + g["h"], "panels %d and %d overlap" % (p["id"], other))
        rects.append((g["x"], g["y"], g["w"], g["h"], p["id"]))
        if p["type"] == "row":
            continue
        check(p.get("title") and p.get("description"), "panel %d: title and description" %
              p["id"])
        check(p.get("datasource") == {"type": "prometheus", "uid": "${datasource}"},
              "panel %d: datasource %r" % (p["id"], p.get("datasource")))
        refs = set()
        check(p.get("targets"), "panel %d has no query" % p["id"])
        for t in p["targets"]:
            check(t.get("expr") and t.get("refId") and t["refId"] not in refs,
                  "panel %d: a target without expr or with a repeated refId" % p["id"])
            refs.add(t["refId"])
            check(t.get("datasource") == p["datasource"], "panel %d: a target's datasource" %
                  p["id"])
            exprs.append((p, t))
    for v in variables.values():
        if v["type"] == "query":
            check(v.get("datasource") == {"type": "prometheus", "uid": "${datasource}"},
                  "variable %s: datasource" % v["name"])
    return variables, exprs


def promtool_check(env, queries):
    """promtool parses every expression, as recording rules of a file made
    for it."""
    path = os.path.join(env.dir, "dashboard-rules.yml")
    with open(path, "w") as f:
        f.write("groups:\n  - name: dashboard\n    rules:\n")
        for i, (_, _, q) in enumerate(queries):
            f.write("      - record: dashboard:query_%d\n        expr: %s\n" % (
                i, json.dumps(q)))
    r = subprocess.run(["promtool", "check", "rules", path], capture_output=True, text=True,
                       timeout=60)
    check(r.returncode == 0, "promtool check rules (the dashboard's queries): %s%s" % (
        r.stdout, r.stderr))
    env.log("promtool check rules: %d dashboard queries parse" % len(queries))


class Prometheus(Proc):
    """Debian's prometheus on loopback, in a scratch directory, scraping the
    daemons every second as the README configures it."""

    def __init__(self, env, targets):
        d = os.path.join(env.dir, "prometheus")
        os.makedirs(d)
        token_file = os.path.join(d, "rally-relay.token")
        cfg = ["global:", "  scrape_interval: 1s", "  evaluation_interval: 1s",
               "rule_files:", "  - %s" % json.dumps(os.path.abspath(RULES)), "scrape_configs:"]
        jobs = {}
        for job, hostport, tok in targets:
            jobs.setdefault(job, []).append(hostport)
            if tok:
                with open(token_file, "w") as f:
                    f.write(tok + "\n")
        for job, hosts in jobs.items():
            cfg += ["  - job_name: %s" % job]
            if job == "rally-relay":
                cfg += ["    authorization:", "      type: Bearer",
                        "      credentials_file: %s" % json.dumps(token_file)]
            cfg += ["    static_configs:", "      - targets: %s" % json.dumps(hosts)]
        with open(os.path.join(d, "prometheus.yml"), "w") as f:
            f.write("\n".join(cfg) + "\n")
        super().__init__(env, "prometheus", [
            "prometheus", "--config.file=%s" % os.path.join(d, "prometheus.yml"),
            "--storage.tsdb.path=%s" % os.path.join(d, "data"),
            "--web.listen-address=127.0.0.1:0", "--log.level=info"])
        m = self.wait_line(r'msg="Listening on" address=(127\.0\.0\.1:\d+)', 30)
        self.base = "http://%s" % m.group(1)
        # It listens before its storage is open (503 until then).
        wait_for(lambda: http("GET", self.base + "/-/ready", timeout=5)[0] == 200, 30,
                 "Prometheus to be ready")

    def api(self, path, **params):
        url = self.base + path + ("?" + urllib.parse.urlencode(params) if params else "")
        st, body, _ = http("GET", url, timeout=10)
        check(st == 200 and body.get("status") == "success", "GET %s: %s %s" % (url, st, body))
        return body["data"]


def scenario(env):
    for tool in ("promtool", "prometheus"):
        check(shutil.which(tool), "%s is missing: apt-get install prometheus (tools/dev.sh "
              "test does)" % tool)
    with open(DASHBOARD) as f:
        dash = json.load(f)
    variables, targets = check_structure(dash)
    values = {"datasource": "prometheus"}
    for name, v in variables.items():
        if v["type"] == "query":
            values[name] = v.get("allValue") or ".*"
    queries = [(p, t, grafana_expand(t["expr"], values)) for p, t in targets]
    env.log("%d panels, %d queries, variables: %s" % (
        sum(1 for p in walk_panels(dash["panels"]) if p["type"] != "row"), len(queries),
        ", ".join(sorted(variables))))
    promtool_check(env, queries)

    daemons, scrape, have = start_daemons(env)
    missing = []
    for _, _, q in queries:
        missing += unknown_names(q, have)
    for v in variables.values():
        if v["type"] == "query":
            missing += unknown_names(v["definition"], have)
    check(not missing, "the dashboard names metrics, labels or label values no daemon "
          "exports: %s" % sorted(set(missing)))
    env.log("every rally_* metric, label and compared label value of the dashboard exported")

    prom = Prometheus(env, scrape)
    want = {hp for _, hp, _ in scrape}

    def all_up():
        active = prom.api("/api/v1/targets")["activeTargets"]
        up = {t["labels"]["instance"] for t in active if t["health"] == "up"}
        return up >= want and up
    wait_for(all_up, 30, lambda: "Prometheus to scrape %s (targets: %s)" % (
        sorted(want), [(t["labels"]["instance"], t["health"], t.get("lastError"))
                       for t in prom.api("/api/v1/targets")["activeTargets"]]))
    env.log("Prometheus scrapes %d targets, the relays with the token from credentials_file"
            % len(want))

    # The variables' label_values(METRIC, instance).
    for name, v in variables.items():
        if v["type"] != "query":
            continue
        m = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", v["definition"])
        check(m, "variable %s: %r" % (name, v["definition"]))
        got = prom.api("/api/v1/label/%s/values" % m.group(2), **{"match[]": m.group(1)})
        check(got, "variable %s: no values" % name)
        env.log("variable %s: %s" % (name, " ".join(got)))

    # Every query returns series once two scrapes are in (rate() needs
    # two samples), and every legend's labels are in them.
    def answers():
        empty = []
        for p, t, q in queries:
            res = prom.api("/api/v1/query", query=q)["result"]
            if not res:
                empty.append("%s: %s" % (p["title"], q))
                continue
            legend = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", t.get("legendFormat", "")))
            for series in res:
                labels = set(series["metric"])
                check(legend <= labels, "panel %r legend %r: the series has only %s (%s)" % (
                    p["title"], t["legendFormat"], sorted(labels), q))
        return not empty or None, empty
    state = {}

    def done():
        ok, state["empty"] = answers()
        return ok
    wait_for(done, 60, lambda: "every dashboard query to return series; empty: %s" %
             state.get("empty"), interval=0.5)
    env.log("Prometheus answers all %d queries with series; every legend's labels present" %
            len(queries))
    alerts = prom.api("/api/v1/query", query='ALERTS{alertname=~"Rally.*"}')["result"]
    env.log("the alerts table shows: %s" % ", ".join(sorted(
        "%s(%s)" % (a["metric"]["alertname"], a["metric"]["alertstate"]) for a in alerts)))
    for a in alerts:
        check(set(a["metric"]) - TARGET_LABELS, "an alert without labels")
    env.daemons_alive(prom, *daemons)


run(scenario)
