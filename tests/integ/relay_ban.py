#!/usr/bin/env python3
"""A ban through the control API cuts a live session at once (its upstream
socket is closed, nothing more reaches the server), other addresses are
unaffected, the ban holds after a relay restart (bans.json), expires on time,
and DELETE lifts it."""

import json
import os
import threading
import time

from harness import (OAServer, Relay, check, drain, first_token, query, run, udp_socket_ports,
                     wait_for)


class Player:
    """A client that keeps a session busy: getchallenge every 150 ms (the
    engine answers each; it is not rate-limited by the relay). The 150 ms
    are the traffic this scenario declares, a player's pace, not a wait for
    anything; the pause is a wait on the stop event, so close() ends it at
    once."""

    def __init__(self, env, relay_addr, ip):
        self.sock = env.udp(ip)
        self.addr = relay_addr
        self.answers = []
        self.stopped = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        self.sock.settimeout(0.15)
        while not self.stopped.is_set():
            try:
                self.sock.sendto(b"\xff\xff\xff\xffgetchallenge", self.addr)
                data, src = self.sock.recvfrom(65535)
                self.answers.append((time.monotonic(), first_token(data)))
            except OSError:
                pass
            self.stopped.wait(0.15)

    def answered_since(self, t):
        return [a for a in self.answers if a[0] > t]

    def close(self):
        self.stopped.set()
        self.t.join(2)


def scenario(env):
    oa = OAServer(env)
    relay = Relay(env, oa.addr)
    villain = Player(env, relay.addr, "127.0.0.3")
    friend = Player(env, relay.addr, "127.0.0.4")
    env.cleanups += [villain.close, friend.close]
    wait_for(lambda: len(villain.answers) >= 2 and len(friend.answers) >= 2, 5, "both players answered")

    st, sessions, _ = relay.api("GET", "/sessions")
    vs = [s for s in sessions if s["client_ip"] == "127.0.0.3"]
    check(len(vs) == 1, "/sessions: %r" % sessions)
    up = vs[0]["upstream_port"]
    check(up in udp_socket_ports(relay.pid), "villain's upstream socket missing")

    st, body, _ = relay.api("PUT", "/bans/127.0.0.3", {"reason": "aimbot", "duration": 4})
    t_ban = time.monotonic()
    check(st == 201, "PUT ban -> %s %r" % (st, body))
    check(body["ip"] == "127.0.0.3" and body["reason"] == "aimbot" and body["sessions_closed"] == 1,
          "ban body: %r" % body)
    check(body["expires"] - body["created"] == 4, "expiry: %r" % body)
    # The session is gone at once: its socket closed, not listed.
    check(up not in udp_socket_ports(relay.pid), "the banned session's socket is still open")
    st, sessions, _ = relay.api("GET", "/sessions")
    check(not [s for s in sessions if s["client_ip"] == "127.0.0.3"], "banned session listed")
    # Bounded by what the relay saw: two of the villain's datagrams dropped
    # as banned (it kept sending after the ban), two answers to the friend.
    wait_for(lambda: relay.drops("banned") >= 2 and len(friend.answered_since(t_ban)) >= 2, 5,
             "the villain's datagrams dropped and the friend answered after the ban")
    check(not villain.answered_since(t_ban + 0.05), "banned player still answered")
    check(len(friend.answered_since(t_ban)) >= 2, "the other player was cut too")
    check(relay.drops("banned") >= 2, "banned drops: %s" % relay.drops("banned"))
    relay.wait_line(r"ban-added ip=127\.0\.0\.3 duration=4 sessions-closed=1")

    # Survives a restart: bans.json was written atomically.
    path = os.path.join(relay.state_dir, "bans.json")
    with open(path) as f:
        saved = json.load(f)
    check([b["ip"] for b in saved["bans"]] == ["127.0.0.3"], "bans.json: %r" % saved)
    check(relay.stop() == 0, "relay exit status")
    relay = Relay(env, oa.addr, state_dir=relay.state_dir, name="relay2")
    villain.addr = friend.addr = relay.addr
    st, bans, _ = relay.api("GET", "/bans")
    check(st == 200 and [b["ip"] for b in bans] == ["127.0.0.3"], "GET /bans after restart: %r" % bans)
    t_restart = time.monotonic()
    wait_for(lambda: len(friend.answered_since(t_restart)) >= 2, 5, "friend served by the new relay")
    check(not villain.answered_since(t_restart), "ban lost across the restart")
    # Both players reach the server from the relay's one upstream address, and
    # the engine answers getchallenge from one address in a leaky bucket of 10
    # with one token a second (ioquake3's SVC_RateLimitAddress): with the
    # friend still asking, the villain's share of that token decides when it
    # hears back, not the ban. The friend has shown what it had to; it stops.
    friend.close()

    # It expires on time (4 s from the PUT) and is then forgotten: the villain
    # is answered within the engine's token a second of the expiry.
    wait_for(lambda: villain.answered_since(t_ban + 4), max(3.0, t_ban + 4 + 5 - time.monotonic()),
             "the ban to expire")
    check(time.monotonic() - t_ban >= 3.9, "ban expired early")
    st, bans, _ = relay.api("GET", "/bans")
    check(bans == [], "expired ban still listed: %r" % bans)
    with open(path) as f:
        check(json.load(f)["bans"] == [], "expired ban still in bans.json")

    # A permanent ban, then DELETE.
    st, body, _ = relay.api("PUT", "/bans/127.0.0.3", {"reason": "again"})
    check(st == 201 and body["expires"] is None, "permanent ban: %s %r" % (st, body))
    st, body, _ = relay.api("PUT", "/bans/127.0.0.3", {"reason": "updated reason"})
    check(st == 200 and body["reason"] == "updated reason", "update ban: %s %r" % (st, body))
    t = time.monotonic()
    dropped = relay.drops("banned")
    wait_for(lambda: relay.drops("banned") >= dropped + 2, 5,
             "two more of the villain's datagrams dropped as banned")
    check(not villain.answered_since(t + 0.05), "permanent ban not applied")
    st, body, _ = relay.api("DELETE", "/bans/127.0.0.3")
    check(st == 204, "DELETE -> %s" % st)
    t = time.monotonic()
    wait_for(lambda: villain.answered_since(t), 5, "answers after DELETE")
    st, body, _ = relay.api("DELETE", "/bans/127.0.0.3")
    check(st == 404, "second DELETE -> %s" % st)
    # IPv6 and v4-mapped forms name the same kind of key.
    st, body, _ = relay.api("PUT", "/bans/2001:db8::7", {"reason": "v6"})
    check(st == 201 and body["ip"] == "2001:db8::7", "v6 ban: %s %r" % (st, body))
    env.daemons_alive(relay, oa)


run(scenario)
