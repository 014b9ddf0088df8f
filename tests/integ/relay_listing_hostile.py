#!/usr/bin/env python3
"""The listing check against a scripted master that answers badly. A real
OpenArena server behind rally-relay (its protocol, 71, comes from the
server's own infoResponse); the master is a script here, answering each
"getservers 71 empty full" as the scenario says:
- a whole answer with the relay's address: listed;
- an endless answer without EOT that does hold the relay's address: never
  taken as a listing (too_long: the relay stops reading at its bound);
- a flood of well-formed answers with the relay's address from addresses
  that are not the master's (its IP with another port, another IP), the
  master itself silent: dropped and counted as foreign, no_answer;
- garbage (not an answer, an entry cut short, a getserversExtResponse to a
  getservers, with the relay's address in it): malformed;
- nothing: no_answer; an answer holding the relay's address but no EOT:
  incomplete;
- a whole answer without the relay (another server on its port): not_listed,
  that server named as a candidate;
- then the right answer again, 501 servers in three datagrams, the one with
  the EOT mark sent first: reassembled, regained.
The loss and the regain are logged once each. A second relay with
--public-address 127.0.0.9 is listed only under that address: its bind
address in the list is a candidate, not a listing."""

import socket
import threading
import time

from harness import (OAServer, OOB, Relay, UdpPeer, check, http, run, udp_rx_queue,
                     wait_for)

HDR = OOB + b"getserversResponse"
EOT = b"\\EOT\0\0\0"


def entry(ip, port):
    return b"\\" + socket.inet_aton(ip) + port.to_bytes(2, "big")


class ScriptedMaster(UdpPeer):
    """Answers getservers by self.mode; records requests and heartbeats."""

    def __init__(self, env, front, listed_ip="127.0.0.1"):
        self.front = front
        self.listed_ip = listed_ip
        self.mode = "good"
        self.requests = []
        self.env = env
        self.spoofers = [env.udp("127.0.0.1"), env.udp("127.0.0.77")]
        super().__init__(env)

    def ours(self):
        return entry(self.listed_ip, self.front)

    def on_datagram(self, data, src):
        # The relay heartbeats from its front address before any check:
        # that is the port the answers list.
        if data.startswith(OOB + b"heartbeat ") and not self.front:
            self.front = src[1]
        if not data.startswith(OOB + b"getservers"):
            return
        self.requests.append((data, src))
        mode = self.mode
        send = self.sock.sendto
        if mode == "good":
            send(HDR + entry("10.0.0.1", 27960) + self.ours() + EOT, src)
        elif mode == "without":
            send(HDR + entry("127.0.0.9", self.front) + entry("10.0.0.1", 27960) + EOT, src)
        elif mode == "garbage":
            send(b"hello", src)
            send(OOB + b"getserversResponse\\\x01\x02", src)
            send(OOB + b"getserversExtResponse" + self.ours() + EOT, src)
            send(OOB + b"getserversResponse/" + bytes(18) + EOT, src)
        elif mode == "trickle":
            send(HDR + self.ours(), src)
        elif mode == "foreign":
            for s in self.spoofers:
                for _ in range(300):
                    s.sendto(HDR + self.ours() + EOT, src)
        elif mode == "big":
            # 501 servers in three datagrams of at most 1,400 bytes, ours
            # in the first; the last (with the mark) overtakes the others.
            es = [entry("10.1.%d.%d" % (i >> 8, i & 255), 27960) for i in range(500)]
            es.insert(100, self.ours())
            d = [HDR + b"".join(es[0:196]), HDR + b"".join(es[196:392]),
                 HDR + b"".join(es[392:]) + EOT]
            for dg in (d[2], d[1], d[0]):
                send(dg, src)
        elif mode == "endless":
            threading.Thread(target=self.endless, args=(src,), daemon=True).start()
        # "silent": nothing.

    def endless(self, dst):
        """196 servers a datagram (the relay's among them), never the
        mark, until the relay closes its socket; paced on the relay's
        receive queue so the kernel drops nothing."""
        body = HDR + self.ours() + b"".join(entry("10.9.%d.%d" % (i >> 8, i & 255), 27960)
                                           for i in range(195))
        deadline = time.monotonic() + 10
        sent = 0
        while time.monotonic() < deadline:
            for _ in range(32):
                try:
                    self.sock.sendto(body, dst)
                except OSError:
                    return
                sent += 1
            try:
                wait_for(lambda: udp_rx_queue(dst) in (0, None), 5, "the relay to read")
            except Exception:
                return
            if udp_rx_queue(dst) is None:
                self.endless_sent = sent
                return


def healthz_row(relay, name):
    st, body, _ = http("GET", relay.url("/healthz"))
    check(st == 200, "GET /healthz -> %s" % st)
    rows = [r for r in body["listing"]["masters"] if r["master"] == name]
    check(len(rows) == 1, "rows: %r" % body)
    return rows[0], body["listing"]


def scenario(env):
    oa = OAServer(env, dedicated=1)
    m = ScriptedMaster(env, front=0)
    name = "127.0.0.1:%d" % m.addr[1]
    relay = Relay(env, oa.addr, args=[
        "--master", name, "--heartbeat-tag", "QuakeArena-1", "--heartbeat-interval", "300",
        "--listing-interval", "2", "--listing-delay", "300", "--listing-timeout", "800"])
    front = "127.0.0.1:%d" % relay.addr[1]

    def checks(outcome):
        return relay.metrics().get(
            'rally_relay_master_listing_checks_total{master="%s",family="ipv4",outcome="%s"}' % (name, outcome), 0)

    def drops(reason):
        return relay.metrics().get(
            'rally_relay_master_listing_drops_total{master="%s",family="ipv4",reason="%s"}' % (name, reason), 0)

    relay.wait_line(r"listing-confirmed master=%s family=ipv4 match=bind_address seen-as=%s$" % (name, front),
                    20)
    check(m.front == relay.addr[1], "front learnt from the heartbeat: %r" % m.front)
    req, src = m.requests[0]
    check(req == OOB + b"getservers 71 empty full", "request: %r" % req)
    check(src[0] == "127.0.0.1" and src[1] != relay.addr[1], "a socket of its own: %r" % (src,))

    def expect(mode, outcome, timeout=15):
        n = checks(outcome)
        m.mode = mode
        wait_for(lambda: checks(outcome) > n, timeout, "a check ending %s (mode %s)" % (outcome, mode))
        row, _ = healthz_row(relay, name)
        check(row["listed"] is False, "%s: claimed listed: %r" % (mode, row))
        return row

    # An endless answer holding our address: never a listing.
    start = len(relay.output())
    row = expect("endless", "too_long")
    relay.wait_line(r"listing-lost master=%s family=ipv4 reason=too_long rule=bind_address" % name, 5,
                    start=start)
    check(relay.grep(r"heartbeat-early reason=not-listed", start=start), "early heartbeat")

    # A flood of fake answers from non-master addresses.
    row = expect("foreign", "no_answer")
    check(drops("foreign") >= 100, "foreign drops: %s" % drops("foreign"))
    check(relay.grep(r"listing-answer-foreign master=%s from=127\.0\.0\.(1|77):\d+" % name),
          "foreign warning")

    # Garbage, with our address inside a wrong answer.
    n = drops("malformed")
    row = expect("garbage", "malformed")
    check(drops("malformed") >= n + 4, "malformed drops: %s" % drops("malformed"))
    check(row["outcome"] == "malformed", "outcome: %r" % row)

    # Nothing at all; our address without the mark.
    expect("silent", "no_answer")
    row = expect("trickle", "incomplete")

    # A whole answer without us: another server on our port is a candidate.
    row = expect("without", "not_listed")
    check(row["candidates"] == ["127.0.0.9:%d" % relay.addr[1]], "candidates: %r" % row)
    check(row["servers"] == 2, "servers: %r" % row)
    check(row["last_error"] == "not_listed", "last error: %r" % row)

    # One loss line for all of that, then the right answer: regained. It
    # comes in three datagrams, the one with the mark first.
    start = len(relay.output())
    m.mode = "big"
    relay.wait_line(r"listing-regained master=%s family=ipv4 match=bind_address seen-as=%s after=\d+s$" %
                    (name, front), 15, start=start)
    check(len(relay.grep(r"listing-(lost|missing) master=")) == 1, "loss lines: %r" % relay.grep("listing-"))
    row, _ = healthz_row(relay, name)
    check(row["listed"] is True and row["last_error"] == "not_listed", "row: %r" % row)
    check(row["servers"] == 501, "servers in the reassembled answer: %r" % row)

    # --public-address: only that address is ours.
    m2 = ScriptedMaster(env, front=0, listed_ip="127.0.0.1")
    name2 = "127.0.0.1:%d" % m2.addr[1]
    relay2 = Relay(env, oa.addr, name="relay2", args=[
        "--master", name2, "--heartbeat-tag", "QuakeArena-1", "--public-address", "127.0.0.9",
        "--listing-interval", "2", "--listing-delay", "300", "--listing-timeout", "800"])
    relay2.wait_line(r"listing-missing master=%s family=ipv4 reason=not_listed rule=public_address "
                     r"candidates=127\.0\.0\.1:%d$" % (name2, relay2.addr[1]), 20)
    row, lst = healthz_row(relay2, name2)
    check(lst["public_addresses"] == ["127.0.0.9:%d" % relay2.addr[1]], "public: %r" % lst)
    check(row["listed"] is False and row["rule"] == "public_address", "row: %r" % row)
    check(row["candidates"] == ["127.0.0.1:%d" % relay2.addr[1]], "candidates: %r" % row)
    m2.listed_ip = "127.0.0.9"
    relay2.wait_line(r"listing-regained master=%s family=ipv4 match=public_address seen-as=127\.0\.0\.9:%d " %
                     (name2, relay2.addr[1]), 15)
    env.daemons_alive(relay, relay2, oa)
    check(relay.stop() == 0 and relay2.stop() == 0, "relay exit status")


run(scenario)
