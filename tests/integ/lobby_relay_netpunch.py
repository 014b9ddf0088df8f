#!/usr/bin/env python3
"""The dedicated relay lobby against netpunch 0.6.1.24's own peers.

Needs the loopback-only netpunch checkout of /tmp/netpunch (README-local.md
there); without it the scenario is skipped (exit 77). Every address is
127.0.0.1; netpunch instances take fixed ports found free (never
62100-62199, which netpunch treats as Steam tunnel endpoints).

1. Our relay, a netpunch joiner as its leader: its START GAME uploads the
   save to our relay, which stores it and starts it; a rally joiner and a
   netpunch joiner arriving later are each sent the stored world and
   start with it.
2. netpunch's relay (np host --relay-only), our joiner as its leader: our
   upload lands in netpunch's relay, which starts us; a netpunch joiner
   and a rally joiner arriving later receive the stored world."""

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys

from harness import Lobby, Proc, check, run, wait_for

NP = os.environ.get("RALLY_NETPUNCH", "/tmp/netpunch")
LOBBY_PY = os.path.join(NP, "netpunch", "lobby.py")
MiB = 1 << 20


class Ports:
    """UDP+TCP ports on 127.0.0.1 free right now, for netpunch (which needs
    one given); never 62100-62199."""

    def __init__(self, base=29800):
        self.next = base

    def take(self):
        while True:
            p = self.next
            self.next += 1
            if 62100 <= p <= 62199:
                continue
            ok = True
            for kind in (socket.SOCK_DGRAM, socket.SOCK_STREAM):
                s = socket.socket(socket.AF_INET, kind)
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
                finally:
                    s.close()
            if ok:
                return p


class NpLobby(Proc):
    """netpunch's lobby.py as /tmp/netpunch/np runs it, with the same view
    of its IPC files as harness.Lobby."""

    def __init__(self, env, ports, role, code=None, name="np", args=()):
        self.name_ = name
        self.io = os.path.join(env.dir, "io-np-%s-%d" % (name, len(env.procs)))
        os.makedirs(self.io)
        data = os.path.join(env.dir, "npdata-%s-%d" % (name, len(env.procs)))
        os.makedirs(data)
        self.udp_port = ports.take()
        argv = ["python3", LOBBY_PY, role] + ([code] if code else [])
        argv += ["--name", name, "--io-dir", self.io, "--local-port", str(self.udp_port),
                 "--rendezvous", "off", "--game-relay-port", str(ports.take()),
                 "--game-local-port", "9"] + list(args)
        dead = "http://127.0.0.1:9"
        extra = dict(TPF2MP_DATADIR=data, TPF2MP_LAN_IP="127.0.0.1", TPF2MP_LOG_IPS="1",
                     http_proxy=dead, https_proxy=dead, HTTP_PROXY=dead, HTTPS_PROXY=dead,
                     PYTHONDONTWRITEBYTECODE="1")
        super().__init__(env, "np-" + name, argv, extra_env=extra)
        self.name = name

    def wait_code(self, timeout=20):
        m = self.wait_line(r"^CODE=(\S+)$", timeout)
        return m.group(1)

    events = Lobby.events
    wait_event = Lobby.wait_event
    wait_status = Lobby.wait_status
    command = Lobby.command


def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def make_save(d, size):
    os.makedirs(d, exist_ok=True)
    p = os.path.join(d, "world.sav")
    with open(p, "wb") as f:
        f.write(os.urandom(size))
    with open(p + ".lua", "w") as f:
        f.write('return { ["lockstep.lua"] = { }, }\n')
    return p


def started(j, timeout=60):
    return j.wait_event(lambda e: e.get("type") == "start" and e.get("save") is True, timeout,
                        "%s's start" % j.name)


def has_world(j, sav, timeout=10):
    wait_for(lambda: os.path.exists(os.path.join(j.io, "incoming_save.sav")), timeout,
             "%s's incoming_save.sav" % j.name)
    check(sha(os.path.join(j.io, "incoming_save.sav")) == sha(sav), "%s's world" % j.name)


def ours_relay(env, ports):
    relay = Lobby(env, "host", name="relay", args=["--relay-only"])
    code = relay.wait_code()
    leader = NpLobby(env, ports, "join", code, "nalice")
    leader.wait_status("connected", "^joined the host$", 20)
    leader.wait_event(lambda e: e.get("type") == "roster" and e.get("host") == "nalice" and
                      e.get("relay") is True and e.get("letters") == {"nalice": "a"}, 10,
                      "the relay's roster naming nalice leader")
    sav = make_save(os.path.join(env.dir, "saves1"), 5 * MiB)
    leader.command(cmd="start", save=sav)
    relay.wait_line(r"relay-upload-begin name=\"nalice\"", 20)
    relay.wait_line(r"relay-upload-stored", 60)
    # Over the bulk channel: netpunch's leader dialled the port our
    # fbegin_ack named (TPF2BULK1 send), and the stream brought it all.
    check(relay.grep(r"xfer-recv-push sid=") and relay.grep(r"xfer-recv-tcp sid="),
          "the upload came over TCP: %r" % [ln for ln in relay.output() if "xfer-recv" in ln])
    started(leader)
    check(sha(os.path.join(relay.io, "incoming_save.sav")) == sha(sav), "our relay stored it")
    bob = Lobby(env, "join", code=code, name="bob")
    started(bob)
    has_world(bob, sav)
    ncarol = NpLobby(env, ports, "join", code, "ncarol")
    started(ncarol)
    has_world(ncarol, sav)
    r = ncarol.wait_event(lambda e: e.get("type") == "roster" and len(e.get("players", [])) == 3,
                          10, "three players")
    check(r["letters"] == {"nalice": "a", "bob": "b", "ncarol": "c"}, "letters: %r" % r)
    for p in (ncarol, bob, leader):
        p.command(cmd="quit")
    for p in (ncarol, bob, leader):
        p.wait_exit(15)


def netpunch_relay(env, ports):
    relay = NpLobby(env, ports, "host", name="nrelay", args=["--relay-only"])
    code = relay.wait_code()
    alice = Lobby(env, "join", code=code, name="alice")
    alice.wait_status("connected", "^joined the host$", 20)
    alice.wait_event(lambda e: e.get("type") == "roster" and e.get("host") == "alice" and
                     e.get("relay") is True, 10, "netpunch's roster naming alice leader")
    sav = make_save(os.path.join(env.dir, "saves2"), 5 * MiB)
    alice.command(cmd="start", save=sav)
    alice.wait_status("connected", r"^save uploaded -- the relay is sharing it\.\.\.$", 60)
    started(alice)
    check(sha(os.path.join(relay.io, "incoming_save.sav")) == sha(sav),
          "netpunch's relay stored our upload")
    # Pushed over netpunch's relay's listener (its fbegin_ack's tcp_port).
    check(alice.grep(r'xfer-send-tcp sid=\d+ name="[^"]*" how=push'),
          "our upload went over TCP: %r" % [ln for ln in alice.output() if "tcp" in ln])
    nbob = NpLobby(env, ports, "join", code, "nbob")
    started(nbob)
    has_world(nbob, sav)
    carol = Lobby(env, "join", code=code, name="carol")
    started(carol)
    has_world(carol, sav)
    r = carol.roster()
    check(r["letters"].get("alice") == "a" and r["relay"] is True and r["stored_max"] == 180,
          "netpunch's letters: %r" % r)
    for p in (carol, nbob, alice):
        p.command(cmd="quit")
    for p in (carol, nbob, alice):
        p.wait_exit(15)
    relay.command(cmd="quit")


def scenario(env):
    ports = Ports()
    ours_relay(env, ports)
    netpunch_relay(env, ports)


if not (os.path.exists(LOBBY_PY) and shutil.which("python3")):
    print("SKIP lobby_relay_netpunch: no netpunch checkout at %s" % NP)
    sys.exit(77)
run(scenario)
