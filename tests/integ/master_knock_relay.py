#!/usr/bin/env python3
"""Knocks and relay ports (issue 3 section 5), as the reference
masterserver.py answers them (../shared/vectors/master-api.md): a joiner's
knock reaches the host's poll and no other tag's; bad tag, blob and nonce
are 400; 45 posts from one address give 40 stored and 429s (X-Real-IP is
believed from the trusted loopback proxy, not from another peer); a tag
keeps its newest 16 notes; since= returns only newer notes. A relay knock
keeps its port for the same nonce and gets another for another; a 3-port
range runs out with 503 "relay full"; the rate limit runs before a port is
taken. On the port, binds are acked with TRLA + id, datagrams cross both
ways verbatim and come from the relay port, while a wrong id, a bad role
and a stranger's datagram go nowhere and get no answer. An idle allocation
closes (--relay-idle shortened) and a later knock takes its port again."""

import json
import re
import socket
import time

from harness import Master, check, http_raw, private_loopback, run, wait_for

TAG = "bf621fd0f94caef64dc3a0bd"
BLOB = "C63wDQAAAAFtuH2KaoykaJbN7ZmIH77Z40DFhRQdbRB1gS6S3IzzZF80FeAEnqgHm1zKoGuujgwI1oZhlesarw=="
OK60 = b'{"ok": true, "ttl": 60}'
TOO_MANY = b'{"error": "too many knocks"}'
# The relay ports live on an address of this test's own (no port probing).
RIP = private_loopback()
RELAY_REPLY = (b'{"ok": true, "ttl": 60, "relay": {"ip": "' + RIP.encode() +
               b'", "port": <int>, "id": "<hex>"}}')


def tag(n):
    return "%024x" % (0xabc000 + n)


def knock(m, body, ip=None, source=None):
    """POST /knock; ip is sent as X-Real-IP, source binds the client."""
    headers = {"X-Real-IP": ip} if ip else {}
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    st, data, _ = http_raw("POST", m.url("/knock"), body=raw, headers=headers, source=source)
    return st, data


def poll(m, s, since=None):
    q = "/knock?s=" + s + ("" if since is None else "&since=" + since)
    st, data, _ = http_raw("GET", m.url(q))
    check(st == 200, "GET %s -> %s %r" % (q, st, data))
    return data


def like(data, template):
    """data is template byte for byte but for <int>, <float> and <hex> (32
    hex digits); returns those fields in order."""
    rx = re.escape(template)
    for ph, sub in ((b"<int>", rb"(\d+)"), (b"<float>", rb"(\d+\.\d+)"), (b"<hex>", rb"([0-9a-f]{32})")):
        rx = rx.replace(re.escape(ph), sub)
    mt = re.match(b"^" + rx + b"$", data)
    check(mt, "body %r\n  is not like %r" % (data[:500], template[:500]))
    return [g.decode() for g in mt.groups()]


def notes(data):
    return json.loads(data)["knocks"]


def recv(sock, timeout=2.0):
    """One datagram (data, source) or None."""
    sock.settimeout(timeout)
    try:
        return sock.recvfrom(65535)
    except socket.timeout:
        return None


def pending(sock):
    """Datagrams already queued on sock, without waiting."""
    out = []
    sock.setblocking(False)
    try:
        while True:
            out.append(sock.recvfrom(65535))
    except (BlockingIOError, InterruptedError):
        pass
    finally:
        sock.setblocking(True)
    return out


def rendezvous(m):
    t1s = time.time()
    st, data = knock(m, {"s": TAG, "blob": BLOB}, ip="10.1.0.1")
    check((st, data) == (200, OK60), "knock -> %s %r" % (st, data))
    t1, now = like(poll(m, TAG, "0"), b'{"knocks": [{"t": <float>, "blob": "' + BLOB.encode() +
                   b'"}], "now": <float>}')
    check(t1s - 1 <= float(t1) <= float(now) <= time.time() + 1, "t %s now %s" % (t1, now))
    # Another lobby's tag sees nothing.
    like(poll(m, tag(1), "0"), b'{"knocks": [], "now": <float>}')
    like(poll(m, tag(2)), b'{"knocks": [], "now": <float>}')

    # since= gives only newer notes (the t of a note, exactly, excludes it).
    st, data = knock(m, {"s": TAG, "blob": "BBBB"}, ip="10.1.0.2")
    check((st, data) == (200, OK60), "second knock -> %s %r" % (st, data))
    both = notes(poll(m, TAG))
    check([n["blob"] for n in both] == [BLOB, "BBBB"], "oldest first: %r" % both)
    t2 = both[1]["t"]
    check(both[0]["t"] == float(t1) and t2 > both[0]["t"], "t values: %r" % both)
    check([n["blob"] for n in notes(poll(m, TAG, repr(both[0]["t"])))] == ["BBBB"], "since=t1")
    check(notes(poll(m, TAG, repr(t2))) == [], "since=t2 gave notes")
    check(notes(poll(m, TAG, "%.3f" % (t2 + 1))) == [], "since=t2+1 gave notes")
    for since in ("abc", "", "-inf", "-1", "0.0", "1_0"):
        check(len(notes(poll(m, TAG, since))) == 2, "since=%r: not both notes" % since)
    for since in ("inf", "nan", "9999999999"):
        check(notes(poll(m, TAG, since)) == [], "since=%r gave notes" % since)

    # Refusals.
    for body, want in (({"s": "XYZ", "blob": "AAAA"}, b'{"error": "bad knock"}'),
                       ({"s": TAG.upper(), "blob": "AAAA"}, b'{"error": "bad knock"}'),
                       ({"s": TAG[:23], "blob": "AAAA"}, b'{"error": "bad knock"}'),
                       ({"s": TAG + "0", "blob": "AAAA"}, b'{"error": "bad knock"}'),
                       ({"s": TAG, "blob": "not base64!"}, b'{"error": "bad knock"}'),
                       ({"s": TAG, "blob": ""}, b'{"error": "bad knock"}'),
                       ({"s": TAG, "blob": "A" * 1025}, b'{"error": "bad knock"}'),
                       ({"s": TAG, "blob": "AA-_"}, b'{"error": "bad knock"}'),
                       ([1, 2], b'{"error": "bad request"}'),
                       ({"s": TAG, "blob": "AAAA", "relay": 1, "j": "XYZ"}, b'{"error": "bad nonce"}'),
                       ({"s": TAG, "blob": "AAAA", "relay": 1, "j": "0123456"}, b'{"error": "bad nonce"}'),
                       ({"s": TAG, "blob": "AAAA", "relay": 1, "j": "0123456789abcdef0"},
                        b'{"error": "bad nonce"}'),
                       ({"s": TAG, "blob": "AAAA", "relay": "yes"}, b'{"error": "bad nonce"}'),
                       ({"s": TAG, "blob": "AAAA", "relay": 1, "j": "0123456789AB"}, b'{"error": "bad nonce"}')):
        st, data = knock(m, body, ip="10.1.1.1")
        check((st, data) == (400, want), "%r -> %s %r, want 400 %r" % (body, st, data, want))
    for q in ("s=" + TAG.upper(), "s=" + TAG[:23] + "&since=0", "s=", "since=0"):
        st, data, _ = http_raw("GET", m.url("/knock?" + q))
        check((st, data) == (400, b'{"error": "bad tag"}'), "GET ?%s -> %s %r" % (q, st, data))
    check(len(notes(poll(m, TAG))) == 2, "a refused knock was stored")
    # A 1,024-character blob is the longest taken; a falsy relay asks for none.
    st, data = knock(m, {"s": tag(3), "blob": "A" * 1024, "relay": 0, "j": "x"}, ip="10.1.1.2")
    check((st, data) == (200, OK60), "1,024-char blob, relay 0 -> %s %r" % (st, data))


def per_tag(m):
    for i in range(1, 21):
        st, data = knock(m, {"s": tag(10), "blob": "N%03d" % i}, ip="10.3.0.%d" % i)
        check((st, data) == (200, OK60), "note %d -> %s %r" % (i, st, data))
    got = [n["blob"] for n in notes(poll(m, tag(10)))]
    check(got == ["N%03d" % i for i in range(5, 21)], "a tag keeps its newest 16: %r" % got)


def rate(m):
    # 45 posts from one client address (X-Real-IP, from the trusted proxy).
    got = [knock(m, {"s": tag(20 + i % 3), "blob": "AAAA"}, ip="198.51.100.9") for i in range(45)]
    check(got[:40] == [(200, OK60)] * 40, "the first 40 were not all stored: %r" % got[:40])
    check(got[40:] == [(429, TOO_MANY)] * 5, "posts 41..45: %r" % got[40:])
    check(knock(m, {"s": tag(20), "blob": "AAAA"}, ip="198.51.100.10") == (200, OK60),
          "another address was limited too")
    # 127.0.0.2 is no proxy: its X-Real-IP is not believed, the peer counts.
    got = [knock(m, {"s": tag(23), "blob": "AAAA"}, ip="203.0.113.%d" % (i + 1), source="127.0.0.2")
           for i in range(45)]
    check(got[:40] == [(200, OK60)] * 40 and got[40:] == [(429, TOO_MANY)] * 5,
          "an untrusted peer escaped the limit with X-Real-IP: %r" % [s for s, _ in got])


def relay(m, lo, env):
    in_use = lambda: m.metrics()['rally_master_relay_ports{state="in_use"}']
    s5 = tag(50)
    st, data = knock(m, {"s": s5, "blob": "AAAA", "relay": 1, "j": "0123456789ab"}, ip="10.5.0.1")
    check(st == 200, "relay knock -> %s %r" % (st, data))
    port1, id1 = like(data, RELAY_REPLY)
    port1 = int(port1)
    check(lo <= port1 <= lo + 2, "port %d outside %d-%d" % (port1, lo, lo + 2))
    # The same (tag, nonce): the same allocation; the host's poll carries it.
    st, again = knock(m, {"s": s5, "blob": "AAAA", "relay": "yes", "j": "0123456789ab"}, ip="10.5.0.2")
    check((st, again) == (200, data), "same nonce -> %s %r, want %r" % (st, again, data))
    alloc = b'{"ip": "%s", "port": %d, "id": "%s"}' % (RIP.encode(), port1, id1.encode())
    like(poll(m, s5, "0"), b'{"knocks": [{"t": <float>, "blob": "AAAA", "relay": ' + alloc +
         b'}, {"t": <float>, "blob": "AAAA", "relay": ' + alloc + b'}], "now": <float>}')
    # Another nonce: another port.
    st, data = knock(m, {"s": s5, "blob": "AAAA", "relay": 1, "j": "00000002"}, ip="10.5.0.3")
    check(st == 200, "second nonce -> %s %r" % (st, data))
    port2, id2 = like(data, RELAY_REPLY)
    port2 = int(port2)
    check(port2 != port1 and lo <= port2 <= lo + 2 and id2 != id1, "second allocation %d %s" % (port2, id2))
    check(in_use() == 2, "ports in use: %s" % in_use())

    # Binds are acked: "TRLA" + id, 20 bytes, from the relay port.
    ra = (RIP, port1)
    rid = bytes.fromhex(id1)
    joiner, host, stranger = env.udp(), env.udp(), env.udp("127.0.0.3")
    for sock, role in ((joiner, b"J"), (host, b"H")):
        sock.sendto(b"TRLB" + rid + role, ra)
        got = recv(sock)
        check(got == (b"TRLA" + rid, ra), "bind %s -> %r" % (role, got))
    # Datagrams cross both ways verbatim and come from the relay port.
    for src, dst, payload in ((joiner, host, bytes.fromhex("4e50313a480011223344556677")),
                              (host, joiner, bytes.fromhex("4e50313a410011223344556677")),
                              (joiner, host, b"X" * 21), (host, joiner, bytes(range(256)) * 5)):
        src.sendto(payload, ra)
        got = recv(dst)
        check(got == (payload, ra), "%d bytes crossed as %r" % (len(payload), got and got[0][:40]))
    # A wrong id, a bad role and a stranger's datagram go nowhere.
    before = m.metrics()
    stranger.sendto(b"TRLB" + bytes(16) + b"J", ra)
    stranger.sendto(b"TRLB" + rid + b"X", ra)
    stranger.sendto(bytes.fromhex("4e50313a447b7d"), ra)
    joiner.sendto(b"TRLB" + bytes(16) + b"J", ra)
    # A marker each way after them: once it arrives, the relay has dealt
    # with everything sent before it.
    joiner.sendto(b"marker-jh", ra)
    check(recv(host) == (b"marker-jh", ra), "the joiner's marker did not reach the host")
    host.sendto(b"marker-hj", ra)
    check(recv(joiner) == (b"marker-hj", ra), "the host's marker did not reach the joiner")
    for name, sock in (("stranger", stranger), ("host", host), ("joiner", joiner)):
        check(pending(sock) == [], "the %s got %r" % (name, pending(sock)))
    after = m.metrics()
    ev = 'rally_master_relay_events_total{event="%s"}'
    check(after[ev % "bad_bind"] - before[ev % "bad_bind"] == 3, "bad binds not counted")
    check(after[ev % "stranger"] - before[ev % "stranger"] == 1, "the stranger not counted")

    # The rate limit runs before a port is taken: a 429 knock takes none.
    for i in range(40):
        check(knock(m, {"s": tag(60), "blob": "AAAA"}, ip="10.7.0.1") == (200, OK60), "post %d" % i)
    st, data = knock(m, {"s": tag(60), "blob": "AAAA", "relay": 1, "j": "77777777"}, ip="10.7.0.1")
    check((st, data) == (429, TOO_MANY), "relay knock over the limit -> %s %r" % (st, data))
    check(in_use() == 2, "a refused knock took a port: %s in use" % in_use())
    # The range runs out: the known nonces keep theirs (and their idle
    # timers restart), a third gets the last port, a fourth none.
    for nonce, port in (("0123456789ab", port1), ("00000002", port2)):
        st, data = knock(m, {"s": s5, "blob": "AAAA", "relay": 1, "j": nonce}, ip="10.7.1.1")
        check(st == 200 and int(like(data, RELAY_REPLY)[0]) == port, "nonce %s moved" % nonce)
    st, data = knock(m, {"s": s5, "blob": "AAAA", "relay": 1, "j": "00000003"}, ip="10.7.1.2")
    check(st == 200, "third nonce -> %s %r" % (st, data))
    port3 = int(like(data, RELAY_REPLY)[0])
    check({port1, port2, port3} == {lo, lo + 1, lo + 2}, "ports %d %d %d" % (port1, port2, port3))
    st, data = knock(m, {"s": s5, "blob": "AAAA", "relay": 1, "j": "00000004"}, ip="10.7.1.3")
    check((st, data) == (503, b'{"error": "relay full"}'), "fourth nonce -> %s %r" % (st, data))
    check(knock(m, {"s": s5, "blob": "AAAA"}, ip="10.7.1.3") == (200, OK60),
          "a knock without relay was refused while the ports are full")

    # Idle allocations close; a later knock takes a port of the range again.
    wait_for(lambda: in_use() == 0, 20, "the idle allocations to close")
    wait_for(lambda: len(m.grep(r"relay-port-close port=\d+ reason=idle")) == 3, 5,
             "three idle closes in the log")
    st, data = knock(m, {"s": s5, "blob": "AAAA", "relay": 1, "j": "00000005"}, ip="10.8.0.1")
    check(st == 200, "knock after the idle close -> %s %r" % (st, data))
    port5, id5 = like(data, RELAY_REPLY)
    port5 = int(port5)
    check(lo <= port5 <= lo + 2 and id5 not in (id1, id2), "reused allocation %d %s" % (port5, id5))
    # The old id is dead; the new one binds.
    joiner.sendto(b"TRLB" + rid + b"J", (RIP, port5))
    joiner.sendto(b"TRLB" + bytes.fromhex(id5) + b"J", (RIP, port5))
    check(recv(joiner) == (b"TRLA" + bytes.fromhex(id5), (RIP, port5)), "no ack for the new id")
    check(pending(joiner) == [], "the old id got an answer")


def scenario(env):
    lo = 29600
    m = Master(env, args=["--relay-ip", RIP, "--relay-ports", "%d-%d" % (lo, lo + 2),
                          "--relay-bind", RIP, "--relay-idle", "5000"])
    rendezvous(m)
    per_tag(m)
    rate(m)
    relay(m, lo, env)
    env.daemons_alive(m)


run(scenario)
