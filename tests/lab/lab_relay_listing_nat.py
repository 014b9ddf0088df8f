#!/usr/bin/python3
"""Lab: the listing check behind a NAT, where the master sees the relay's
public address and not its bind address.

Site s is a cone NAT (masquerade keeps the source port when it is free);
on its host h run a real OpenArena server (127.0.0.1:27961, LAN mode) and
rally-relay in front of it, heartbeating the lab's rally-master on the
internet. The master challenges the heartbeat's source - the router's WAN
address, the relay's port - through the NAT's mapping and lists that.
Three relays, one after the other, say what the check makes of it:
- bound to h's LAN address: that address is not in the list; the check
  says so (listing-missing, rule bind_address) and names the WAN address
  on its port as the candidate - the address to give --public-address;
- with --public-address <WAN>: listed, match public_address;
- bound to the wildcard: none of h's own addresses is listed; the port
  alone matches, and the listing is reported weak (match port_only)."""

import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from lab import Lab  # noqa: E402
from harness import OA_SERVER, RELAY_BIN, TOKEN, check, run, wait_for  # noqa: E402


def scenario(env):
    lab = Lab(env, deadline=130, master_args=["--q3-challenge", "1500"])
    s = lab.site("s", kind="cone")
    h = s.host("h")
    wan = s.public_ip
    master = lab.master.udp_addr
    tok = os.path.join(env.dir, "token")
    with open(tok, "w") as f:
        f.write(TOKEN + "\n")

    oa_home = os.path.join(env.dir, "oa-home")
    os.makedirs(oa_home)
    argv = [OA_SERVER, "+set", "fs_homepath", oa_home, "+set", "dedicated", "1",
            "+set", "net_enabled", "1", "+set", "net_ip", "127.0.0.1", "+set", "net_port",
            "27961", "+set", "sv_hostname", "lab-home", "+set", "rconpassword", "lab-rcon",
            "+set", "ttycon", "0", "+set", "com_hunkmegs", "64"]
    for i in range(1, 6):
        argv += ["+set", "sv_master%d" % i, ""]
    h.proc(argv + ["+map", "oa_dm1"], "oa", cwd=oa_home)
    wait_for(lambda: h.py(
        "import socket\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM);s.settimeout(0.3)\n"
        "s.sendto(b'\\xff\\xff\\xff\\xffgetinfo x',('127.0.0.1',27961))\n"
        "try:\n print(b'infoResponse' in s.recv(4096))\nexcept OSError:\n print(False)\n"
    ).strip() == "True", 40, "the home server to answer")

    name = "%s:%d" % master

    def relay(tag, listen, control_port, extra=()):
        # A long interval: rally-master answers 4 getservers in a row from
        # one address (the WAN's, for all three relays), then 1 per 3 s.
        return h.proc([
            RELAY_BIN, "--listen", listen, "--server", "127.0.0.1:27961",
            "--master", name, "--heartbeat-tag", "QuakeArena-1", "--heartbeat-interval", "300",
            "--listing-interval", "30", "--listing-delay", "500", "--listing-timeout", "1500",
            "--control", "127.0.0.1:%d" % control_port, "--token-file", tok,
            "--state-dir", os.path.join(env.dir, "state-" + tag), "--log", "plain",
            "--debug"] + list(extra), "relay-" + tag)

    def row(control_port):
        st, body = h.http("GET", "http://127.0.0.1:%d/healthz" % control_port)
        check(st == 200, "healthz: %s %s" % (st, body))
        return json.loads(body)["listing"]["masters"][0]

    # Bound to h's LAN address: listed under the WAN address, not ours.
    port = 27960
    r1 = relay("bind", "%s:%d" % (h.addr, port), 8080)
    lab.master.wait_line(r"q3-listed server=%s:%d game=Quake3Arena" % (re.escape(wan), port), 20)
    r1.wait_line(r"listing-missing master=%s family=ipv4 reason=not_listed rule=bind_address "
                 r"candidates=%s:%d$" % (re.escape(name), re.escape(wan), port), 20)
    r = row(8080)
    check(r["listed"] is False and r["rule"] == "bind_address" and
          r["candidates"] == ["%s:%d" % (wan, port)], "healthz: %r" % r)
    env.log("bound to %s:%d, the master lists %s:%d: %s" % (h.addr, port, wan, port, r["outcome"]))
    check(r1.stop() == 0, "relay exit")

    # --public-address: the WAN address is ours.
    port = 27962
    r2 = relay("public", "%s:%d" % (h.addr, port), 8081, ["--public-address", wan])
    r2.wait_line(r"listing-confirmed master=%s family=ipv4 match=public_address seen-as=%s:%d$" %
                 (re.escape(name), re.escape(wan), port), 20)
    r = row(8081)
    check(r["listed"] is True and r["weak"] is False and r["rule"] == "public_address" and
          r["seen_as"] == "%s:%d" % (wan, port), "healthz: %r" % r)
    check(r2.stop() == 0, "relay exit")

    # The wildcard: h's own addresses are not listed; the port alone is.
    port = 27964
    r3 = relay("any", "0.0.0.0:%d" % port, 8082)
    r3.wait_line(r"listing-confirmed master=%s family=ipv4 match=port_only seen-as=%s:%d weak=port-only$" %
                 (re.escape(name), re.escape(wan), port), 20)
    r = row(8082)
    check(r["listed"] is True and r["weak"] is True and r["rule"] == "local_address" and
          r["match"] == "port_only" and r["seen_as"] == "%s:%d" % (wan, port), "healthz: %r" % r)
    env.daemons_alive(r3)
    check(r3.stop() == 0, "relay exit")


run(scenario)
