#!/usr/bin/env python3
"""SIGHUP re-reads --servers FILE, with real OpenArena servers and
rally-master. A live session on server a keeps flowing (the same upstream
socket, its age going on, answers before and after) while server b is
added (it starts, heartbeats and is listed under its new port) and server c
is removed (its session closes, its flatline reaches the master, which
delists it, its port closes). A bad file changes nothing and says why (the
line and the reason for a syntax error; the address for a listen address
that cannot be bound), and is counted. A changed server restarts: its
sessions close, its public port is handed over (the same port, even
configured as port 0), its master gets no flatline and keeps it listed,
its own bans survive. An unchanged file keeps everything."""

import json
import os
import signal
import threading
import time

from harness import (Master, OAServer, RelayServers, check, first_token, q3_getservers, query, run,
                     udp_socket_ports, wait_for)


class Player:
    """getchallenge every second (this scenario's traffic; the engine
    answers one IP - all of a relay's sessions - about once a second after
    a burst of 10, so players here are few and slow)."""

    def __init__(self, env, addr, ip):
        self.sock = env.udp(ip)
        self.addr = addr
        self.answers = []
        self.stopped = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()
        env.cleanups.append(self.close)

    def run(self):
        self.sock.settimeout(1.0)
        while not self.stopped.is_set():
            try:
                self.sock.sendto(b"\xff\xff\xff\xffgetchallenge", self.addr)
                data, src = self.sock.recvfrom(65535)
                if src[:2] == self.addr[:2]:
                    self.answers.append((time.monotonic(), first_token(data)))
            except OSError:
                pass
            self.stopped.wait(1.0)

    def answered_since(self, t):
        return [a for a in self.answers if a[0] > t]

    def close(self):
        self.stopped.set()
        self.t.join(2)


def session_of(relay, ip, server):
    st, sessions, _ = relay.api("GET", "/sessions?server=%s" % server)
    check(st == 200, "/sessions -> %s" % st)
    mine = [s for s in sessions if s["client_ip"] == ip]
    return mine[0] if mine else None


def servers_file(m, oa1, oa2, names, b_extra=""):
    text = """[defaults]
master = 127.0.0.1:%d
heartbeat-tag = QuakeArena-1
heartbeat-interval = 3
probe-timeout = 300
""" % m.udp_addr[1]
    up = {"a": oa1, "b": oa2, "c": oa2}
    for n in names:
        text += "\n[server %s]\nlisten = 127.0.0.1:0\nserver = 127.0.0.1:%d\n" % (n, up[n].addr[1])
        if n == "b":
            text += b_extra
    return text


def scenario(env):
    m = Master(env, args=["--q3-challenge", "1500"])
    oa1 = OAServer(env, hostname="rally-a", name="oa-a")
    oa2 = OAServer(env, hostname="rally-bc", name="oa-bc")
    relay = RelayServers(env, servers_file(m, oa1, oa2, ["a", "c"]))
    a, c = relay.addrs["a"][0], relay.addrs["c"][0]
    for port in (a[1], c[1]):
        m.wait_line(r"q3-listed server=127\.0\.0\.1:%d game=Quake3Arena" % port, 20)

    pa = Player(env, a, "127.0.0.3")
    pc = Player(env, c, "127.0.0.4")
    wait_for(lambda: pa.answers and pc.answers, 10, "both players answered")
    before = session_of(relay, "127.0.0.3", "a")
    check(before is not None, "a's player has no session")

    # Reload: b added, c removed, a untouched.
    relay.write(servers_file(m, oa1, oa2, ["a", "b"]))
    mark = len(relay.output())
    t_hup = time.monotonic()
    relay.signal(signal.SIGHUP)
    relay.wait_line(r"servers-reloaded file=\S+ servers=2 added=b removed=c restarted=- kept=a$",
                    10, start=mark)
    b = relay.public("b")
    check(b not in (a, c), "b's port %r" % (b,))
    check(relay.grep(r"server-started name=b listen=127\.0\.0\.1:%d" % b[1], start=mark),
          "b's start line")
    # c: its player's session closed, its flatline at the master, delisted,
    # its port closed once the flatline went.
    relay.wait_line(r"session-close peer=127\.0\.0\.4:\d+ .*reason=server-removed .*name=c$", 5,
                    start=mark)
    m.wait_line(r"heartbeat peer=127\.0\.0\.1:%d tag=ETFlatline-1" % c[1], 10)
    m.wait_line(r"q3-delisted server=127\.0\.0\.1:%d " % c[1], 10)
    wait_for(lambda: c[1] not in udp_socket_ports(relay.pid), 5, "c's port to close")
    # b: heartbeated and listed under its own port.
    m.wait_line(r"q3-listed server=127\.0\.0\.1:%d game=Quake3Arena" % b[1], 20)
    s = env.udp("127.0.0.41")
    listed, _ = q3_getservers(s, m.udp_addr, "getservers 71 empty full")
    check(sorted(listed or []) == sorted([a, b]), "master lists %r, not a and b %r" % (listed, [a, b]))
    # a: the same session all along, and it flows.
    wait_for(lambda: pa.answered_since(t_hup + 0.5), 10, "a's player answered after the reload")
    after = session_of(relay, "127.0.0.3", "a")
    check(after is not None and after["upstream_port"] == before["upstream_port"],
          "a's session replaced: %r -> %r" % (before, after))
    check(after["age_ms"] > before["age_ms"] and
          after["to_server"]["packets"] > before["to_server"]["packets"],
          "a's session did not go on: %r -> %r" % (before, after))
    check(not relay.grep(r"session-close peer=127\.0\.0\.3:", start=mark), "a's player was cut")
    check(relay.metrics()['rally_relay_server_reloads_total{outcome="ok"}'] == 1, "reloads ok")
    pc.close()

    # Bans of their own, before the bad files and the restart.
    st, _, _ = relay.api("PUT", "/servers/a/bans/127.0.0.9", {"reason": "a's"})
    check(st == 201, "a's ban -> %s" % st)
    st, _, _ = relay.api("PUT", "/servers/b/bans/127.0.0.10", {"reason": "b's"})
    check(st == 201, "b's ban -> %s" % st)

    # A bad file changes nothing and says why.
    good = servers_file(m, oa1, oa2, ["a", "b"])
    bad = good + "\n[server d]\nlisten = 127.0.0.1:0\nserver = 127.0.0.1:1\nbogus = 1\n"
    relay.write(bad)
    mark = len(relay.output())
    relay.signal(signal.SIGHUP)
    relay.wait_line(r'servers-reload-refused file=\S+ line=%d error="unknown key bogus" kept=2$'
                    % (bad.splitlines().index("bogus = 1") + 1), 10, start=mark)
    # ...and a file whose new server cannot bind (oa1's own port).
    relay.write(good + "\n[server d]\nlisten = 127.0.0.1:%d\nserver = 127.0.0.1:1\n" % oa1.addr[1])
    mark = len(relay.output())
    relay.signal(signal.SIGHUP)
    relay.wait_line(r'servers-reload-refused file=\S+ reason="\[server d\]: listen 127\.0\.0\.1:%d: '
                    r'Address already in use" kept=2$' % oa1.addr[1], 10, start=mark)
    check(sorted(relay.servers()) == ["a", "b"], "a refused reload changed the servers")
    check(relay.public("b") == b, "a refused reload moved b")
    check(relay.metrics()['rally_relay_server_reloads_total{outcome="refused"}'] == 2, "refusals")
    now = session_of(relay, "127.0.0.3", "a")
    check(now is not None and now["upstream_port"] == before["upstream_port"],
          "a refused reload touched a's session")

    # b changes (a limit): it restarts on its port, its sessions close, no
    # flatline, still listed, its ban kept.
    pb = Player(env, b, "127.0.0.5")
    wait_for(lambda: pb.answers, 10, "b's player answered")
    relay.write(servers_file(m, oa1, oa2, ["a", "b"], b_extra="max-sessions = 100\n"))
    mark = len(relay.output())
    mmark = len(m.output())
    t_restart = time.monotonic()
    relay.signal(signal.SIGHUP)
    relay.wait_line(r"servers-reloaded file=\S+ servers=2 added=- removed=- restarted=b kept=a$", 10,
                    start=mark)
    relay.wait_line(r"session-close peer=127\.0\.0\.5:\d+ .*reason=server-removed .*name=b$", 5,
                    start=mark)
    check(relay.public("b") == b, "b moved: %r -> %r" % (b, relay.public("b")))
    check(relay.servers()["b"]["max_sessions"] == 100, "b's new limit")
    wait_for(lambda: pb.answered_since(t_restart + 0.5), 10, "b's player served by the new b")
    st, bans, _ = relay.api("GET", "/servers/b/bans")
    check([x["ip"] for x in bans] == ["127.0.0.10"], "b's bans after its restart: %r" % bans)
    st, bans, _ = relay.api("GET", "/servers/a/bans")
    check([x["ip"] for x in bans] == ["127.0.0.9"], "a's bans: %r" % bans)
    # The new b heartbeats from the same port: the master refreshes it;
    # no flatline came from that port in between.
    m.wait_line(r"inforesponse peer=127\.0\.0\.1:%d .* listed=refresh" % b[1], 15, start=mmark)
    check(not m.grep(r"heartbeat peer=127\.0\.0\.1:%d tag=ETFlatline-1" % b[1], start=mmark),
          "a restarted server flatlined")
    check(not relay.grep(r"session-close peer=127\.0\.0\.3:", start=mark), "a's player was cut")

    # The same file again: kept, all of it.
    mark = len(relay.output())
    relay.signal(signal.SIGHUP)
    relay.wait_line(r"servers-reloaded file=\S+ servers=2 added=- removed=- restarted=- kept=a,b$",
                    10, start=mark)
    now = session_of(relay, "127.0.0.3", "a")
    check(now is not None and now["upstream_port"] == before["upstream_port"], "a's session")
    env.daemons_alive(relay, m, oa1, oa2)


run(scenario)
