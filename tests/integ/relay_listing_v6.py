#!/usr/bin/env python3
"""The listing check over IPv6, and per address family.

- IPv6 only: rally-relay's front on ::1 (the OpenArena server behind it
  stays on 127.0.0.1), rally-master's Q3 side on [::1]. The relay
  heartbeats it over IPv6, the master lists [::1]:front, and the check asks
  "getserversExt Quake3Arena 71 empty full ipv4 ipv6" (getservers would list
  IPv4 servers only; the game name comes from the server's infoResponse)
  and finds the '/' entry. The master forgets servers after 5 s: the loss
  and the regain show over IPv6 too.
- Dual-stack, one master name with an A and an AAAA record (dual.test, from
  a hosts file of the relay's own mount namespace), rally-master on
  127.0.0.1:P and another on [::1]:P: the relay on "[::]" heartbeats both
  families from its one socket, and the check asks each family on its own
  (getservers to the IPv4 address, getserversExt to the IPv6 one). Both
  are listed under this host's addresses (the socket is a wildcard). The
  IPv6 master stops: only the IPv6 listing is lost."""

import os
import re
import shutil

from harness import Master, OAServer, Relay, check, http, run, wait_for


def healthz_rows(relay):
    st, body, _ = http("GET", relay.url("/healthz"))
    check(st == 200, "healthz %s" % st)
    return body["listing"]["masters"]


def scenario(env):
    oa = OAServer(env, dedicated=1)

    # ---- IPv6 only ----
    m = Master(env, args=["--udp", "[::1]:0", "--q3-challenge", "1500", "--q3-ttl", "5000"])
    check(m.udp_addr[0] == "::1", "master on ::1: %r" % (m.udp_addr,))
    relay = Relay(env, oa.addr, listen=("[::1]:0",), args=[
        "--master", "[::1]:%d" % m.udp_addr[1],
        "--heartbeat-tag", "QuakeArena-1", "--heartbeat-interval", "300",
        "--listing-interval", "3", "--listing-delay", "500", "--listing-timeout", "1000"])
    check(relay.addr[0] == "::1", "front on ::1: %r" % (relay.addr,))
    name = "[::1]:%d" % m.udp_addr[1]
    front = "[::1]:%d" % relay.addr[1]

    m.wait_line(r"q3-listed server=%s game=Quake3Arena protocol=71" % re.escape(front), 20)
    relay.wait_line(r"listing-confirmed master=%s family=ipv6 match=bind_address seen-as=%s$" %
                    (re.escape(name), re.escape(front)), 20)
    rows = healthz_rows(relay)
    check(len(rows) == 1, "one master, one family: %r" % rows)
    row = rows[0]
    check(row["family"] == "ipv6", "family: %r" % row)
    check(row["request"] == "getserversExt Quake3Arena 71 empty full ipv4 ipv6",
          "request: %r" % row)
    check(row["address"] == "[::1]:%d" % m.udp_addr[1], "address: %r" % row)
    check(row["listed"] is True and row["seen_as"] == front and row["servers"] == 1, "row: %r" % row)
    check(m.metrics()['rally_master_q3_packets_total{type="getserversext"}'] >= 1,
          "the master saw getserversExt")

    start = len(relay.output())
    m.wait_line(r"q3-delisted server=%s game=Quake3Arena reason=expired" % re.escape(front), 15)
    relay.wait_line(r"listing-lost master=%s family=ipv6 reason=not_listed rule=bind_address" %
                    re.escape(name), 10, start=start)
    relay.wait_line(r"listing-regained master=%s family=ipv6 match=bind_address seen-as=%s " %
                    (re.escape(name), re.escape(front)), 15, start=start)
    met = relay.metrics()
    check(met['rally_relay_master_listed{master="%s",family="ipv6"}' % name] in (0, 1),
          "listed metric")
    check(met['rally_relay_master_listing_checks_total{master="%s",family="ipv6",'
              'outcome="not_listed"}' % name] >= 1, "not_listed counted")
    check(not [k for k in met if "listing" in k and 'family="ipv4"' in k],
          "an IPv4 check by an IPv6-only front: %r" % [k for k in met if "ipv4" in k])
    env.daemons_alive(m, relay)
    check(relay.stop() == 0, "relay exit status")

    # ---- dual-stack: one name, two families, checked apart ----
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        check(False, "the A+AAAA part needs root and unshare (a private /etc/hosts)")
    m6 = Master(env, args=["--udp", "[::1]:0", "--q3-challenge", "1500"], name="master6")
    mport = m6.udp_addr[1]
    m4 = Master(env, args=["--udp", "127.0.0.1:%d" % mport, "--q3-challenge", "1500"],
                name="master4")
    hosts = os.path.join(env.dir, "hosts")
    with open(hosts, "w") as f:
        f.write("127.0.0.1 localhost\n127.0.0.1 dual.test\n::1 dual.test\n")
    prefix = ["unshare", "-m", "sh", "-c", 'mount --bind "$0" /etc/hosts && exec "$@"', hosts]
    relay = Relay(env, oa.addr, listen=["[::]:0"], name="relay-dual", argv_prefix=prefix,
                  state_dir=os.path.join(env.dir, "state-dual"), args=[
                      "--master", "dual.test:%d" % mport, "--heartbeat-tag", "QuakeArena-1",
                      "--heartbeat-interval", "300", "--listing-interval", "3",
                      "--listing-delay", "500", "--listing-timeout", "1000"])
    port = relay.addr[1]
    dual = "dual.test:%d" % mport
    m4.wait_line(r"q3-listed server=127\.0\.0\.1:%d game=Quake3Arena" % port, 20)
    m6.wait_line(r"q3-listed server=\[::1\]:%d game=Quake3Arena" % port, 20)
    relay.wait_line(r"listing-confirmed master=%s family=ipv4 match=local_address "
                    r"seen-as=127\.0\.0\.1:%d$" % (re.escape(dual), port), 20)
    relay.wait_line(r"listing-confirmed master=%s family=ipv6 match=local_address "
                    r"seen-as=\[::1\]:%d$" % (re.escape(dual), port), 20)
    rows = {r["family"]: r for r in healthz_rows(relay)}
    check(sorted(rows) == ["ipv4", "ipv6"], "a row per family: %r" % rows)
    check(rows["ipv4"]["request"] == "getservers 71 empty full" and
          rows["ipv4"]["address"] == "127.0.0.1:%d" % mport, "ipv4 row: %r" % rows["ipv4"])
    check(rows["ipv6"]["request"] == "getserversExt Quake3Arena 71 empty full ipv4 ipv6" and
          rows["ipv6"]["address"] == "[::1]:%d" % mport, "ipv6 row: %r" % rows["ipv6"])
    for r in rows.values():
        check(r["listed"] is True and r["rule"] == "local_address" and r["weak"] is False,
              "row: %r" % r)
    check(m4.metrics()['rally_master_q3_packets_total{type="getservers"}'] >= 1 and
          m6.metrics()['rally_master_q3_packets_total{type="getserversext"}'] >= 1,
          "each master asked in its family")

    # The IPv6 master goes: its family's listing is lost, the other stays.
    start = len(relay.output())
    check(m6.stop() == 0, "master6 exit")
    relay.wait_line(r"listing-lost master=%s family=ipv6 reason=no_answer" % re.escape(dual), 20,
                    start=start)

    def both():
        rs = {r["family"]: r for r in healthz_rows(relay)}
        return rs if rs["ipv6"]["listed"] is False else None
    rows = wait_for(both, 5, "the IPv6 row to say not listed")
    check(rows["ipv4"]["listed"] is True, "the IPv4 listing went too: %r" % rows)
    check(not relay.grep(r"listing-lost master=\S+ family=ipv4", start=start), "ipv4 lost")
    met = relay.metrics()
    check(met['rally_relay_master_listed{master="%s",family="ipv4"}' % dual] == 1 and
          met['rally_relay_master_listed{master="%s",family="ipv6"}' % dual] == 0,
          "listed per family: %r" % {k: v for k, v in met.items() if "listed{" in k})
    env.daemons_alive(relay, m4, oa)
    check(relay.stop() == 0, "relay exit status")


run(scenario)
