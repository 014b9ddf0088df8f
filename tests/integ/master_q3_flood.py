#!/usr/bin/env python3
"""getservers floods above the throttle (dpmaster clients.c): a client IP
gets 4 answers in a row, then one per 3 seconds as its count decays; the
rest is dropped and counted, never answered. Other IPs are not affected,
whether one or 200 of them flood at once, and a server keeps registering
during the flood."""

import time

from harness import FakeQ3Server, Master, check, drain, q3_getservers, run, wait_for


def scenario(env):
    m = Master(env, debug=False)
    srv = FakeQ3Server(env, ip="127.0.0.50")
    srv.heartbeat(m.udp_addr)
    wait_for(lambda: m.metrics()["rally_master_q3_servers"] == 1, 5, "the server to be listed")

    def sent():
        return m.metrics()['rally_master_q3_sent_total{type="getserversresponse"}']

    def throttled():
        return m.metrics()['rally_master_q3_drops_total{reason="throttled"}']

    # One IP, 50 requests back to back: 4 answered.
    a = env.udp("127.0.0.51")
    base = sent()
    for _ in range(50):
        a.sendto(b"\xff\xff\xff\xffgetservers 71 empty full", m.udp_addr)
    wait_for(lambda: throttled() == 46, 5, "46 requests throttled")
    got = drain(a, 0.3)
    check(len(got) == 4, "%d answers to a flood of 50" % len(got))
    check(sent() - base == 4, "sent %d" % (sent() - base))
    check(all(d.endswith(b"\\EOT\0\0\0") and b"\\\x7f\x00\x00\x32" in d for d, _ in got),
          "answers: %r" % [d[:40] for d, _ in got])

    # Another IP is served meanwhile, also from the same port range.
    b = env.udp("127.0.0.52")
    servers, _ = q3_getservers(b, m.udp_addr, "getservers 71 empty full")
    check(servers == [srv.addr], "other IP: %r" % servers)

    # The count decays by one every 3 s: the flooder gets one more answer
    # about 3 s after its first request, not before.
    t0 = time.monotonic()
    while True:
        servers, _ = q3_getservers(a, m.udp_addr, "getservers 71 empty full", timeout=0.3)
        if servers is not None:
            break
        check(time.monotonic() - t0 < 6, "no answer after the decay")
    waited = time.monotonic() - t0
    check(servers == [srv.addr], "after decay: %r" % servers)
    check(waited >= 1.5, "answered again after only %.2fs" % waited)
    servers, _ = q3_getservers(a, m.udp_addr, "getservers 71 empty full", timeout=0.3)
    check(servers is None, "two answers right after the decay")

    # 200 IPs flooding at once, 6 requests each: each gets its 4.
    socks = [env.udp("127.0.2.%d" % (i + 1)) for i in range(200)]
    base, tbase = sent(), throttled()
    for r in range(6):
        for i, s in enumerate(socks):
            s.sendto(b"\xff\xff\xff\xffgetservers 71 empty full", m.udp_addr)
            if i % 50 == 49:
                # Pace: a kernel buffer overflow would not be the master's.
                n = r * 200 + i + 1
                wait_for(lambda: sent() - base + throttled() - tbase >= n - 20, 5,
                         "the master to keep up")
        # A server registering in the middle of it.
        if r == 2:
            late = FakeQ3Server(env, ip="127.0.0.53")
            late.heartbeat(m.udp_addr)
    wait_for(lambda: sent() - base + throttled() - tbase == 1200, 10, "1,200 requests handled")
    check(sent() - base == 800, "answers: %d of 1200, want 800" % (sent() - base))
    per_ip = [len(drain(s, 0.01)) for s in socks]
    check(all(n == 4 for n in per_ip), "answers per IP: %r" % sorted(set(per_ip)))
    wait_for(lambda: m.metrics()["rally_master_q3_servers"] == 2, 5, "the late server")
    servers, _ = q3_getservers(env.udp("127.0.0.54"), m.udp_addr, "getservers 71 empty full")
    check(sorted(servers) == sorted([srv.addr, late.addr]), "listed: %r" % servers)
    env.daemons_alive(m)


run(scenario)
