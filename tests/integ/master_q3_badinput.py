#!/usr/bin/env python3
"""Bad datagrams at the Q3 master: below 5 bytes, above 2,048 (up to the
largest IPv4 datagram), not out-of-band, unknown commands, master commands
with garbage tails, thousands of random ones; infostrings with 300-character
keys and values. Nothing is answered that should not be, every datagram has
a counted outcome, and the master keeps listing and serving."""

import random

from harness import (FakeQ3Server, Master, OOB, check, drain, q3_getservers, run, wait_for)

LONG_K = "K" * 300
LONG_V = "V" * 300


def scenario(env):
    m = Master(env, debug=False)
    c = env.udp("127.0.0.41")
    base = m.metrics()

    def delta(name):
        return m.metrics().get(name, 0) - base.get(name, 0)

    def drops(reason):
        return delta('rally_master_q3_drops_total{reason="%s"}' % reason)

    # Sizes: 0-4 bytes, 2,049 bytes and the largest datagram; 2,048 is in.
    for n in range(5):
        c.sendto(OOB[:n], m.udp_addr)
    c.sendto(OOB + b"getservers 71 " + b"x" * (2049 - 18), m.udp_addr)
    c.sendto(OOB + b"getservers 71 " + b"x" * (65507 - 18), m.udp_addr)
    c.sendto(OOB + b"getservers 71 " + b"x" * (2048 - 18), m.udp_addr)
    # Not out-of-band; unknown commands; known ones gone wrong.
    c.sendto(b"hello, master", m.udp_addr)
    c.sendto(OOB + b"getstatus", m.udp_addr)
    c.sendto(OOB + b"getinfo xyz", m.udp_addr)
    c.sendto(OOB + b"getserversResponse\\\x01\x02\x03\x04\x05\x06\\EOT\0\0\0", m.udp_addr)
    c.sendto(OOB + b"heartbeat " + b"T" * 300 + b"\n", m.udp_addr)
    c.sendto(OOB + b"heartbeat \xe9t\xe9\n", m.udp_addr)
    c.sendto(OOB + b"heartbeat SomeOtherGame-1\n", m.udp_addr)
    c.sendto(OOB + b"infoResponse\n\\challenge\\abc", m.udp_addr)
    wait_for(lambda: delta('rally_master_q3_packets_total{type="other"}') >= 10, 5,
             "the datagrams to be counted")
    check(drops("too_short") == 5, "too_short: %s" % drops("too_short"))
    check(drops("too_long") == 2, "too_long: %s" % drops("too_long"))
    check(drops("not_oob") == 1, "not_oob")
    check(drops("unknown_command") == 3, "unknown_command: %s" % drops("unknown_command"))
    check(drops("bad_heartbeat") == 2, "bad_heartbeat: %s" % drops("bad_heartbeat"))
    check(drops("unknown_tag") == 1, "unknown_tag")
    check(drops("no_pending") == 1, "infoResponse from nobody")
    # The 2,048-byte getservers was a valid request with a junk option.
    check(delta('rally_master_q3_sent_total{type="getserversresponse"}') == 1, "2048 answered")
    got = drain(c, 0.2)
    check(len(got) == 1 and got[0][0].endswith(b"\\EOT\0\0\0"),
          "answers to garbage: %r" % [d[:30] for d, _ in got])

    # 300-character keys and values around the real fields: listed. A
    # 300-character challenge, game name or type, or protocol: not.
    good = FakeQ3Server(env, info="\\%s\\%s\\protocol\\71\\%s\\x\\sv_maxclients\\8\\y\\%s\\"
                                  "clients\\1\\gamename\\Quake3Arena" % (LONG_K, LONG_V, LONG_K, LONG_V))
    long_ch = FakeQ3Server(env, challenge=LONG_V)
    long_name = FakeQ3Server(env, info=dict(protocol="71", sv_maxclients="8", clients="1",
                                            gamename=LONG_V))
    long_type = FakeQ3Server(env, info=dict(protocol="71", sv_maxclients="8", clients="1",
                                            gametype=LONG_V))
    long_proto = FakeQ3Server(env, info=dict(protocol="7" * 300, sv_maxclients="8", clients="1"))
    for f in (good, long_ch, long_name, long_type, long_proto):
        f.heartbeat(m.udp_addr)
    wait_for(lambda: all(f.challenges for f in (good, long_ch, long_name, long_type, long_proto)),
             5, "the getinfo challenges")
    wait_for(lambda: delta('rally_master_q3_packets_total{type="inforesponse"}') >= 6, 5,
             "the infoResponses")
    check(m.metrics()["rally_master_q3_servers"] == 1, "servers listed: %s" %
          m.metrics()["rally_master_q3_servers"])
    check(drops("bad_challenge") == 1, "bad_challenge")
    check(drops("bad_gamename") == 1, "bad_gamename")
    check(drops("bad_gametype") == 1, "bad_gametype")
    check(drops("bad_protocol") == 1, "bad_protocol")
    servers, _ = q3_getservers(c, m.udp_addr, "getservers 71 empty full")
    check(servers == [good.addr], "listed: %r, want only %r" % (servers, good.addr))

    # Random datagrams from many sources, raw and with master prefixes.
    def received():
        return sum(v for k, v in m.metrics().items() if k.startswith("rally_master_q3_packets_total"))

    rnd = random.Random(20261130)
    prefixes = [b"", OOB, OOB + b"heartbeat ", OOB + b"infoResponse\n", OOB + b"getservers ",
                OOB + b"getserversExt "]
    socks = [env.udp("127.0.1.%d" % (i + 1)) for i in range(16)]
    total = 3000
    before = received()
    for i in range(total):
        n = rnd.choice([0, 1, 3, 5, 9, 30, 200, 1400, 2100])
        payload = prefixes[i % len(prefixes)] + bytes(rnd.getrandbits(8) for _ in range(n))
        socks[i % len(socks)].sendto(payload, m.udp_addr)
        if i % 50 == 49:
            # Pace: a kernel buffer overflow would not be the master's.
            wait_for(lambda: received() - before >= i + 1 - 20, 5, "the master to read the flood")
    wait_for(lambda: received() - before == total, 10, "every datagram to be counted")
    for s in socks:
        drain(s, 0.02)
    # It still lists and serves.
    servers, _ = q3_getservers(env.udp("127.0.0.42"), m.udp_addr, "getservers 71 empty full")
    check(servers == [good.addr], "after the garbage: %r" % servers)
    met = m.metrics()
    check(met["rally_master_q3_servers"] == 1, "servers after the garbage")
    env.daemons_alive(m)


run(scenario)
