#!/usr/bin/env python3
"""Hostile TCP clients against a host's dual-link hellos (netpunch-wire.md
§13, lobby_dual.h), while a real joiner's link carries on.

alice hosts, bob (rally-lobby) joins and his link comes up. mallory is
tools/lobby-peer: a joiner with the session key that joins as "mallory"
and seals link hellos with its own sealer on request; ghost is another
lobby-peer that never joins. Plain Python TCP clients then connect to the
host's TCP lobby port and send:
  - a stranger's hello (a seal of random bytes),
  - mallory's hello with its tag tampered,
  - a hello whose seal opens to another name than the one it says,
  - mallory's sealer claiming bob's name,
  - ghost's good hello (no such joiner: refused after the 10 s wait),
  - 300 bytes without a newline, and nothing at all (the 5 s timeout),
  - mallory's good hello with garbage after it in the same write (the
    link comes up, the length is out of bounds: closed),
  - a good hello, then a record that is not a sealed frame,
  - that good hello again (a replay),
  - 33 of ghost's hellos at once: 32 wait, the next is closed at once.
Each is closed and said in the log with its reason; bob's link never
closes, chat still crosses once each way, both lobbies stay up."""

import os
import re
import socket
import struct

from harness import Lobby, Peer, check, run, wait_for

VERSION = "0.6.1.24"


def connect(host):
    s = socket.create_connection(("127.0.0.1", host.udp_port), timeout=5)
    return s, s.getsockname()[1]


def closed(s, timeout=6):
    """Waits for the host to close s (EOF or a reset); what it sent first
    (nothing, for a refused hello) is returned."""
    s.settimeout(timeout)
    got = b""
    try:
        while True:
            b = s.recv(4096)
            if not b:
                return got
            got += b
    except ConnectionResetError:
        return got
    except socket.timeout:
        raise AssertionError("the host kept connection %d open" % s.getsockname()[1])
    finally:
        s.close()


def refused(host, port, reason, timeout=8, kind="dual"):
    return host.wait_line(r'%s-refused (?:tcp|peer)=127\.0\.0\.1:%d reason="%s"' % (
        kind, port, re.escape(reason)), timeout=timeout)


def scenario(env):
    host = Lobby(env, "host", name="alice")
    code = host.wait_code()
    host.wait_line(r"bulk-listening port=%d" % host.udp_port)
    bob = Lobby(env, "join", code=code, name="bob")
    bob.wait_status("connected", "^joined the host$")
    host.wait_line(r'dual-link-up peer=\S+ name="bob" ')
    bob.wait_line(r'dual-link-up peer=\S+ name="alice" ')

    mal = Peer(env, code, "mallory")
    mal.script({"send": {"t": "join", "version": VERSION, "name": "mallory", "mesh": False,
                         "recovery": 0, "batches": 1}})
    host.wait_line(r'join peer=\S+ name="mallory" new=1')
    ghost = Peer(env, code, "ghost")

    # The slow ones first: ghost's good hello waits 10 s for a join that
    # never comes; a silent connection waits 5 s for its hello.
    g, gport = connect(host)
    g.sendall(ghost.hellos("ghost")[0])
    quiet, qport = connect(host)

    # A stranger: no session key.
    s, port = connect(host)
    s.sendall(b"TPF2LINK1 mallory " + os.urandom(40).hex().encode() + b"\n")
    check(closed(s) == b"", "the host answered a stranger")
    refused(host, port, "bad seal")

    # mallory's hello, its tag tampered.
    h = bytearray(mal.hellos("mallory")[0])
    h[-2] = ord("0") if h[-2] != ord("0") else ord("1")
    s, port = connect(host)
    s.sendall(bytes(h))
    closed(s)
    refused(host, port, "bad seal")

    # A seal of "bob" under the name "mallory".
    s, port = connect(host)
    s.sendall(mal.hellos("mallory", sealed_as="bob")[0])
    closed(s)
    refused(host, port, "the sealed name differs")

    # mallory's sealer says it is bob.
    s, port = connect(host)
    s.sendall(mal.hellos("bob")[0])
    closed(s)
    refused(host, port, "the name is not its sealer's (mallory)")

    # 300 bytes and no newline (the listener's 256-byte cap).
    s, port = connect(host)
    s.sendall(b"TPF2LINK1 " + b"a" * 290)
    closed(s)
    refused(host, port, "hello over 256 bytes", kind="bulk")

    # A good hello with garbage right behind it, in one write: the link
    # comes up, its first record's length (0xffff) cannot be an E frame.
    s, port = connect(host)
    s.sendall(mal.hellos("mallory")[0] + b"\xff\xff" + b"junk" * 8)
    closed(s)
    host.wait_line(r'dual-link-up peer=\S+ name="mallory" tcp=127\.0\.0\.1:%d ' % port)
    refused(host, port, "a record's length is out of bounds")
    host.wait_line(r'dual-link-closed peer=\S+ name="mallory" .*reason="a record\'s length')

    # A good hello, then (a separate write, once it is up) a record of the
    # right size that is a plain D frame, not a sealed one.
    good = mal.hellos("mallory")[0]
    s, port = connect(host)
    s.sendall(good)
    host.wait_line(r'dual-link-up peer=\S+ name="mallory" tcp=127\.0\.0\.1:%d ' % port)
    s.sendall(struct.pack(">H", 40) + b"NP1:D" + b"{" * 35)
    closed(s)
    refused(host, port, "a record that is not a sealed frame")

    # The same hello again: the replay window has its nonce.
    s, port = connect(host)
    s.sendall(good)
    closed(s)
    refused(host, port, "replayed hello")

    # 33 good hellos nobody joined for: with ghost's first one, 32 wait;
    # the last is closed at once.
    many = ghost.hellos("ghost", 32)
    socks = []
    for line in many:
        c, cport = connect(host)
        c.sendall(line)
        socks.append((c, cport))
    last, lport = socks.pop()
    check(closed(last, timeout=3) == b"", "the 33rd waiting hello was answered")
    refused(host, lport, "32 wait already")

    # The silent one and ghost's first: their timeouts.
    closed(quiet)
    refused(host, qport, "no hello within 5 s", kind="bulk")
    closed(g, timeout=12)
    refused(host, gport, "matches no joiner")
    for c, cport in socks:
        closed(c, timeout=12)
        refused(host, cport, "matches no joiner")

    # bob was never touched: his link is up, chat crosses once each way.
    check(not host.grep(r'dual-link-closed .*name="bob"') and
          not bob.grep(r"dual-link-closed"), "bob's link closed")
    host.command(cmd="chat", text="still here")
    bob.command(cmd="chat", text="me too")
    for who in (host, bob):
        for text in ("still here", "me too"):
            wait_for(lambda: [e for e in who.events("chat") if e["text"] == text], 5,
                     "%s to see %r" % (who.name, text))
    wait_for(lambda: host.grep(r'dual-stats .* name="bob" link=up'), 25,
             "a stats line for bob's link")
    for who in (host, bob):
        check(sorted(e["text"] for e in who.events("chat")) == ["me too", "still here"],
              "%s chats: %r" % (who.name, who.events("chat")))
    env.daemons_alive(host, bob)
    host.command(cmd="quit")
    check(host.wait_exit(10) == 0, "the host's exit status")
    m = host.grep(r"dual-exit links_up=(\d+) refused=(\d+) too_many=(\d+) ")
    check(m, "no dual-exit line")
    up, ref, many_ = (int(x) for x in re.search(
        r"links_up=(\d+) refused=(\d+) too_many=(\d+)", m[-1]).groups())
    env.log(m[-1].split(" ", 1)[1])
    # bob's link and mallory's two; seven refusals, then ghost's first and
    # the 31 that waited with it (the two listener refusals are bulk's).
    check(up == 3 and ref == 7 + 1 + 31 and many_ == 1, "counters %d %d %d" % (up, ref, many_))


run(scenario)
