#!/usr/bin/env python3
"""A UDP agent that runs inside a lab namespace (see lab.py, UdpAgent).

It owns one UDP socket (IPv4, or with --bind :: a v6-only IPv6 one) and
speaks JSON lines: commands on stdin, events on stdout. Everything it sends
leaves from that one socket, so a STUN answer describes the mapping the
other datagrams use - what a lobby does.

  stdout  {"ev": "ready", "addr": [ip, port]}
  stdin   {"op": "stun", "id": N, "server": [ip, port], "change": 0, "timeout": 2.0}
  stdout  {"ev": "stun", "id": N, "ok": true, "mapped": [ip, port], "attrs": {...}}
  stdin   {"op": "send", "to": [ip, port], "data": HEX, "count": 1, "interval": 0.05}
  stdout  {"ev": "recv", "from": [ip, port], "data": HEX, "t": MONOTONIC}
  stdin   {"op": "quit"}

A STUN answer is matched to its request by the transaction id; every other
datagram is a "recv" event.
"""

import json
import os
import select
import socket
import struct
import sys
import time

MAGIC = 0x2112A442


def stun_request(txid, change=0):
    """An RFC 5389 Binding Request; change adds an RFC 3489/5780
    CHANGE-REQUEST (4 = change IP, 2 = change port)."""
    attrs = struct.pack("!HHI", 0x0003, 4, change) if change else b""
    return struct.pack("!HHI", 0x0001, len(attrs), MAGIC) + txid + attrs


def _addr(v, xor, txid):
    if len(v) < 8 or v[1] != 1:  # IPv4 only in the lab
        return None
    port = struct.unpack("!H", v[2:4])[0]
    ip = v[4:8]
    if xor:
        port ^= MAGIC >> 16
        ip = bytes(a ^ b for a, b in zip(ip, struct.pack("!I", MAGIC)))
    return [socket.inet_ntoa(ip), port]


def stun_parse(data):
    """(txid, attrs) of a Binding Success Response, or None. attrs maps
    mapped, xor_mapped, source, changed, origin, other to [ip, port]."""
    if len(data) < 20:
        return None
    mtype, mlen, magic = struct.unpack("!HHI", data[:8])
    if mtype != 0x0101 or mlen + 20 > len(data):
        return None
    txid = data[8:20]
    names = {0x0001: ("mapped", False), 0x0020: ("xor_mapped", True),
             0x8020: ("xor_mapped", True), 0x0004: ("source", False),
             0x0005: ("changed", False), 0x802B: ("origin", False), 0x802C: ("other", False)}
    attrs = {}
    o = 20
    end = 20 + mlen
    while end - o >= 4:
        t, ln = struct.unpack("!HH", data[o:o + 4])
        if ln > end - o - 4:
            return None
        v = data[o + 4:o + 4 + ln]
        if t in names:
            name, xor = names[t]
            a = _addr(v, xor and magic == MAGIC, txid)
            if a and name not in attrs:
                attrs[name] = a
        o += 4 + ln + ((4 - ln % 4) % 4)
    return txid, attrs


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main():
    ip = "0.0.0.0"
    port = 0
    args = sys.argv[1:]
    while args:
        a = args.pop(0)
        if a == "--bind":
            ip = args.pop(0)
        elif a == "--port":
            port = int(args.pop(0))
        else:
            sys.exit("usage: udpagent.py [--bind IP] [--port PORT]")
    if ":" in ip:
        s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    else:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((ip, port))
    s.setblocking(False)
    emit({"ev": "ready", "addr": list(s.getsockname()[:2])})
    stuns = {}  # txid -> [id, server, change, next_send, deadline]
    sends = []  # [next_time, to, data, left, interval]
    inbuf = b""
    stdin = sys.stdin.buffer.raw if hasattr(sys.stdin.buffer, "raw") else sys.stdin.buffer
    while True:
        now = time.monotonic()
        timeout = 0.2
        for st in stuns.values():
            timeout = min(timeout, max(0, st[3] - now))
        for sd in sends:
            timeout = min(timeout, max(0, sd[0] - now))
        r, _, _ = select.select([s, stdin], [], [], timeout)
        now = time.monotonic()
        if stdin in r:
            chunk = os.read(stdin.fileno(), 65536)
            if not chunk:
                return
            inbuf += chunk
            while b"\n" in inbuf:
                line, inbuf = inbuf.split(b"\n", 1)
                if not line.strip():
                    continue
                cmd = json.loads(line)
                op = cmd.get("op")
                if op == "quit":
                    return
                if op == "stun":
                    txid = os.urandom(12)
                    stuns[txid] = [cmd["id"], tuple(cmd["server"]), int(cmd.get("change", 0)),
                                   now, now + float(cmd.get("timeout", 2.0))]
                elif op == "send":
                    sends.append([now, tuple(cmd["to"]), bytes.fromhex(cmd["data"]),
                                  int(cmd.get("count", 1)), float(cmd.get("interval", 0.05))])
                else:
                    emit({"ev": "error", "msg": "unknown op %r" % op})
        if s in r:
            for _ in range(64):
                try:
                    data, src = s.recvfrom(65535)
                except BlockingIOError:
                    break
                p = stun_parse(data)
                if p and p[0] in stuns:
                    st = stuns.pop(p[0])
                    m = p[1].get("xor_mapped") or p[1].get("mapped")
                    emit({"ev": "stun", "id": st[0], "ok": m is not None, "mapped": m,
                          "from": list(src[:2]), "attrs": p[1]})
                    continue
                emit({"ev": "recv", "from": list(src[:2]), "data": data.hex(), "t": now})
        for txid, st in list(stuns.items()):
            if now >= st[4]:
                del stuns[txid]
                emit({"ev": "stun", "id": st[0], "ok": False, "mapped": None})
            elif now >= st[3]:
                try:
                    s.sendto(stun_request(txid, st[2]), st[1])
                except OSError:
                    pass
                st[3] = now + 0.25  # retransmit until the deadline
        for sd in list(sends):
            if now >= sd[0]:
                try:
                    s.sendto(sd[2], sd[1])
                except OSError:
                    pass
                sd[3] -= 1
                sd[0] = now + sd[4]
                if sd[3] <= 0:
                    sends.remove(sd)


if __name__ == "__main__":
    try:
        main()
    except (KeyboardInterrupt, BrokenPipeError):
        pass
