#!/usr/bin/env python3
"""rally-lobby host --metrics: what a relay lobby's operator scrapes.

A real rally-master on loopback (with relay ports on an address of this
test's own); a dedicated relay lobby (`host --relay-only`) publishing to it
and polling its knocks, advertising a LAN candidate that goes nowhere so
that every joiner comes in through a knock, with --metrics 127.0.0.1:0.
Before anyone joins: /metrics is valid Prometheus text (promtool check
metrics when there), every family has HELP and TYPE, the announcement was
taken (publish ok, last success stamped), polls answered. Three star
joiners come in with a bridge each and exchange game frames through the
relay: peers by path match the relay's own traversal lines, joins
accepted 3, frames and bytes from peers are what the bridges sent, each
went on to the two others, knocks answered; /metrics answers all along
while the frames flow. A joiner of another protocol version is refused
(joins version 1). bob leaves: the gauge drops to 2 and peers_left
reason left counts him. alice, leading, uploads a world: the upload is
stored, the round to carol ok, its bytes counted. Bad input at the metrics port (garbage, a request
head over libmicrohttpd's 16 KiB, idle connections up to the per-address
cap of 4, POST, unknown paths) gets errors or a close, and disturbs nothing:
the lobby keeps its players and frames flow again. The master stopped,
the announcements and polls are counted failed.

Then the flags: a non-loopback --metrics without a token file is refused
at start with a clear message (exit 2, nothing bound); a token shorter
than 32 characters is refused naming the file (exit 1), a taken metrics
port too (before ready); with a token file, /metrics without or with a
wrong token is 401 (counted), the right one 200, /healthz open; SIGHUP
takes a rotated token and keeps the old one when the new file is bad."""

import http.client as httpclient
import os
import re
import shutil
import signal
import socket
import subprocess
import threading

from harness import (LOBBY_BIN, Bridge, Lobby, Master, check, http, parse_metrics,
                     private_loopback, run, wait_for)

FRAMES = 300
SIZE = 64
SAVE = 1 << 20


def metrics_port(lobby):
    return int(lobby.wait_line(r"metrics-listening metrics=127\.0\.0\.1:(\d+) ", 10).group(1))


def scrape(port, token=None):
    st, text, hdrs = http("GET", "http://127.0.0.1:%d/metrics" % port, token=token)
    check(st == 200, "GET /metrics -> %s %r" % (st, text))
    check(hdrs.get("Content-Type", "").startswith("text/plain; version=0.0.4"),
          "content type %r" % hdrs.get("Content-Type"))
    return text, parse_metrics(text)


def val(port, key):
    return scrape(port)[1].get(key, -1)


def check_format(env, text):
    """Every sample's family has HELP and TYPE; promtool agrees when there."""
    helped = set(re.findall(r"^# HELP (\S+) ", text, re.M))
    typed = set(re.findall(r"^# TYPE (\S+) ", text, re.M))
    names = set(re.findall(r"^([a-z_]+)[{ ]", text, re.M))
    check(names and names <= helped and names <= typed,
          "families without HELP/TYPE: %r" % sorted(names - (helped & typed)))
    check(all(n.startswith("rally_lobby_") for n in names), "names: %r" % sorted(names))
    if shutil.which("promtool"):
        r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                           text=True, timeout=30)
        check(r.returncode == 0, "promtool check metrics: %s" % (r.stdout + r.stderr))
        env.log("promtool check metrics: ok (%d families)" % len(names))


def raw_tcp(port, data, read=True):
    """Sends data, returns what came back before the server closed (or b"")."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        try:
            s.sendall(data)
        except OSError:
            return b""
        if not read:
            return b""
        try:
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server answered and closed already
        out = b""
        while True:
            try:
                b = s.recv(65536)
            except OSError:
                break
            if not b:
                break
            out += b
        return out
    finally:
        s.close()


def refused(port):
    """True when a request on a new connection is cut off without an answer."""
    try:
        http("GET", "http://127.0.0.1:%d/healthz" % port, timeout=2)
    except OSError:
        return True
    return False


def answers(port):
    try:
        return val(port, "rally_lobby_max_players") == 200
    except OSError:
        return False


def scenario(env):
    rip = private_loopback()
    m = Master(env, args=["--relay-ip", rip, "--relay-bind", rip, "--relay-ports",
                          "29610-29619"])
    url = m.url("")
    io = os.path.join(env.dir, "relay-io")
    relay = Lobby(env, "host", name="relay", io=io, args=[
        "--relay-only", "--publish", url, "--public", "--lobby-name", "Metrics",
        "--metrics", "127.0.0.1:0"])
    port = metrics_port(relay)
    code = relay.wait_code()

    text, mt = scrape(port)
    check_format(env, text)
    check(mt['rally_lobby_info{version="%s",protocol="0.6.1.24",role="relay"}' %
             re.search(r'version="([^"]+)"', text).group(1)] == 1, "info: %r" % text[:300])
    check(mt["rally_lobby_start_time_seconds"] > 1.7e9, "start time")
    check(sum(v for k, v in mt.items() if k.startswith("rally_lobby_peers{")) == 0, "no peers")
    wait_for(lambda: val(port, 'rally_lobby_publish_total{outcome="ok"}') >= 1, 12,
             "the first announcement to be taken")
    mt = scrape(port)[1]
    check(mt["rally_lobby_publish_last_success_timestamp_seconds"] >=
          mt["rally_lobby_start_time_seconds"], "publish stamped")
    check(mt["rally_lobby_publish_enabled"] == 1, "publish enabled")
    st, h, _ = http("GET", "http://127.0.0.1:%d/healthz" % port)
    check(st == 200 and h["status"] == "ok" and h["role"] == "relay" and h["peers"] == 0 and
          h["publish_last_ok_age_s"] is not None, "healthz: %r" % h)

    # Three star joiners, each with its bridge.
    names = ["alice", "bob", "carol"]
    bridges, joiners = {}, {}
    for i, n in enumerate(names):
        bridges[n] = Bridge(env, i + 1, send=FRAMES, size=SIZE, rate=100, duration_ms=6000,
                            name="bridge-" + n, wait_go=True)
        joiners[n] = Lobby(env, "join", code=code, name=n, args=[
            "--no-mesh", "--game-local-port", str(bridges[n].port)])
        bridges[n].connect(joiners[n])
    for n in names:
        joiners[n].wait_status("connected", "^joined the host$", timeout=30)
    wait_for(lambda: (relay.roster() or {}).get("players") == names, 10, "the roster")
    mt = scrape(port)[1]
    paths = {}
    for ln in relay.grep(r"traversal role=host peer="):
        p = re.search(r"path=(\w+)", ln).group(1)
        paths[p] = paths.get(p, 0) + 1
    check(sum(paths.values()) == 3, "three traversal lines: %r" % paths)
    for p in ("lan", "public", "v6", "punched", "relay"):
        check(mt['rally_lobby_peers{path="%s"}' % p] == paths.get(p, 0),
              "peers by path %s: %r against the log's %r" % (p, mt, paths))
    check(mt['rally_lobby_joins_total{outcome="accepted"}'] == 3, "joins accepted")
    env.log("peers by path: %r" % paths)

    # Frames through the relay; /metrics asked all along.
    stop = threading.Event()
    answered, failures = [0], []

    def scraper():
        # One kept-alive connection: thousands of closed ones would leave
        # as many loopback ports in TIME_WAIT, which the lobbies of tests
        # running beside this one could then not bind.
        conn = httpclient.HTTPConnection("127.0.0.1", port, timeout=5)
        while not stop.is_set():
            try:
                conn.request("GET", "/metrics")
                r = conn.getresponse()
                body = r.read().decode()
                if r.status != 200 or "rally_lobby_game_frames_total" not in body:
                    failures.append("%s %r" % (r.status, body[:80]))
                answered[0] += 1
            except Exception as e:  # noqa: BLE001 - reported below
                failures.append(repr(e))
                conn.close()
                conn = httpclient.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.close()
    t = threading.Thread(target=scraper, daemon=True)
    t.start()
    for n in names:
        bridges[n].go()
    res = {n: bridges[n].result(40) for n in names}
    stop.set()
    t.join(10)
    check(not failures, "/metrics failed while busy: %r" % failures[:3])
    check(answered[0] >= 5, "only %d scrapes answered while frames flowed" % answered[0])
    sent = sum(r["sent"] for r in res.values())
    check(sent == 3 * FRAMES, "bridges sent %d" % sent)

    def frames_settled():
        mt = scrape(port)[1]
        got = mt['rally_lobby_game_frames_total{direction="from_peer"}']
        return mt if got == sent else None
    mt = wait_for(frames_settled, 10, "the relay to count every frame the bridges sent")
    check(mt['rally_lobby_game_bytes_total{direction="from_peer"}'] == sent * SIZE, "bytes in")
    check(mt['rally_lobby_game_frames_total{direction="to_peer"}'] == 2 * sent,
          "each frame to the two others: %r" % mt['rally_lobby_game_frames_total{direction="to_peer"}'])
    check(mt['rally_lobby_game_bytes_total{direction="to_peer"}'] == 2 * sent * SIZE, "bytes out")
    check(mt['rally_lobby_game_frames_total{direction="to_game"}'] == 0, "a relay has no game")
    got = sum(f["frames"] for r in res.values() for f in r["from"].values())
    check(got <= 2 * sent and got >= 2 * sent * 0.95, "the bridges got %d of %d" % (got, 2 * sent))
    check(mt["rally_lobby_datagrams_total{direction=\"in\"}"] >= sent, "datagrams in")
    env.log("frames: sent %d, relayed %d, received %d; %d scrapes while busy" % (
        sent, 2 * sent, got, answered[0]))

    # Another protocol version: refused, counted.
    odd = Lobby(env, "join", code=code, name="odd", args=[
        "--no-mesh", "--protocol-version", "0.0.0.1"])
    wait_for(lambda: val(port, 'rally_lobby_joins_total{outcome="version"}') >= 1, 30,
             "the version refusal counted")
    odd.wait_exit(30)

    # bob leaves: the gauge drops.
    joiners["bob"].command(cmd="quit")
    joiners["bob"].wait_exit(10)
    wait_for(lambda: sum(v for k, v in scrape(port)[1].items()
                         if k.startswith("rally_lobby_peers{")) == 2, 10, "peers 2")
    mt = scrape(port)[1]
    check(mt['rally_lobby_peers_left_total{reason="left"}'] == 1, "bob left")
    check(mt['rally_lobby_peers_left_total{reason="silent"}'] == 0, "nobody silent")

    # alice leads: her START GAME uploads a world, the relay keeps it and
    # sends it to carol.
    save = os.path.join(env.dir, "saves", "world.sav")
    os.makedirs(os.path.dirname(save))
    with open(save, "wb") as f:
        f.write(os.urandom(SAVE))
    with open(save + ".lua", "w") as f:
        f.write('return { ["lockstep.lua"] = { }, }\n')
    joiners["alice"].command(cmd="start", save=save)
    for n in ("alice", "carol"):
        joiners[n].wait_event(lambda e: e == {"type": "start", "save": True}, 60,
                              "%s's start" % n)
    mt = wait_for(lambda: (lambda mt: mt if mt['rally_lobby_save_rounds_total{outcome="ok"}'] == 1
                           else None)(scrape(port)[1]), 10, "the round counted")
    check(mt['rally_lobby_uploads_total{outcome="stored"}'] == 1, "the upload stored")
    check(mt['rally_lobby_uploads_total{outcome="failed"}'] == 0, "no upload failed")
    check(mt['rally_lobby_save_targets_total{outcome="done"}'] == 1, "carol served: %r" %
          mt['rally_lobby_save_targets_total{outcome="done"}'])
    check(mt['rally_lobby_save_rounds_total{outcome="failed"}'] == 0, "no round failed")
    sent_bytes = (mt['rally_lobby_save_bytes_sent_total{transport="udp"}'] +
                  mt['rally_lobby_save_bytes_sent_total{transport="tcp"}'])
    check(sent_bytes >= SAVE, "save bytes sent %d of %d" % (sent_bytes, SAVE))
    # The listener shares the UDP port's number: when another process holds
    # that TCP port the lobby says so and saves go over UDP alone.
    if relay.grep(r"bulk-listening port="):
        check(mt['rally_lobby_bulk_connections_total{event="accepted"}'] >= 1,
              "the bulk listener took the upload or carol's pull")
    env.log("save: %d bytes to carol (udp %d, tcp %d); bulk connections %d" % (
        SAVE, mt['rally_lobby_save_bytes_sent_total{transport="udp"}'],
        mt['rally_lobby_save_bytes_sent_total{transport="tcp"}'],
        mt['rally_lobby_bulk_connections_total{event="accepted"}']))

    # Bad input at the metrics port.
    out = raw_tcp(port, b"\x00\xff garbage \r\n\r\n" * 4)
    check(out == b"" or out.startswith(b"HTTP/1.1 4"), "garbage: %r" % out[:80])
    out = raw_tcp(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 40000 +
                  b"\r\n\r\n")
    check(out == b"" or re.match(rb"HTTP/1\.1 4\d\d", out), "oversize head: %r" % out[:80])
    env.log("an oversize head: %r" % (out.split(b"\r\n", 1)[0] or b"closed"))
    st, _, _ = http("POST", "http://127.0.0.1:%d/metrics" % port, raw=b"x")
    check(st == 405, "POST /metrics -> %s" % st)
    st, _, _ = http("GET", "http://127.0.0.1:%d/admin" % port)
    check(st == 404, "GET /admin -> %s" % st)
    # Four idle connections from one address are all it takes (the per-IP
    # limit): a fifth is closed at once; closed, /metrics answers again.
    idle = [socket.create_connection(("127.0.0.1", port), timeout=2) for _ in range(4)]
    wait_for(lambda: refused(port), 10, "a fifth connection from 127.0.0.1 to be refused")
    for c in idle:
        c.close()
    wait_for(lambda: answers(port), 15, "/metrics to answer again after the idle connections")
    # Still playing: a chat crosses, and the two players are in.
    joiners["alice"].command(cmd="chat", text="after the noise")
    joiners["carol"].wait_event(lambda e: e.get("type") == "chat" and
                                e.get("text") == "after the noise", 10, "chat after the noise")
    check(sum(v for k, v in scrape(port)[1].items() if k.startswith("rally_lobby_peers{")) == 2,
          "two players still in")


    # --- the flags ---
    bad = subprocess.run([LOBBY_BIN, "host", "--relay-only", "--io-dir", io, "--stun", "off",
                          "--metrics", "0.0.0.0:0"], capture_output=True, text=True, timeout=10)
    check(bad.returncode == 2 and "not a loopback address" in bad.stderr and
          "--metrics-token-file" in bad.stderr, "non-loopback refused: %r" % bad.stderr)
    short = os.path.join(env.dir, "short.token")
    with open(short, "w") as f:
        f.write("tooshort\n")
    tok = "lobby-metrics-token-0123456789abcdefXYZ"
    good = os.path.join(env.dir, "good.token")
    with open(good, "w") as f:
        f.write(tok + "\n")
    ok = subprocess.run([LOBBY_BIN, "--check-config", "host", "--metrics", "0.0.0.0:29480",
                         "--metrics-token-file", good], capture_output=True, text=True,
                        timeout=10)
    check(ok.returncode == 0, "a non-loopback address with a token file: %r" % ok.stderr)
    h2 = Lobby(env, "host", name="tokhost", wait_ready=False, args=[
        "--metrics", "127.0.0.1:0", "--metrics-token-file", short])
    check(h2.wait_exit(10) == 1, "a short token refused")
    check(h2.grep(r"metrics-token-refused file=%s reason=\"shorter than 32" % re.escape(short)),
          "the reason, naming the file: %r" % h2.output()[-5:])
    # A player's host (not a relay) polls its knocks: its LAN candidate
    # goes nowhere, so dave comes in through a knock.
    h3 = Lobby(env, "host", name="tokhost2", args=[
        "--metrics", "127.0.0.1:0", "--metrics-token-file", good, "--lan-ip", "127.0.0.1:1",
        "--rendezvous", url])
    p3 = metrics_port(h3)
    st, _, hdrs = http("GET", "http://127.0.0.1:%d/metrics" % p3)
    check(st == 401 and "Bearer" in hdrs.get("WWW-Authenticate", ""), "no token -> %s" % st)
    st, _, _ = http("GET", "http://127.0.0.1:%d/metrics" % p3, token=tok + "x")
    check(st == 401, "wrong token -> %s" % st)
    text, mt3 = scrape(p3, token=tok)
    check(mt3["rally_lobby_metrics_unauthorized_total"] == 2, "two refused")
    check('role="host"' in text, "a player's lobby says role host")
    st, h, _ = http("GET", "http://127.0.0.1:%d/healthz" % p3)
    check(st == 200 and h["role"] == "host", "healthz open: %r" % h)
    h3.wait_line(r"metrics-unauthorized peer=127\.0\.0\.1:\d+", 5)
    # Its port taken: a second lobby says so and stops before binding anything.
    clash = Lobby(env, "host", name="clash", wait_ready=False, args=[
        "--metrics", "127.0.0.1:%d" % p3])
    check(clash.wait_exit(10) == 1, "a taken metrics port stops the start")
    check(clash.grep(r"metrics-bind-fail metrics=127\.0\.0\.1:%d: Address already in use" % p3)
          and not clash.grep(r"^ready "), "the reason, before ready: %r" % clash.output()[-4:])
    # A token rotated: SIGHUP takes the new one; a bad file keeps it.
    tok2 = "rotated-" + tok
    with open(good, "w") as f:
        f.write(tok2 + "\n")
    h3.signal(signal.SIGHUP)
    h3.wait_line(r"metrics-token-reloaded file=", 5)
    st, _, _ = http("GET", "http://127.0.0.1:%d/metrics" % p3, token=tok)
    check(st == 401, "the old token after the rotation -> %s" % st)
    scrape(p3, token=tok2)
    with open(good, "w") as f:
        f.write("short\n")
    h3.signal(signal.SIGHUP)
    h3.wait_line(r"metrics-token-reload-refused file=\S+ kept=old", 5)
    scrape(p3, token=tok2)
    tok = tok2
    code3 = h3.wait_code()
    dave = Lobby(env, "join", code=code3, name="dave", args=["--rendezvous", url])
    dave.wait_status("connected", "^joined the host$", timeout=30)
    mt3 = scrape(p3, token=tok)[1]
    check(mt3['rally_lobby_knock_polls_total{outcome="ok"}'] >= 1, "polls answered")
    check(mt3['rally_lobby_knocks_total{outcome="answered"}'] >= 1, "dave's knock answered")
    h3.wait_line(r"traversal role=host peer=\"dave\"")
    path = re.search(r"path=(\w+)", h3.grep(r"traversal role=host peer=\"dave\"")[0]).group(1)
    check(mt3['rally_lobby_peers{path="%s"}' % path] == 1, "dave by %s" % path)
    env.log("dave came in by %s after %d knock(s) answered" % (
        path, mt3['rally_lobby_knocks_total{outcome="answered"}']))

    # The master gone: announcements and polls fail, counted.
    m.stop()
    wait_for(lambda: val(port, 'rally_lobby_publish_total{outcome="failed"}') >= 1, 20,
             "a failed announcement counted")
    wait_for(lambda: scrape(p3, token=tok)[1][
        'rally_lobby_knock_polls_total{outcome="failed"}'] >= 1, 10, "a failed poll counted")
    env.daemons_alive(relay, joiners["alice"], joiners["carol"], h3, dave)



run(scenario)
