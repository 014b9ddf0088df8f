#!/usr/bin/env python3
"""The listing check against a real master that drops the server. A real
OpenArena server behind rally-relay, which heartbeats rally-master on
loopback (QuakeArena-1) and asks it every 3 s for its list with
"getservers 71 empty full" (the protocol from the server's own
infoResponse): the check says listed (log line, /healthz without a token,
metrics). Then the master is replaced by an empty one on the same port:
the relay notices and logs the loss once, brings its next heartbeat
forward (its own interval is 300 s here), and logs the regain. The new
master forgets servers after 5 s (--q3-ttl): it delists the server by
itself, and the relay logs that loss, "not in the list", and the regain
again. Lines are logged on changes only, not on every check."""

import os
import re

from harness import Master, OAServer, Relay, check, http, run, wait_for


def healthz(relay):
    """/healthz with no token at all (it is the unauthenticated endpoint)."""
    st, body, _ = http("GET", relay.url("/healthz"))
    check(st == 200, "GET /healthz -> %s" % st)
    check(body["status"] == "ok", "healthz: %r" % body)
    return body


def master_row(relay, mport):
    rows = [r for r in healthz(relay)["listing"]["masters"]
            if r["master"] == "127.0.0.1:%d" % mport and r["family"] == "ipv4"]
    check(len(rows) == 1, "healthz rows: %r" % rows)
    return rows[0]


def scenario(env):
    m = Master(env, args=["--q3-challenge", "1500"])
    mport = m.udp_addr[1]
    oa = OAServer(env, dedicated=1)
    relay = Relay(env, oa.addr, args=[
        "--master", "127.0.0.1:%d" % mport, "--heartbeat-tag", "QuakeArena-1",
        "--heartbeat-interval", "300", "--listing-interval", "3", "--listing-delay", "500",
        "--listing-timeout", "1000"])
    front = "127.0.0.1:%d" % relay.addr[1]
    name = "127.0.0.1:%d" % mport

    # Listed: the first check, --listing-delay after the first heartbeat.
    relay.wait_line(r"listing-confirmed master=%s family=ipv4 match=bind_address seen-as=%s$" %
                    (re.escape(name), re.escape(front)), 20)
    row = master_row(relay, mport)
    check(row["listed"] is True and row["outcome"] == "listed", "healthz: %r" % row)
    check(row["match"] == "bind_address" and row["rule"] == "bind_address" and
          row["weak"] is False, "match: %r" % row)
    check(row["seen_as"] == front and row["servers"] == 1, "seen as: %r" % row)
    check(row["request"] == "getservers 71 empty full", "request: %r" % row["request"])
    check(row["address"] == name and row["last_error"] is None, "row: %r" % row)
    listed_since = row["since"]
    check(isinstance(listed_since, int) and listed_since > 0, "since: %r" % row)
    lst = healthz(relay)["listing"]
    check(lst["protocol"] == 71 and lst["game"] == "Quake3Arena" and lst["interval_s"] == 3 and
          lst["public_addresses"] == [], "listing: %r" % lst)
    met = relay.metrics()
    lbl = '{master="%s",family="ipv4"}' % name
    check(met["rally_relay_master_listed" + lbl] == 1, "listed metric")
    check(met["rally_relay_master_listing_weak" + lbl] == 0, "weak metric")
    check(met["rally_relay_master_listing_since_timestamp_seconds" + lbl] == listed_since,
          "since metric")
    check(met["rally_relay_master_listing_servers" + lbl] == 1, "servers metric")
    check(met['rally_relay_master_listing_checks_total{master="%s",family="ipv4",outcome="listed"}' % name] >= 1,
          "checks metric")

    # Checks go on without a line each: wait for two more, then count.
    n0 = met['rally_relay_master_listing_checks_total{master="%s",family="ipv4",outcome="listed"}' % name]
    wait_for(lambda: relay.metrics()[
        'rally_relay_master_listing_checks_total{master="%s",family="ipv4",outcome="listed"}' % name] >= n0 + 2,
        15, "two more checks")
    check(len(relay.grep(r"listing-(confirmed|regained|lost|missing)")) == 1,
          "a line per check: %r" % relay.grep(r"listing-"))
    check(m.metrics()['rally_master_q3_packets_total{type="getservers"}'] >= 3,
          "the master saw the checks")

    # The master restarts empty on the same port (a fresh state dir: no
    # snapshot), forgetting servers after 5 s.
    env.daemons_alive(m, relay, oa)
    check(m.stop() == 0, "master exit")
    start = len(relay.output())
    m2 = Master(env, args=["--q3-challenge", "1500", "--udp", name, "--q3-ttl", "5000"],
                state_dir=os.path.join(env.dir, "master2-state"), name="master2")
    check(m2.udp_addr[1] == mport, "same port")
    # The check between the two masters may have gone unanswered.
    lost = relay.wait_line(r"listing-lost master=%s family=ipv4 reason=(not_listed|no_answer) "
                           r"rule=bind_address listed-for=\d+s candidates=none$" % re.escape(name),
                           15, start=start)
    relay.wait_line(r"listing-regained master=%s family=ipv4 match=bind_address seen-as=%s after=\d+s$" %
                    (re.escape(name), re.escape(front)), 15, start=start)
    # It came back through a heartbeat the relay sent early, not its own
    # 300 s cycle.
    m2.wait_line(r"q3-listed server=%s game=Quake3Arena protocol=71" % re.escape(front), 5)
    check(relay.grep(r"heartbeat-early reason=not-listed", start=start), "early heartbeat")
    row = master_row(relay, mport)
    check(row["listed"] is True and row["since"] >= listed_since, "regained: %r" % row)
    check(row["last_error"] == lost.group(1) and row["last_error_at"] >= listed_since,
          "last error: %r" % row)

    # The master delists the server itself (expiry): "not in the list".
    start = len(relay.output())
    m2.wait_line(r"q3-delisted server=%s game=Quake3Arena reason=expired" % re.escape(front), 15)
    relay.wait_line(r"listing-lost master=%s family=ipv4 reason=not_listed rule=bind_address "
                    r"listed-for=\d+s candidates=none$" % re.escape(name), 10, start=start)

    # Counted by outcome, then put back by the early heartbeat.
    met = relay.metrics()
    check(met['rally_relay_master_listing_checks_total{master="%s",family="ipv4",outcome="not_listed"}' % name]
          >= 1, "not_listed counted")
    relay.wait_line(r"listing-regained master=%s family=ipv4 match=bind_address seen-as=%s after=\d+s$" %
                    (re.escape(name), re.escape(front)), 15, start=start)
    check(relay.grep(r"heartbeat-early reason=not-listed", start=start), "early heartbeat")
    env.daemons_alive(m2, relay, oa)
    # A clean exit (the flatline; no leak under LeakSanitizer).
    check(relay.stop() == 0, "relay exit status")


run(scenario)
