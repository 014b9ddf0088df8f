#!/usr/bin/env python3
"""Two real OpenArena servers behind one rally-relay (--servers FILE, two
public ports). Each is heartbeated to rally-master under its own public
port and listed there (getservers and qstat see both, each with its own
server's status through the relay); a player on each has a session, and
/sessions says which server; a ban scoped to one server (its own
bans.json, /servers/NAME/bans) cuts the player there and not on the other,
a global ban cuts both; each server's limits are its own (max-sessions);
/metrics lines are labelled server="NAME" (no unlabelled game-port line);
GET /servers and the health endpoints show each server's state, and a
stopped server turns its /servers/NAME/healthz to 503 while the other stays
up. --check-config reads the file (config-ok per server) and reports a bad
one as FILE:LINE; --servers and a per-server flag exclude each other."""

import json
import os
import signal
import subprocess
import threading
import time

from harness import (RELAY_BIN, Master, OAServer, RelayServers, check, first_token, parse_metrics,
                     q3_getservers, query, quakestat, run, wait_for)


class Player:
    """A client that keeps a session busy: getchallenge every second (the
    pace of this scenario's traffic; the pause is a wait on the stop
    event, so close() ends it at once). The engine answers getchallenge
    and getinfo from one IP - and every session of a relay reaches it from
    the relay's - with one token a second after a burst of 10
    (ioquake3's SVC_RateLimitAddress), so the players here share that
    token with the relay's probe and the master's challenge."""

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


def metric(relay, name, **labels):
    key = name + ("{" + ",".join('%s="%s"' % kv for kv in labels.items()) + "}" if labels else "")
    return relay.metrics().get(key)


def scenario(env):
    m = Master(env, args=["--q3-challenge", "1500"])
    oa1 = OAServer(env, hostname="rally-alpha", name="oa-alpha")
    oa2 = OAServer(env, hostname="rally-beta", name="oa-beta")
    text = """# two servers, one relay
[defaults]
master = 127.0.0.1:%d
heartbeat-tag = QuakeArena-1
heartbeat-interval = 3
probe-timeout = 300

[server alpha]
listen = 127.0.0.1:0
server = 127.0.0.1:%d

[server beta]
listen = 127.0.0.1:0
server = 127.0.0.1:%d
max-sessions = 5
""" % (m.udp_addr[1], oa1.addr[1], oa2.addr[1])

    # --check-config first: the file, then a broken one, then the flags.
    path = os.path.join(env.dir, "servers.conf")
    with open(path, "w") as f:
        f.write(text)
    r = subprocess.run([RELAY_BIN, "--servers", path, "--state-dir", os.path.join(env.dir, "cc"),
                        "--check-config", "--log", "plain"], capture_output=True, text=True,
                       timeout=10)
    check(r.returncode == 0, "check-config: %d %s" % (r.returncode, r.stderr))
    check("config-ok servers=2 bans=0" in r.stderr, "check-config: %r" % r.stderr)
    check("config-ok server=alpha upstream=127.0.0.1:%d bans=0" % oa1.addr[1] in r.stderr,
          "check-config: %r" % r.stderr)
    bad = os.path.join(env.dir, "bad.conf")
    with open(bad, "w") as f:
        f.write(text.replace("max-sessions = 5", "max-sessions = lots"))
    r = subprocess.run([RELAY_BIN, "--servers", bad, "--check-config", "--log", "plain",
                        "--state-dir", os.path.join(env.dir, "cc")],
                       capture_output=True, text=True, timeout=10)
    check(r.returncode == 1, "bad file: status %d" % r.returncode)
    check('servers-file-bad at=%s:15 error="max-sessions: expected a whole number in 1-65536"'
          % bad in r.stderr, "bad file: %r" % r.stderr)
    r = subprocess.run([RELAY_BIN, "--servers", path, "--listen", "127.0.0.1:0"],
                       capture_output=True, text=True, timeout=10)
    check(r.returncode == 2 and "--servers and --listen exclude each other" in r.stderr,
          "--servers with --listen: %d %r" % (r.returncode, r.stderr))

    relay = RelayServers(env, text)
    a, b = relay.addrs["alpha"][0], relay.addrs["beta"][0]
    check(a != b and a[1] != 0 and b[1] != 0, "two public ports: %r" % relay.addrs)

    # Each listed at the master under its own public port, from the
    # relay's heartbeats (the servers themselves heartbeat nobody).
    for port in (a[1], b[1]):
        m.wait_line(r"q3-listed server=127\.0\.0\.1:%d game=Quake3Arena protocol=71" % port, 20)
    s = env.udp("127.0.0.41")
    listed, _ = q3_getservers(s, m.udp_addr, "getservers 71 empty full")
    check(sorted(listed or []) == sorted([a, b]), "master lists %r, not %r" % (listed, [a, b]))
    n, rows = quakestat("-q3m,71", m.udp_addr, srcip="127.0.0.42")
    check(n == 2, "qstat: %d servers" % n)
    names = {row[1]: row[2] for row in rows}
    check(names == {"127.0.0.1:%d" % a[1]: "rally-alpha", "127.0.0.1:%d" % b[1]: "rally-beta"},
          "qstat read through the relay: %r" % rows)

    # A player on each, and one (127.0.0.5) on both.
    pa = Player(env, a, "127.0.0.3")
    pb = Player(env, b, "127.0.0.4")
    both_a = Player(env, a, "127.0.0.5")
    both_b = Player(env, b, "127.0.0.5")
    wait_for(lambda: all(p.answers for p in (pa, pb, both_a, both_b)), 10,
             "every player answered by its server")
    st, sessions, _ = relay.api("GET", "/sessions")
    mine = {(x["server"], x["client_ip"]) for x in sessions if x["client_ip"] != "127.0.0.1"}
    check({("alpha", "127.0.0.3"), ("beta", "127.0.0.4"), ("alpha", "127.0.0.5"),
           ("beta", "127.0.0.5")} <= mine, "/sessions: %r" % sessions)
    st, only, _ = relay.api("GET", "/sessions?server=beta")
    check(st == 200 and only and all(x["server"] == "beta" for x in only), "?server=beta: %r" % only)
    st, body, _ = relay.api("GET", "/sessions?server=gamma")
    check(st == 404, "?server=gamma -> %s" % st)

    # A ban of alpha's own: 127.0.0.5 loses alpha, keeps beta.
    st, body, _ = relay.api("PUT", "/servers/alpha/bans/127.0.0.5", {"reason": "alpha only"})
    t_ban = time.monotonic()
    check(st == 201 and body["sessions_closed"] == 1, "PUT alpha ban: %s %r" % (st, body))
    relay.wait_line(r"ban-added ip=127\.0\.0\.5 duration=0 sessions-closed=1 name=alpha")
    wait_for(lambda: metric(relay, "rally_relay_drops_total", server="alpha", reason="banned") >= 2
             and both_b.answered_since(t_ban), 20,
             "127.0.0.5 dropped on alpha, answered on beta")
    check(not both_a.answered_since(t_ban + 0.05), "banned on alpha, still answered there")
    check(metric(relay, "rally_relay_drops_total", server="beta", reason="banned") == 0,
          "beta dropped a datagram as banned")
    with open(os.path.join(relay.state_dir, "servers", "alpha", "bans.json")) as f:
        check([x["ip"] for x in json.load(f)["bans"]] == ["127.0.0.5"], "alpha's bans.json")
    st, bans, _ = relay.api("GET", "/servers/alpha/bans")
    check(st == 200 and [x["ip"] for x in bans] == ["127.0.0.5"], "alpha's bans: %r" % bans)
    st, bans, _ = relay.api("GET", "/servers/beta/bans")
    check(st == 200 and bans == [], "beta's bans: %r" % bans)
    st, bans, _ = relay.api("GET", "/bans")
    check(st == 200 and bans == [], "global bans: %r" % bans)
    check(metric(relay, "rally_relay_server_bans", server="alpha") == 1, "alpha's bans gauge")
    st, _, _ = relay.api("PUT", "/servers/gamma/bans/127.0.0.5", {"reason": "x"})
    check(st == 404, "ban on a server that is not there -> %s" % st)
    st, _, _ = relay.api("PUT", "/servers/alpha/bans/not-an-ip", {"reason": "x"})
    check(st == 400, "bad IP -> %s" % st)
    st, _, _ = relay.api("DELETE", "/servers/alpha/bans/127.0.0.5")
    check(st == 204, "DELETE alpha ban -> %s" % st)
    t_lift = time.monotonic()
    wait_for(lambda: both_a.answered_since(t_lift), 20, "127.0.0.5 back on alpha")

    # A global ban: both servers drop it.
    st, body, _ = relay.api("PUT", "/bans/127.0.0.5", {"reason": "everywhere", "duration": 60})
    check(st == 201 and body["sessions_closed"] == 2, "global ban: %s %r" % (st, body))
    t_g = time.monotonic()
    wait_for(lambda: metric(relay, "rally_relay_drops_total", server="beta", reason="banned") >= 1,
             10, "beta to drop the globally banned address")
    check(not both_a.answered_since(t_g + 0.05) and not both_b.answered_since(t_g + 0.05),
          "globally banned, still answered")
    both_a.close()
    both_b.close()
    wait_for(lambda: pa.answered_since(t_g), 20, "alpha's own player answered after the ban")
    pa.close()
    pb.close()

    # Limits are per server: beta takes 5 sessions, alpha many more.
    extra = [env.udp("127.0.1.%d" % i) for i in range(1, 9)]
    for x in extra:
        x.sendto(b"\xff\xff\xff\xffgetchallenge", b)
        x.sendto(b"\xff\xff\xff\xffgetchallenge", a)
    wait_for(lambda: metric(relay, "rally_relay_drops_total", server="beta",
                            reason="session_cap") >= 1, 5, "beta's session cap")
    # (the 8 getchallenges: queries, answered from alpha's cache, open none)
    wait_for(lambda: metric(relay, "rally_relay_sessions", server="alpha") >= 8, 5,
             "alpha's sessions past beta's cap")
    check(metric(relay, "rally_relay_sessions", server="beta") == 5, "beta over its cap")
    check(metric(relay, "rally_relay_drops_total", server="alpha", reason="session_cap") == 0,
          "alpha hit a cap that is beta's")

    # Metrics: labelled per server, no unlabelled game-port line. (The
    # burst above may have cost a probe its engine token: the next cycle
    # finds both servers up again.)
    wait_for(lambda: metric(relay, "rally_relay_server_up", server="alpha") == 1 and
             metric(relay, "rally_relay_server_up", server="beta") == 1, 20,
             "both servers up")
    met = relay.metrics()
    check("rally_relay_sessions" not in met, "an unlabelled sessions line: %r" % met)
    for name in ("alpha", "beta"):
        check(met['rally_relay_packets_total{server="%s",direction="to_server"}' % name] > 0,
              "%s: packets to server" % name)
        check(met['rally_relay_server_up{server="%s"}' % name] == 1, "%s: server_up" % name)
        check(met['rally_relay_heartbeats_total{server="%s",master="127.0.0.1:%d",outcome="heartbeat"}'
                  % (name, m.udp_addr[1])] >= 1, "%s: heartbeats" % name)
    check(met["rally_relay_servers"] == 2, "servers gauge")

    # /servers and health.
    sv = relay.servers()
    check(set(sv) == {"alpha", "beta"}, "/servers: %r" % sv)
    check(sv["alpha"]["listen"] == ["127.0.0.1:%d" % a[1]], "alpha listen: %r" % sv["alpha"])
    check(sv["alpha"]["server"] == "127.0.0.1:%d" % oa1.addr[1], "alpha server: %r" % sv["alpha"])
    check(sv["beta"]["state"] == "up" and sv["beta"]["max_sessions"] == 5, "beta: %r" % sv["beta"])
    hb = sv["alpha"]["heartbeats"][0]
    check(hb["master"] == "127.0.0.1:%d" % m.udp_addr[1] and hb["heartbeat"] >= 1 and
          hb["addresses"] == ["127.0.0.1:%d" % m.udp_addr[1]], "alpha heartbeats: %r" % hb)
    st, one, _ = relay.api("GET", "/servers/beta")
    check(st == 200 and one["name"] == "beta" and 1 <= one["sessions"] <= 5,
          "/servers/beta: %r" % one)
    st, body, _ = relay.api("GET", "/healthz", token="")
    check(st == 200 and body["status"] == "ok" and
          body["servers"] == {"alpha": "up", "beta": "up"} and
          sorted(body["listing"]) == ["alpha", "beta"], "/healthz: %s %r" % (st, body))
    st, body, _ = relay.api("GET", "/servers/beta/healthz", token="")
    check(st == 200 and body["status"] == "ok" and body["state"] == "up", "beta healthz: %r" % body)
    st, body, _ = relay.api("GET", "/servers/gamma/healthz", token="")
    check(st == 404, "gamma healthz -> %s" % st)
    st, body, _ = relay.api("GET", "/servers", token="")
    check(st == 401, "/servers without a token -> %s" % st)
    # Paths that name no server or no endpoint, and wrong methods.
    for path, want in (("/servers/ALPHA", 404), ("/servers/../bans", 404), ("/servers/", 404),
                       ("/servers//bans", 404), ("/servers/alpha/nope", 404),
                       ("/servers/alpha/healthz/x", 404), ("/servers/" + "a" * 300, 404),
                       ("/servers/alpha/bans/", 405)):
        st, body, _ = relay.api("GET", path)
        check(st == want, "GET %s -> %s %r" % (path, st, body))
    for method, path, want in (("POST", "/servers", 405), ("DELETE", "/servers/alpha", 405),
                               ("POST", "/servers/alpha/bans", 405),
                               ("PUT", "/servers/alpha/bans/", 400),
                               ("PUT", "/servers/alpha/healthz", 405)):
        st, body, hdrs = relay.api(method, path, {"reason": "x"})
        check(st == want, "%s %s -> %s %r" % (method, path, st, body))
        if want == 405:
            check("Allow" in hdrs, "%s %s: no Allow header" % (method, path))

    # beta's server stops answering: its health turns 503, alpha's not.
    # Only lines printed from now on count: on a loaded machine beta may
    # have missed three probes earlier and come back since.
    mark = len(relay.output())
    oa2.signal(signal.SIGSTOP)
    env.cleanups.append(lambda: oa2.signal(signal.SIGCONT))
    relay.wait_line(r"server-down server=127\.0\.0\.1:%d attempts=3 name=beta" % oa2.addr[1], 15,
                    start=mark)
    st, body, _ = relay.api("GET", "/servers/beta/healthz", token="")
    check(st == 503 and body["status"] == "down", "beta down: %s %r" % (st, body))
    st, body, _ = relay.api("GET", "/servers/alpha/healthz", token="")
    check(st == 200, "alpha after beta went down: %s %r" % (st, body))
    check(metric(relay, "rally_relay_server_up", server="beta") == 0, "beta server_up")
    oa2.signal(signal.SIGCONT)
    relay.wait_line(r"server-up server=127\.0\.0\.1:%d name=beta" % oa2.addr[1], 15, start=mark)
    env.daemons_alive(relay, m, oa1, oa2)

    # Stopped: both flatline.
    t_stop = time.monotonic()
    check(relay.stop() == 0, "relay exit status")
    for port in (a[1], b[1]):
        m.wait_line(r"heartbeat peer=127\.0\.0\.1:%d tag=ETFlatline-1" % port, 5)
    check(time.monotonic() - t_stop < 5, "flatlines took too long")


run(scenario)
