"""A Quake 3 (ioquake3 protocol 71) client handshake from Python, for the
relay's query cache and attack-mode scenarios: getchallenge, then connect
with the userinfo Huffman-compressed as the engine's NET_OutOfBandData does
(adaptive Huffman from byte 12, code/qcommon/huffman.c's algorithm: FGK
updates with ranks kept as a list; written here from the algorithm, checked
against the real server: it answers connectResponse), then netchan packets
with the protocol-71 checksum so the server keeps the client and keeps
sending it snapshots (about 20 a second, sv_fps) for as long as it talks.

The payload after the netchan header is not a valid client message (that
needs the engine's static Huffman table); the server reads it, ignores it
and still counts the packet as the client's sign of life. For the relay it
is what a player is: the server answered connectResponse to its address and
the address then sent game traffic."""

import os
import random
import socket
import struct
import threading
import time

OOB = b"\xff\xff\xff\xff"
NYT = 256
INTERNAL = 257


class _Node:
    __slots__ = ("sym", "weight", "parent", "left", "right", "next", "prev", "block")

    def __init__(self, sym, weight):
        self.sym, self.weight = sym, weight
        self.parent = self.left = self.right = self.next = self.prev = self.block = None


class _Block:
    """The nodes of one weight share a block; top is the highest-ranked."""
    __slots__ = ("top",)

    def __init__(self, top):
        self.top = top


def _swaplist(a, b):
    """Swaps two nodes' places in the rank list."""
    if a is b:
        return
    if b.next is a:
        a, b = b, a
    if a.next is b:
        p, n = a.prev, b.next
        b.prev, b.next, a.prev, a.next = p, a, b, n
        if p is not None:
            p.next = b
        if n is not None:
            n.prev = a
        return
    ap, an, bp, bn = a.prev, a.next, b.prev, b.next
    a.prev, a.next, b.prev, b.next = bp, bn, ap, an
    for x, y in ((ap, b), (bp, a)):
        if x is not None:
            x.next = y
    for x, y in ((an, b), (bn, a)):
        if x is not None:
            x.prev = y


class AdaptiveHuffman:
    """The tree both ends grow as symbols go by. The list runs from the NYT
    node (weight 0, lowest rank) up; a node whose weight grows first trades
    places (in the tree too, unless it is its parent) with the highest-ranked
    node of its weight."""

    def __init__(self):
        self.nyt = _Node(NYT, 0)
        self.root = self.nyt
        self.loc = {NYT: self.nyt}

    def _swap_tree(self, a, b):
        pa, pb = a.parent, b.parent
        if pa is None:
            self.root = b
        elif pa.left is a:
            pa.left = b
        else:
            pa.right = b
        if pb is None:
            self.root = a
        elif pb.left is b:
            pb.left = a
        else:
            pb.right = a
        a.parent, b.parent = pb, pa

    def _increment(self, node):
        if node is None:
            return
        if node.next is not None and node.next.weight == node.weight:
            top = node.block.top
            if top is not node.parent:
                self._swap_tree(top, node)
            _swaplist(top, node)
        if node.prev is not None and node.prev.weight == node.weight:
            node.block.top = node.prev
        else:
            node.block.top = None
        node.weight += 1
        if node.next is not None and node.next.weight == node.weight:
            node.block = node.next.block
        else:
            node.block = _Block(node)
        parent = node.parent
        if parent is not None:
            self._increment(parent)
            if node.prev is parent:
                _swaplist(node, parent)
                if node.block.top is node:
                    node.block.top = parent

    def add(self, ch):
        leaf = self.loc.get(ch)
        if leaf is not None:
            self._increment(leaf)
            return
        # A new symbol: the NYT node becomes an inner node's left child,
        # the new leaf its right one; both enter the list just above NYT.
        nyt = self.nyt
        inner = _Node(INTERNAL, 1)
        first = nyt.next
        inner.next = first
        if first is not None:
            first.prev = inner
            inner.block = first.block if first.weight == 1 else _Block(inner)
        else:
            inner.block = _Block(inner)
        nyt.next, inner.prev = inner, nyt
        leaf = _Node(ch, 1)
        leaf.next, inner.prev, leaf.block = inner, leaf, inner.block
        nyt.next, leaf.prev = leaf, nyt
        parent = nyt.parent
        if parent is None:
            self.root = inner
        elif parent.left is nyt:
            parent.left = inner
        else:
            parent.right = inner
        inner.left, inner.right, inner.parent = nyt, leaf, parent
        nyt.parent = leaf.parent = inner
        self.loc[ch] = leaf
        self._increment(parent)

    def code(self, node):
        bits = []
        while node.parent is not None:
            bits.append(1 if node.parent.right is node else 0)
            node = node.parent
        bits.reverse()
        return bits


def huff_compress(data):
    """What Huff_Compress makes of data: its length (2 bytes, big-endian),
    then the code bits, least significant bit of each byte first; a new
    symbol is the NYT code and its 8 bits, most significant first."""
    h = AdaptiveHuffman()
    bits = []
    for ch in data:
        leaf = h.loc.get(ch)
        if leaf is None:
            bits += h.code(h.nyt) + [(ch >> i) & 1 for i in range(7, -1, -1)]
        else:
            bits += h.code(leaf)
        h.add(ch)
    if 16 + len(bits) >= len(data) * 8:
        # The engine's encoder stops at size * 8 bits: never the case
        # for a userinfo string, which repeats its characters.
        raise ValueError("does not compress")
    out = bytearray([len(data) >> 8, len(data) & 0xff])
    out += bytes(((16 + len(bits) + 8) >> 3) - 2)
    for i, b in enumerate(bits):
        pos = 16 + i
        out[pos >> 3] |= b << (pos & 7)
    return bytes(out)


def huff_decompress(buf):
    """Huff_Decompress, for checking huff_compress."""
    n = buf[0] * 256 + buf[1]
    h = AdaptiveHuffman()
    pos = 16
    out = bytearray()

    def bit():
        nonlocal pos
        b = (buf[pos >> 3] >> (pos & 7)) & 1
        pos += 1
        return b
    for _ in range(n):
        node = h.root
        while node.sym == INTERNAL:
            node = node.right if bit() else node.left
        ch = node.sym
        if ch == NYT:
            ch = 0
            for _ in range(8):
                ch = (ch << 1) | bit()
        out.append(ch)
        h.add(ch)
    return bytes(out)


class Refused(Exception):
    pass


class Q3Player:
    """One player: its own UDP socket (bound to ip), the handshake with
    server (the relay's public address, or the game server itself), then a
    thread that sends a netchan packet every interval and counts what the
    server sends back. Stop with close() (the harness's cleanups do)."""

    def __init__(self, env, server, ip="127.0.0.1", name="rallyplayer", timeout=10,
                 interval=0.05):
        self.server = server
        self.sock = env.udp(ip)
        self.addr = self.sock.getsockname()
        self.name = name
        self.interval = interval
        self.lock = threading.Lock()
        self.received = []      # (monotonic time, length) of game packets
        self.oob = []           # out-of-band answers after the handshake
        self.sent = 0
        self.stop_flag = False
        self.challenge = None
        self.qport = random.randrange(1, 65535)
        self.handshake(timeout)
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()
        env.cleanups.append(self.close)

    def _ask(self, payload, want, timeout):
        deadline = time.monotonic() + timeout
        last = 0
        while time.monotonic() < deadline:
            now = time.monotonic()
            if now - last >= 0.5:  # a real client resends every 500 ms or so
                self.sock.sendto(payload, self.server)
                last = now
            self.sock.settimeout(max(0.01, min(0.1, deadline - time.monotonic())))
            try:
                data, _ = self.sock.recvfrom(65535)
            except socket.timeout:
                continue
            if data.startswith(OOB + b"print"):
                raise Refused(data[4:].decode("latin-1", "replace").strip())
            if data.startswith(OOB + want):
                return data
        raise Refused("no %s from %s:%d within %ss" % (want.decode(), self.server[0],
                                                       self.server[1], timeout))

    def handshake(self, timeout):
        client_ch = random.randrange(1, 1 << 30)
        r = self._ask(OOB + b"getchallenge %d Quake3Arena" % client_ch, b"challengeResponse",
                      timeout)
        parts = r[4:].split()
        self.challenge = int(parts[1])
        guid = "".join(random.choice("0123456789ABCDEF") for _ in range(32))
        info = "\\cl_guid\\%s\\name\\%s\\rate\\25000\\snaps\\20\\protocol\\71" \
               "\\qport\\%d\\challenge\\%d" % (guid, self.name, self.qport, self.challenge)
        body = ('"%s"' % info).encode()
        r = self._ask(OOB + b"connect " + huff_compress(body), b"connectResponse", timeout)
        self.connected_at = time.monotonic()

    def _netchan(self, seq):
        # sequence, qport, then (protocol 71) challenge ^ (sequence * challenge)
        chk = (self.challenge ^ (seq * self.challenge)) & 0xffffffff
        return struct.pack("<iHI", seq, self.qport, chk) + os.urandom(8)

    def _run(self):
        seq = 1
        next_send = time.monotonic()
        while not self.stop_flag:
            now = time.monotonic()
            if now >= next_send:
                try:
                    self.sock.sendto(self._netchan(seq), self.server)
                    with self.lock:
                        self.sent += 1
                except OSError:
                    pass
                seq += 1
                next_send = now + self.interval
            self.sock.settimeout(max(0.001, next_send - time.monotonic()))
            try:
                data, _ = self.sock.recvfrom(65535)
            except (socket.timeout, OSError):
                continue
            with self.lock:
                if data.startswith(OOB):
                    self.oob.append((time.monotonic(), data))
                else:
                    self.received.append((time.monotonic(), len(data)))

    def ask(self, cmd, want, timeout=2.0):
        """An out-of-band request from the player's own address (its
        session): the round trip in seconds to the first answer starting
        with want, or None."""
        with self.lock:
            seen = len(self.oob)
        t0 = time.monotonic()
        self.sock.sendto(OOB + cmd, self.server)
        deadline = t0 + timeout
        while time.monotonic() < deadline:
            with self.lock:
                for ts, data in self.oob[seen:]:
                    if data.startswith(OOB + want):
                        return ts - t0
            time.sleep(0.002)
        return None

    def packets_since(self, t):
        with self.lock:
            return sum(1 for ts, _ in self.received if ts >= t)

    def close(self):
        self.stop_flag = True
        self.t.join(2)
