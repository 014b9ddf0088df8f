#!/usr/bin/env python3
"""Back-pressure on the coa tunnel. Host -> client: two allocations of one
host, each world stream fed without end by the host's worldserver; one
client stops reading, the other reads, and a third stream carries small
echoes. The reading client keeps getting bytes at speed, the echoes come
back in bounded time, the stalled stream ends in a reset (or stays bounded)
and the relay's RSS (/proc) stays bounded. Client -> host: the host stops
reading its tunnel while a client floods; the relay stops taking the
client's bytes (it does not buffer them without bound), another host's
stream keeps working meanwhile, and once the host reads again the flow
resumes."""

import os
import socket
import threading
import time

from coapeer import (HostPeer, Realm, TcpServer, TunnelRelay, connect_client, echo_handler,
                     recv_exact, skip_unless_ready)
from harness import check, run, wait_for

MiB = 1 << 20


def scenario(env):
    # ASan's quarantine (freed memory kept for 256 MB by default) would be
    # counted as the relay's RSS: kept small here.
    asan = os.environ.get("ASAN_OPTIONS", "")
    r, r2 = Realm(), Realm()
    relay = TunnelRelay(env, [r, r2], pool_size=16, debug=False,
                        extra_env={"ASAN_OPTIONS": (asan + ":" if asan else "") +
                                   "quarantine_size_mb=4"})
    block = os.urandom(MiB)
    stop = threading.Event()

    def source(c, rec):
        rec["sent"] = 0
        try:
            while not stop.is_set():
                c.sendall(block[:65536])
                rec["sent"] += 65536
        except OSError as e:
            rec["ended"] = repr(e)
    src = TcpServer(env, source)
    echo = TcpServer(env, echo_handler)
    host = HostPeer(env, relay, r, targets={"world": src.addr})

    a1, a2, a3 = host.allocate_ok(), host.allocate_ok(), host.allocate_ok()
    stalled = socket.socket()
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stalled.connect((a1["relay_host"], a1["world_port"]))
    s1 = host.wait_stream("world", token=a1["token"])
    c2 = connect_client((a2["relay_host"], a2["world_port"]))
    host.wait_stream("world", token=a2["token"])
    host.token_targets[a3["token"]] = {"world": echo.addr}
    c3 = connect_client((a3["relay_host"], a3["world_port"]))

    samples = []   # (time, total bytes) of the reading client

    def reader():
        total = 0
        c2.settimeout(10)
        try:
            while not stop.is_set():
                d = c2.recv(262144)
                if not d:
                    break
                total += len(d)
                samples.append((time.monotonic(), total))
        except OSError:
            pass
    rt = threading.Thread(target=reader, daemon=True)
    rt.start()

    rtts = []
    t_start = time.monotonic()
    rss0 = None
    rss_max = 0
    while time.monotonic() - t_start < 12:
        t = time.monotonic()
        c3.sendall(b"p" * 100)
        recv_exact(c3, 100, timeout=10)
        rtts.append(time.monotonic() - t)
        rss = relay.rss()
        if rss0 is None and time.monotonic() - t_start > 1.5:
            rss0 = rss
        rss_max = max(rss_max, rss)
        time.sleep(0.1)
    t_end = time.monotonic()
    rtts.sort()
    got = samples[-1][1] if samples else 0
    gaps = [b[0] - a[0] for a, b in zip(samples, samples[1:])]
    first = samples[0][0] if samples else t_end
    gaps.append(t_end - (samples[-1][0] if samples else first))
    late = [s for s in samples if s[0] >= t_end - 5]
    rate = (late[-1][1] - late[0][1]) / 5 / MiB if len(late) > 1 else 0
    env.log("stalled: host sent %.1f MiB to the stalled client, reset=%s close=%s" % (
        s1.tx / MiB, s1.got_reset.is_set(), s1.got_close.is_set()))
    env.log("reading client: %.1f MiB in 12 s, %.1f MiB/s over the last 5 s, longest gap %.3fs" % (
        got / MiB, rate, max(gaps)))
    env.log("echo rtt p50 %.1f ms p99 %.1f ms max %.1f ms (n=%d)" % (
        rtts[len(rtts) // 2] * 1e3, rtts[int(len(rtts) * 0.99)] * 1e3, rtts[-1] * 1e3, len(rtts)))
    env.log("relay RSS %d KiB after warm-up, %d KiB max (+%d KiB)" % (rss0, rss_max, rss_max - rss0))
    check(max(gaps) < 2.0, "the reading client waited %.2fs for bytes (a stalled stream stalls "
          "the tunnel?)" % max(gaps))
    check(rate >= 2.0, "the reading client got only %.2f MiB/s over the last 5 s" % rate)
    check(rtts[-1] < 2.0, "an echo took %.2fs" % rtts[-1])
    check(rss_max - rss0 < 64 * 1024, "the relay grew by %d KiB" % (rss_max - rss0))
    if not s1.got_reset.is_set():
        # Not reset: then what it took from the host must be bounded.
        check(s1.tx < 64 * MiB, "the relay took %.1f MiB for a client that reads nothing" % (
            s1.tx / MiB))
    stop.set()
    for s in (stalled, c2, c3):
        s.close()
    rt.join(5)
    host.check_clean()

    # Client -> host: the host stops reading; a client floods.
    stop.clear()
    other = TcpServer(env, echo_handler)
    h2 = HostPeer(env, relay, r2, targets={"world": other.addr}, name="host-2")
    b = host.allocate_ok()
    ob = h2.allocate_ok()
    oc = connect_client((ob["relay_host"], ob["world_port"]))

    def drain(c, rec):
        while c.recv(262144):
            pass
    host.token_targets[b["token"]] = {"world": TcpServer(env, drain).addr}
    fl = connect_client((b["relay_host"], b["world_port"]))
    sf = host.wait_stream("world", token=b["token"])
    rss0 = relay.rss()
    host.pause()
    accepted = [0]

    def flood():
        fl.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted[0] += fl.send(block)
            except socket.timeout:
                continue
            except OSError:
                return
    ft = threading.Thread(target=flood, daemon=True)
    ft.start()
    plateau = []
    t0 = time.monotonic()
    while time.monotonic() - t0 < 8:
        plateau.append((time.monotonic(), accepted[0]))
        oc.sendall(b"other host")
        check(recv_exact(oc, 10, timeout=3) == b"other host", "another host's stream stalled")
        time.sleep(0.25)
    took = accepted[0]
    grew = took - next(a for t, a in plateau if t >= t0 + 6)
    rss1 = relay.rss()
    env.log("host not reading: the relay took %.1f MiB from the client (%.1f MiB in the last "
            "2 s), RSS +%d KiB" % (took / MiB, grew / MiB, rss1 - rss0))
    check(took < 96 * MiB, "the relay took %.1f MiB while its host read nothing" % (took / MiB))
    check(grew < 4 * MiB, "still taking the client's bytes after 6 s (%.1f MiB in 2 s)" % (grew / MiB))
    check(rss1 - rss0 < 64 * 1024, "the relay grew by %d KiB" % (rss1 - rss0))
    host.resume()
    wait_for(lambda: accepted[0] > took + 32 * MiB, 30,
             lambda: "the flow to resume (%.1f MiB more)" % ((accepted[0] - took) / MiB))
    wait_for(lambda: sf.rx > took, 30, "the host to get the flood")
    stop.set()
    ft.join(5)
    fl.close()
    oc.close()
    check(host.alive() and h2.alive(), "a tunnel dropped")
    host.check_clean()
    h2.check_clean()
    env.daemons_alive(relay)


skip_unless_ready("relay_coa_backpressure")
run(scenario)
