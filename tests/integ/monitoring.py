"""What tools/monitoring's rules and dashboard are checked against: the
/metrics of real daemons, and the PromQL in them read closely enough to name
every metric, label and label value an expression relies on. Shared by
monitoring_rules.py and monitoring_dashboard.py (not a scenario itself)."""

import os
import re

from harness import TOKEN, Echo, Lobby, Master, Relay, check, http

HERE = os.path.dirname(os.path.abspath(__file__))
MON = os.path.join(HERE, "..", "..", "tools", "monitoring")

# Labels Prometheus adds to every scraped series (the target's), not the
# daemons; ALERTS' own labels.
TARGET_LABELS = {"instance", "job"}


def families(text):
    """{metric name: {label name: {values seen}}} of a /metrics text."""
    out = {}
    for ln in text.splitlines():
        if not ln or ln.startswith("#"):
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?\s", ln)
        if m is None:
            continue
        labels = out.setdefault(m.group(1), {})
        for k, v in re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(3) or ""):
            labels.setdefault(k, set()).add(v)
    return out


def start_daemons(env):
    """A master with relay ports; a relay that heartbeats it; a relay
    fronting the tunnel with its realm keys in a PostgreSQL that is not
    there (it exports the key database's gauges, down, and keeps retrying);
    a dedicated relay lobby (rally-lobby host --relay-only) publishing to the
    master, with --metrics on loopback and a player joined.
    Returns the daemons, the scrape targets ((job, host:port, token)) and
    what their /metrics hold together."""
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
    lobby = Lobby(env, "host", name="relay-lobby", args=[
        "--relay-only", "--publish", m.url(""), "--public", "--metrics", "127.0.0.1:0"])
    lport = int(lobby.wait_line(r"metrics-listening metrics=127\.0\.0\.1:(\d+) ").group(1))
    player = Lobby(env, "join", code=lobby.wait_code(), name="alice")
    player.wait_status("connected", "^joined the host$", timeout=20)
    targets = [("rally-master", "%s:%d" % m.http_addr, None),
               ("rally-relay", "%s:%d" % plain.control, TOKEN),
               ("rally-relay", ln.group(1), TOKEN),
               ("rally-lobby", "127.0.0.1:%d" % lport, None)]
    have = {}
    for _, hostport, tok in targets:
        url = "http://%s/metrics" % hostport
        st, text, _ = http("GET", url, token=tok)
        check(st == 200, "GET %s: %s" % (url, st))
        for k, labels in families(text).items():
            mine = have.setdefault(k, {})
            for lk, vals in labels.items():
                mine.setdefault(lk, set()).update(vals)
    return (m, plain, tun, lobby, player), targets, have


def selectors(expr):
    """(metric, [(label, op, value)]) for every rally_* selector in expr."""
    out = []
    for name, sel in re.findall(r"\b(rally_[a-z0-9_]+)(\{[^}]*\})?", expr):
        matchers = re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"',
                              sel or "")
        out.append((name, matchers))
    return out


def grouping_labels(expr):
    """Label names of by (...), without (...), on (...), ignoring (...) and
    group_left/right (...) clauses."""
    out = set()
    for body in re.findall(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)",
                           expr):
        out.update(x.strip() for x in body.split(",") if x.strip())
    return out


def unknown_names(expr, have):
    """What expr names that no daemon exports: metric names, label names in
    selectors and grouping clauses, and label values compared with = or !=
    (a value no daemon has would match nothing, silently)."""
    missing = []
    sels = selectors(expr)
    labels_here = set(TARGET_LABELS)
    for name, matchers in sels:
        if name not in have:
            missing.append(name)
            continue
        labels_here.update(have[name])
        for label, op, value in matchers:
            if label in TARGET_LABELS:
                continue
            if label not in have[name]:
                missing.append("%s{%s}" % (name, label))
            elif op in ("=", "!=") and value not in have[name][label]:
                missing.append('%s{%s="%s"}' % (name, label, value))
    if sels:
        for label in grouping_labels(expr) - labels_here:
            missing.append("by/on (%s) in %r" % (label, expr[:80]))
    return missing
