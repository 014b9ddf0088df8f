#!/usr/bin/env python3
"""The lobby's IPv6 socket on loopback (::1), beside the IPv4 one.

- A host with no IPv4 candidate (no STUN, no --lan-ip) and --ipv6 ::1: its
  code carries the v6 candidate alone, on the port of its IPv4 socket
  (`rally-lobby code` prints it), and the host says it bound [::]:PORT;
- a joiner with IPv4 and IPv6 dials that candidate and gets in over ::1:
  the ACK came from [::1]:PORT;
- a second, IPv4-only joiner (--ipv6 off) against a dual-stack host
  (127.0.0.1 and ::1) dials IPv4 alone and gets in over 127.0.0.1, while a
  dual-stack joiner of the same host is offered both candidates, v6 last;
- a joiner's own code (its join profile, which the mesh dials) carries
  its [::1] candidate: a dual-stack peer dials two targets, a v4-only one;
- one session with peers of both families: chat from the v6 joiner reaches
  the v4 joiner through the host, game frames flow between the host and
  its v6 joiner both ways through bridges;
- --ipv6 rejects an IPv4 or v4-mapped address (usage, exit 2).
Only ::1 and 127.0.0.1."""

import re
import subprocess

from harness import LOBBY_BIN, Bridge, Lobby, check, run, wait_for

V6ONLY_HOST = ["--stun", "off", "--upnp", "off", "--rendezvous", "off", "--local-port", "0",
               "--ipv6", "::1"]


def decoded(code):
    out = subprocess.run([LOBBY_BIN, "code", code], capture_output=True, text=True)
    check(out.returncode == 0, "code %s: %s" % (code, out.stderr))
    return dict(ln.split("=", 1) for ln in out.stdout.splitlines() if "=" in ln)


def names(lobby):
    r = lobby.roster()
    return r["players"] if r else None


def scenario(env):
    hb = Bridge(env, 1, send=100, rate=100, duration_ms=3000, name="bridge-host", wait_go=True)
    host = Lobby(env, "host", name="six", loopback=False,
                 args=V6ONLY_HOST + ["--game-local-port", str(hb.port)])
    hb.connect(host)
    code = host.wait_code()
    port = host.udp_port
    host.wait_line(r"\budp6-bound addr=\[::\]:%d$" % port, 5)
    host.wait_line(r"\bobserved lan=- public=- .* v6=\[::1\]:%d$" % port, 5)
    c = decoded(code)
    check(c.get("v6") == "[::1]:%d" % port and "lan_v4" not in c and "public_v4" not in c and
          c.get("flags", "").strip() == "v6" and c.get("secret") == "yes",
          "the host's code: %r" % c)

    jb = Bridge(env, 2, send=100, rate=100, duration_ms=3000, name="bridge-join", wait_go=True)
    j = Lobby(env, "join", code=code, name="dual", args=["--ipv6", "::1", "--game-local-port",
                                                           str(jb.port)])
    jb.connect(j)
    j.wait_status("connected", "^joined the host$", timeout=15)
    m = j.wait_line(r"connected host=(\S+) after_ms=(\d+)", 5)
    check(m.group(1) == "[::1]:%d" % port, "the joiner's path: %s" % m.group(1))
    check(j.grep(r"\bdial-target target=\[::1\]:%d$" % port), "the v6 target was dialled")
    host.wait_line(r"\bjoin peer=\[::1\]:\d+", 5)
    wait_for(lambda: names(host) == ["dual", "six"], 10, "the host's roster")

    # Game frames over ::1 both ways.
    hb.go()
    jb.go()
    rh, rj = hb.result(), jb.result()
    got_j = rj["from"].get(1, {}).get("frames", 0)
    got_h = rh["from"].get(2, {}).get("frames", 0)
    check(got_j >= 95 and got_h >= 95, "frames over ::1: joiner got %d, host %d of 100" % (
        got_j, got_h))
    env.log("over ::1: joiner got %d/100 frames, host %d/100" % (got_j, got_h))
    host.command(cmd="quit")
    check(host.wait_exit(10) == 0, "host exit")
    check(j.wait_exit(15) == 0, "joiner exit after the host quit")

    # A dual-stack host: a v4-only joiner stays on IPv4, a dual-stack one
    # is offered the v6 candidate after the IPv4 one.
    h2 = Lobby(env, "host", name="both", args=["--ipv6", "::1"])
    code2 = h2.wait_code()
    c2 = decoded(code2)
    check(c2.get("lan_v4") == "127.0.0.1:%d" % h2.udp_port and
          c2.get("v6") == "[::1]:%d" % h2.udp_port, "the dual-stack host's code: %r" % c2)
    j4 = Lobby(env, "join", code=code2, name="four")
    j4.wait_status("connected", "^joined the host$", timeout=15)
    m = j4.wait_line(r"connected host=(\S+) after_ms=", 5)
    check(m.group(1) == "127.0.0.1:%d" % h2.udp_port, "the v4 joiner's path: %s" % m.group(1))
    check(not j4.grep(r"\bdial-target target=\["), "a v4-only joiner dials no v6 target")
    check(j4.grep(r"\budp6-") == [], "--ipv6 off: no IPv6 socket at all")
    j6 = Lobby(env, "join", code=code2, name="dual2", args=["--ipv6", "::1"])
    j6.wait_status("connected", "^joined the host$", timeout=15)
    targets = [re.search(r"target=(\S+)", ln).group(1) for ln in j6.grep(r"\bdial-target ")]
    check(targets == ["127.0.0.1:%d" % h2.udp_port, "[::1]:%d" % h2.udp_port],
          "the dual-stack joiner's targets: %r" % targets)
    # The mesh dials each joiner's own code (its join profile, in the
    # host's roster): a dual-stack joiner's carries [::1] too, which a
    # dual-stack peer dials and a v4-only one leaves out.
    j7 = Lobby(env, "join", code=code2, name="dual3", args=["--ipv6", "::1"])
    j7.wait_status("connected", "^joined the host$", timeout=15)
    for who in (h2, j4, j6, j7):
        wait_for(lambda: names(who) == ["both", "dual2", "dual3", "four"], 10,
                 "%s's roster" % who.name)
    j7.wait_line(r'\bmesh-dial peer="dual2" targets=2$', 10)
    j4.wait_line(r'\bmesh-dial peer="dual2" targets=1$', 10)
    j7.wait_line(r'\bmesh-dial peer="four" targets=1$', 10)
    j6.command(cmd="chat", text="from whichever family")
    j4.wait_event(lambda e: e.get("type") == "chat" and e.get("text") == "from whichever family",
                  10, "the chat across families")
    h2.command(cmd="quit")
    check(h2.wait_exit(10) == 0, "dual-stack host exit")
    for x in (j4, j6, j7):
        check(x.wait_exit(15) == 0, "%s exit" % x.name)

    for bad in ("127.0.0.1", "::ffff:127.0.0.1", "nonsense"):
        r = subprocess.run([LOBBY_BIN, "host", "--ipv6", bad, "--check-config"],
                           capture_output=True, text=True)
        check(r.returncode == 2 and "--ipv6" in r.stderr, "--ipv6 %s: %d %r" % (
            bad, r.returncode, r.stderr))


if __name__ == "__main__":
    run(scenario)
