#!/usr/bin/env python3
"""A dual link whose other end stops reading costs the host a bounded
queue, then the link (lobby_dual.h: 1,024 frames per link, the oldest
dropped; a socket that takes nothing for 10 s closes the link).

alice hosts with a game bridge sending 1,400-byte frames at 1,000 a
second; bob (rally-lobby) joins and his link is up. mallory is
tools/lobby-peer: a joined peer whose link this test opens with mallory's
own hello and then never reads. Once the kernel's buffers are full the
host drops mallory's oldest queued frames, counts them, and after 10 s
without a byte taken closes mallory's link as stalled. bob's link is
untouched, his chat still arrives, and mallory, alive over UDP, stays in
the lobby."""

import json
import os
import re
import socket
import subprocess

from harness import BUILD, Bridge, Lobby, Proc, check, run, wait_for

PEER_BIN = os.path.join(BUILD, "tools", "lobby-peer")


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for ln in f:
            if ln.startswith("VmRSS:"):
                return int(ln.split()[1])
    return 0


def scenario(env):
    hb = Bridge(env, 1, send=40000, size=1400, rate=1000, duration_ms=40000, name="bridge-alice",
                wait_go=True)
    host = Lobby(env, "host", name="alice", args=["--game-local-port", str(hb.port)])
    hb.connect(host)
    code = host.wait_code()
    bob = Lobby(env, "join", code=code, name="bob")
    bob.wait_status("connected", "^joined the host$")
    host.wait_line(r'dual-link-up peer=\S+ name="bob" ')

    mal = Proc(env, "mallory", [PEER_BIN, code], stdin=subprocess.PIPE)
    mal.wait_line(r"^connected$", timeout=10)
    mal.p.stdin.write((json.dumps({"send": {"t": "join", "version": "0.6.1.24", "name": "mallory",
                                            "mesh": False, "recovery": 0, "batches": 1}}) + "\n" +
                       json.dumps({"link_hello": "mallory"}) + "\n").encode())
    mal.p.stdin.flush()
    line = mal.wait_line(r'^\{"link_hello": "([0-9a-f]+)"\}$', timeout=5)
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", host.udp_port))
    env.socks.append(s)
    s.sendall(bytes.fromhex(line.group(1)))
    host.wait_line(r'dual-link-up peer=\S+ name="mallory" tcp=127\.0\.0\.1:%d ' %
                   s.getsockname()[1])
    rss0 = rss_kib(host.pid)

    hb.go()
    m = host.wait_line(r'dual-link-closed peer=\S+ name="mallory" sent=(\d+) received=0 '
                       r'queue_drops=(\d+) reason="stalled', timeout=60)
    sent, drops = int(m.group(1)), int(m.group(2))
    rss1 = rss_kib(host.pid)
    env.log("mallory's link: %d frames taken by the socket, %d dropped from the queue; "
            "host RSS %d -> %d KiB" % (sent, drops, rss0, rss1))
    # The cap acted: frames went from the queue's old end. (RSS is only
    # logged: under ASan its quarantine keeps what passed through.)
    check(drops > 0, "no frame was dropped from mallory's queue")
    check(not host.grep(r'dual-link-closed .*name="bob"') and not bob.grep(r"dual-link-closed"),
          "bob's link closed")
    check(not host.grep(r'peer-gone .*name="mallory"'), "mallory was dropped from the lobby")
    bob.command(cmd="chat", text="unbothered")
    host.wait_event(lambda e: e.get("type") == "chat" and e.get("text") == "unbothered", 5,
                    "bob's chat")
    env.daemons_alive(host, bob)


run(scenario)
