#!/usr/bin/env python3
"""A dual link that breaks is closed, UDP carries on, and the two sides
dial again (lobby_dual.h; netpunch's joiner never redials, so a netpunch
peer stays on UDP).

A host and a joiner with netsim dropping 20 % of what each sends and game
bridges both ways; the link comes up. The test then destroys the joiner's
end of the TCP connection (ss -K, which needs root): both lobbies log the
link closed, chat still crosses (a joiner's single copy may now be lost to
netsim: the host's three copies are waited for), and within the 30 s
window a new link comes up, on which 200 game frames each way again all
arrive exactly once."""

import os
import re
import subprocess

from harness import Bridge, Lobby, check, run, wait_for

FRAMES = 200


def io_dir(env, name):
    d = os.path.join(env.dir, "io-" + name)
    os.makedirs(d)
    with open(os.path.join(d, "tpf2mp_netsim.txt"), "w") as f:
        f.write("loss=0.2\n")
    return d


def scenario(env):
    check(os.geteuid() == 0, "ss -K (destroying a socket) needs root")
    hb = Bridge(env, 1, send=FRAMES, rate=100, duration_ms=6000, name="bridge-alice",
                wait_go=True)
    host = Lobby(env, "host", name="alice", io=io_dir(env, "alice"),
                 args=["--game-local-port", str(hb.port)])
    hb.connect(host)
    code = host.wait_code()
    jb = Bridge(env, 2, send=FRAMES, rate=100, duration_ms=6000, name="bridge-bob", wait_go=True)
    bob = Lobby(env, "join", code=code, name="bob", io=io_dir(env, "bob"),
                args=["--game-local-port", str(jb.port)])
    jb.connect(bob)
    bob.wait_status("connected", "^joined the host$", timeout=30)
    host.wait_line(r'dual-link-up peer=\S+ name="bob" ')
    m = bob.wait_line(r'dual-link-up peer=\S+ name="alice" tcp=127\.0\.0\.1:(\d+) ')
    hport = int(m.group(1))
    check(hport == host.udp_port, "bob's link goes to %d, the host is on %d" % (
        hport, host.udp_port))

    # Destroy bob's end of the link: he sees it die, the host gets a reset.
    r = subprocess.run(["ss", "-K", "-t", "state", "established", "dst",
                        "127.0.0.1:%d" % hport, "sport", "=", ":%d" % bob.udp_port],
                       capture_output=True, text=True)
    check(r.returncode == 0 and (":%d" % bob.udp_port) in r.stdout,
          "ss -K found no link socket: %r %r" % (r.stdout, r.stderr))
    host.wait_line(r'dual-link-closed peer=\S+ name="bob" .*reason="', timeout=10)
    bob.wait_line(r'dual-link-closed peer=\S+ name="alice" .*reason="', timeout=10)
    env.log("closed: host %s" % host.grep(r"dual-link-closed")[-1].split(" ", 1)[1])
    env.log("closed: bob  %s" % bob.grep(r"dual-link-closed")[-1].split(" ", 1)[1])

    # UDP carries on meanwhile.
    host.command(cmd="chat", text="after the break")
    bob.wait_event(lambda e: e.get("type") == "chat" and e.get("text") == "after the break", 10,
                   "the host's chat after the break")

    # A new link, within the window.
    def relinked(lobby, name):
        return len(lobby.grep(r'dual-link-up peer=\S+ name="%s" ' % name)) >= 2
    wait_for(lambda: relinked(host, "bob") and relinked(bob, "alice"), 35,
             "the link to come up again on both sides")
    env.log("again: %s" % bob.grep(r"dual-link-up")[-1].split(" ", 1)[1])
    hb.go()
    jb.go()
    rh, rj = hb.result(), jb.result()
    env.log("frames joiner->host %s, host->joiner %s" % (rh["from"].get(2), rj["from"].get(1)))
    check(rh["from"].get(2) == {"frames": FRAMES, "dup": 0}, "at the host: %r" % rh["from"])
    check(rj["from"].get(1) == {"frames": FRAMES, "dup": 0}, "at bob: %r" % rj["from"])
    check(len(host.grep(r'dual-link-closed .*name="bob"')) == 1 and
          len(bob.grep(r"dual-link-closed")) == 1, "the new link closed too")
    env.daemons_alive(host, bob)


run(scenario)
