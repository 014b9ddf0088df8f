#!/usr/bin/env python3
"""IPv6 at rally-relay's public side, in front of an IPv4-only OpenArena
server (net_enabled 1, 127.0.0.1).

- Dual-stack ("--listen [::]:0", one socket): an IPv6 client on ::1 gets
  the real server's infoResponse (its challenge echoed) and challenge
  through the relay, from the relay's port, over IPv6; qstat (IPv4 only:
  qstat 2.17 has no IPv6) reads the same server over IPv4 through the
  same port. /sessions shows "[::1]:port" for the one and a plain
  "127.0.0.x:port" for the other (v4-mapped addresses are normalised), the
  logs too; a ban of 127.0.0.3 (or of its v4-mapped form) drops that IPv4
  client on the dual-stack socket, a ban of ::1 the IPv6 one; the query
  limiter counts an IPv4 client under its plain address.
- Heartbeats over IPv6: rally-master on [::1] gets the relay's heartbeat
  from [::1]:port, challenges it over IPv6, the relay carries the
  challenge to the IPv4 server and its infoResponse back, and the master
  lists the relay under [::1]:port in getserversExt's IPv6 answer ("/" +
  16 bytes + port).
- A master name with an A and an AAAA record (dual.test, from a hosts file
  of the relay's own mount namespace) gets one heartbeat per family: a
  rally-master on 127.0.0.1:P lists the relay under its IPv4 address, one
  on [::1]:P under its IPv6 address. With two sockets ("--listen
  127.0.0.1:0 --listen [::1]:0") each family's heartbeat leaves from the
  socket of that family, so each master lists that socket's port.
Only 127.0.0.0/8 and ::1 (the dual-stack socket listens on [::], no
datagram goes anywhere else)."""

import os
import shutil
import socket
import subprocess

from harness import Master, OAServer, Relay, check, q3_getservers, query, run, wait_for


def v6_udp(env):
    return env.udp("::1", socket.AF_INET6)


def v6_master(env, name, port=0):
    return Master(env, args=["--udp", "[::1]:%d" % port, "--q3-challenge", "1500"], name=name)


def scenario(env):
    oa = OAServer(env)

    # ---- dual-stack, one socket ----
    # The query cache off: this part checks the per-IP query limiter, which
    # only forwarded queries meet (relay_qcache_multi has an IPv6 asker
    # answered from the cache).
    relay = Relay(env, oa.addr, listen=["[::]:0"], args=["--query-cache", "off"])
    port = relay.addr[1]
    check(relay.addr[0] == "::", "ready line: %r" % (relay.addr,))
    c6 = v6_udp(env)
    got = query(c6, ("::1", port), "getinfo v6probe", timeout=3)
    check(got, "no infoResponse over IPv6")
    data, src = got
    check(src[:2] == ("::1", port), "answer from %r, not the relay's [::1]:%d" % (src, port))
    check(data.startswith(b"\xff\xff\xff\xffinfoResponse") and b"\\challenge\\v6probe" in data and
          b"\\hostname\\" + oa.hostname.encode() in data, "not the server's answer: %r" % data[:200])
    got = query(c6, ("::1", port), "getchallenge", timeout=3)
    check(got and got[0].startswith(b"\xff\xff\xff\xffchallengeResponse"), "challenge over IPv6")
    r = subprocess.run(["quakestat", "-retry", "1", "-raw", ",", "-nh", "-q3s",
                        "127.0.0.1:%d" % port], capture_output=True, text=True, timeout=20)
    check(r.returncode == 0 and oa.hostname in r.stdout, "qstat over IPv4: %r" % r.stdout)
    c4 = env.udp("127.0.0.3")
    check(query(c4, ("127.0.0.1", port), "getchallenge", timeout=3), "IPv4 client")
    st, sessions, _ = relay.api("GET", "/sessions")
    by_ip = {s["client_ip"]: s for s in sessions}
    check("::1" in by_ip and by_ip["::1"]["client"] == "[::1]:%d" % c6.getsockname()[1],
          "IPv6 session: %r" % sessions)
    check("127.0.0.3" in by_ip and by_ip["127.0.0.3"]["client"] ==
          "127.0.0.3:%d" % c4.getsockname()[1], "IPv4 session not plain: %r" % sessions)
    check(not [s for s in sessions if "ffff" in s["client"]], "a v4-mapped address: %r" % sessions)
    relay.wait_line(r"session-open peer=127\.0\.0\.3:%d " % c4.getsockname()[1])
    relay.wait_line(r"session-open peer=\[::1\]:%d " % c6.getsockname()[1])
    check(not relay.grep(r"ffff"), "a v4-mapped address in the log")

    # The query limiter: one plain IPv4 source, burst 5 then 1/s.
    c5 = env.udp("127.0.0.5")
    for _ in range(8):
        c5.sendto(b"\xff\xff\xff\xffgetstatus", ("127.0.0.1", port))
    wait_for(lambda: relay.drops("rate_limited") >= 2, 5, "the limiter to drop 127.0.0.5's flood")

    # Bans: the IPv4 client by its plain address (and the v4-mapped form
    # names the same), the IPv6 one by ::1.
    st, body, _ = relay.api("PUT", "/bans/::ffff:127.0.0.3", {"reason": "mapped form"})
    check(st == 201 and body["ip"] == "127.0.0.3" and body["sessions_closed"] == 1,
          "ban by the v4-mapped form: %s %r" % (st, body))
    check(query(c4, ("127.0.0.1", port), "getchallenge", timeout=1) is None,
          "banned IPv4 client answered through the dual-stack socket")
    check(query(c6, ("::1", port), "getchallenge", timeout=3), "the IPv6 client lost too")
    st, body, _ = relay.api("PUT", "/bans/::1", {"reason": "v6"})
    check(st == 201 and body["sessions_closed"] == 1, "ban ::1: %s %r" % (st, body))
    check(query(c6, ("::1", port), "getchallenge", timeout=1) is None, "banned IPv6 client answered")
    check(relay.drops("banned") >= 2, "banned drops")
    env.daemons_alive(relay)
    relay.stop()

    # ---- heartbeats over IPv6 to a master on ::1 ----
    m6 = v6_master(env, "master6")
    check(m6.udp_addr[0] == "::1", "master on %r" % (m6.udp_addr,))
    # (A state dir of its own: the bans above would drop the master.)
    relay = Relay(env, oa.addr, listen=["[::]:0"], name="relay-hb6",
                  state_dir=os.path.join(env.dir, "state-hb6"),
                  args=["--master", "[::1]:%d" % m6.udp_addr[1], "--heartbeat-tag",
                        "QuakeArena-1", "--heartbeat-interval", "2"])
    port = relay.addr[1]
    m6.wait_line(r"heartbeat peer=\[::1\]:%d tag=QuakeArena-1" % port, 10)
    m6.wait_line(r"q3-listed server=\[::1\]:%d game=Quake3Arena protocol=71" % port, 20)
    relay.wait_line(r"heartbeat-sent tag=QuakeArena-1 master=\[::1\]:%d addr=\[::1\]:%d" %
                    (m6.udp_addr[1], m6.udp_addr[1]))
    s6 = v6_udp(env)
    listed, _ = q3_getservers(s6, m6.udp_addr[:2], "getserversExt Quake3Arena 71 empty full ipv6")
    check(listed == [("::1", port)], "getserversExt ipv6 answer: %r" % listed)
    listed, _ = q3_getservers(s6, m6.udp_addr[:2], "getservers 71 empty full")
    check(listed == [], "an IPv6 server in a plain getservers answer: %r" % listed)
    st, sv, _ = relay.api("GET", "/servers")
    check(sv[0]["heartbeats"][0]["addresses"] == ["[::1]:%d" % m6.udp_addr[1]],
          "/servers heartbeats: %r" % sv)
    env.daemons_alive(relay, m6)
    relay.stop()
    m6.wait_line(r"heartbeat peer=\[::1\]:%d tag=ETFlatline-1" % port, 5)

    # ---- one master name, A and AAAA: a heartbeat per family ----
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        check(False, "the A+AAAA part needs root and unshare (a private /etc/hosts)")
    m6b = v6_master(env, "master6b")
    mport = m6b.udp_addr[1]
    m4 = Master(env, args=["--udp", "127.0.0.1:%d" % mport, "--q3-challenge", "1500"],
                name="master4")
    hosts = os.path.join(env.dir, "hosts")
    with open(hosts, "w") as f:
        f.write("127.0.0.1 localhost\n127.0.0.1 dual.test\n::1 dual.test\n")
    prefix = ["unshare", "-m", "sh", "-c", 'mount --bind "$0" /etc/hosts && exec "$@"', hosts]
    hb = ["--master", "dual.test:%d" % mport, "--heartbeat-tag", "QuakeArena-1",
          "--heartbeat-interval", "2"]
    # Dual-stack: both from the one socket, so both list its port.
    relay = Relay(env, oa.addr, listen=["[::]:0"], name="relay-dual", args=hb, argv_prefix=prefix,
                  state_dir=os.path.join(env.dir, "state-dual"))
    port = relay.addr[1]
    m4.wait_line(r"q3-listed server=127\.0\.0\.1:%d game=Quake3Arena" % port, 20)
    m6b.wait_line(r"q3-listed server=\[::1\]:%d game=Quake3Arena" % port, 20)
    st, sv, _ = relay.api("GET", "/servers")
    check(sorted(sv[0]["heartbeats"][0]["addresses"]) ==
          sorted(["127.0.0.1:%d" % mport, "[::1]:%d" % mport]), "both families: %r" % sv)
    check(relay.metrics()['rally_relay_heartbeats_total{master="dual.test:%d",outcome="heartbeat"}'
                          % mport] >= 2, "a heartbeat per family counted")
    relay.stop()
    # Two sockets: each family from its own.
    relay = Relay(env, oa.addr, listen=["127.0.0.1:0", "[::1]:0"], name="relay-two", args=hb,
                  argv_prefix=prefix, state_dir=os.path.join(env.dir, "state-two"))
    (ip4, p4), (ip6, p6) = relay.addrs
    check(ip4 == "127.0.0.1" and ip6 == "::1", "addresses %r" % relay.addrs)
    m4.wait_line(r"q3-listed server=127\.0\.0\.1:%d game=Quake3Arena" % p4, 20)
    m6b.wait_line(r"q3-listed server=\[::1\]:%d game=Quake3Arena" % p6, 20)
    check(not m4.grep(r"heartbeat peer=127\.0\.0\.1:%d " % p6), "IPv4 heartbeat from the v6 port")
    # (The engine answers the relay's IP about once a second, and the two
    # masters' challenges and the probe take most of that: ask until heard.)
    c6 = v6_udp(env)
    got = wait_for(lambda: query(c6, ("::1", p6), "getinfo two", timeout=0.3), 15,
                   "an answer through the IPv6 socket")
    check(got[1][:2] == ("::1", p6), "the v6 socket answers from elsewhere: %r" % (got,))
    s4 = env.udp("127.0.0.44")
    listed, _ = q3_getservers(s4, m4.udp_addr, "getservers 71 empty full")
    check(("127.0.0.1", p4) in (listed or []), "the IPv4 master's list: %r" % listed)
    env.daemons_alive(relay, m4, m6b, oa)


run(scenario)
