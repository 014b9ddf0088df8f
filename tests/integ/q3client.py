"""A scripted Quake 3 (ioquake3 1.36, protocol 71) client for the tests:
enough of a real client's handshake that an unmodified OpenArena server
puts it in a client slot, so the server's own `status` lists it with the
address it sees.

  getchallenge <n> Quake3Arena   -> challengeResponse <challenge> <n> 71
  connect "<userinfo>"           -> connectResponse <challenge>

The connect's userinfo travels compressed with the engine's adaptive
Huffman code (ioquake3 NET_OutOfBandData -> Huff_Compress(msg, 12), from
the byte after "connect "): this module implements that code (the adaptive
Huffman of Sayood's book as ioquake3 keeps it: a tree whose node ranks are
the order of a doubly-linked list), written for these tests from the
algorithm's description and checked against the real server, which
accepts the connect only if it decodes.

Usable as a module (Q3Client) or as a program inside a namespace:
  python3 q3client.py HOST PORT [--name N] [--bind IP:PORT] [--hold S]
prints "connected local=IP:PORT" and keeps its socket for --hold seconds
(the server keeps a connected client's slot for sv_timeout, 200 s, without
hearing from it).
"""

import random
import socket
import sys
import time

OOB = b"\xff\xff\xff\xff"
NYT = 256
INTERNAL = 257


class _Node:
    __slots__ = ("symbol", "weight", "parent", "left", "right", "next", "prev", "head")

    def __init__(self, symbol, weight):
        self.symbol = symbol
        self.weight = weight
        self.parent = self.left = self.right = self.next = self.prev = None
        self.head = None


class _Cell:
    """What a node's head points at: the highest-ranked node of its weight
    block, shared by the nodes of the block."""
    __slots__ = ("node",)

    def __init__(self, node=None):
        self.node = node


class AdaptiveHuffman:
    def __init__(self):
        nyt = _Node(NYT, 0)
        self.tree = self.lhead = nyt
        self.loc = {NYT: nyt}

    def _swap(self, a, b):
        pa, pb = a.parent, b.parent
        if pa is not None:
            if pa.left is a:
                pa.left = b
            else:
                pa.right = b
        else:
            self.tree = b
        if pb is not None:
            if pb.left is b:
                pb.left = a
            else:
                pb.right = a
        else:
            self.tree = a
        a.parent, b.parent = pb, pa

    @staticmethod
    def _swaplist(a, b):
        a.next, b.next = b.next, a.next
        a.prev, b.prev = b.prev, a.prev
        if a.next is a:
            a.next = b
        if b.next is b:
            b.next = a
        if a.next is not None:
            a.next.prev = a
        if b.next is not None:
            b.next.prev = b
        if a.prev is not None:
            a.prev.next = a
        if b.prev is not None:
            b.prev.next = b

    def _increment(self, node):
        if node is None:
            return
        if node.next is not None and node.next.weight == node.weight:
            lnode = node.head.node
            if lnode is not node.parent:
                self._swap(lnode, node)
            self._swaplist(lnode, node)
        if node.prev is not None and node.prev.weight == node.weight:
            node.head.node = node.prev
        else:
            node.head.node = None
        node.weight += 1
        if node.next is not None and node.next.weight == node.weight:
            node.head = node.next.head
        else:
            node.head = _Cell(node)
        if node.parent is not None:
            self._increment(node.parent)
            if node.prev is node.parent:
                self._swaplist(node, node.parent)
                if node.head.node is node:
                    node.head.node = node.parent

    def add_ref(self, ch):
        if ch not in self.loc:
            leaf = _Node(ch, 1)
            inner = _Node(INTERNAL, 1)
            lh = self.lhead
            inner.next = lh.next
            if lh.next is not None:
                lh.next.prev = inner
                inner.head = lh.next.head if lh.next.weight == 1 else _Cell(inner)
            else:
                inner.head = _Cell(inner)
            lh.next = inner
            inner.prev = lh
            leaf.next = lh.next
            if lh.next is not None:
                lh.next.prev = leaf
                leaf.head = lh.next.head if lh.next.weight == 1 else _Cell(inner)
            else:
                leaf.head = _Cell(leaf)
            lh.next = leaf
            leaf.prev = lh
            if lh.parent is not None:
                if lh.parent.left is lh:
                    lh.parent.left = inner
                else:
                    lh.parent.right = inner
            else:
                self.tree = inner
            inner.right = leaf
            inner.left = lh
            inner.parent = lh.parent
            lh.parent = leaf.parent = inner
            self.loc[ch] = leaf
            self._increment(inner.parent)
        else:
            self._increment(self.loc[ch])

    def code(self, ch):
        """The bits that name ch (NYT when it is new), root first."""
        node = self.loc[ch]
        bits = []
        while node.parent is not None:
            bits.append(1 if node.parent.right is node else 0)
            node = node.parent
        bits.reverse()
        return bits


def huff_compress(data):
    """Huff_Compress of data: a big-endian 16-bit length, then the codes,
    bits filled from bit 0 of each byte, plus one byte (the engine adds 8
    bits to the end before rounding down)."""
    h = AdaptiveHuffman()
    bits = []
    for ch in data:
        if ch in h.loc:
            bits += h.code(ch)
        else:
            bits += h.code(NYT)
            bits += [(ch >> i) & 1 for i in range(7, -1, -1)]
        h.add_ref(ch)
    nbits = len(bits) + 8
    out = bytearray((nbits + 7) // 8 + 1)
    for i, b in enumerate(bits):
        out[i >> 3] |= b << (i & 7)
    return bytes([len(data) >> 8, len(data) & 0xFF]) + bytes(out[:nbits >> 3])


def huff_decompress(data):
    """The inverse, for the unit check below."""
    n = data[0] << 8 | data[1]
    buf = data[2:]
    h = AdaptiveHuffman()
    pos = 0
    out = bytearray()

    def bit():
        nonlocal pos
        b = (buf[pos >> 3] >> (pos & 7)) & 1
        pos += 1
        return b
    for _ in range(n):
        node = h.tree
        while node.symbol == INTERNAL:
            node = node.right if bit() else node.left
        ch = node.symbol
        if ch == NYT:
            ch = 0
            for _ in range(8):
                ch = (ch << 1) | bit()
        out.append(ch)
        h.add_ref(ch)
    return bytes(out)


class Q3Client:
    """One player: its own UDP socket (bound where the caller says)."""

    def __init__(self, server, name="rally", bind=None, protocol=71):
        self.server = server
        self.name = name
        self.protocol = protocol
        v6 = ":" in server[0]
        self.sock = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(bind or (("::" if v6 else "0.0.0.0"), 0))
        self.qport = random.randint(1, 65535)
        self.seq = 1

    def _ask(self, payload, want, timeout):
        """Sends payload (again each second) until an out-of-band answer
        whose first word is want arrives; returns its words."""
        deadline = time.monotonic() + timeout
        last = 0
        while time.monotonic() < deadline:
            now = time.monotonic()
            if now - last >= 1.0:
                self.sock.sendto(payload, self.server)
                last = now
            self.sock.settimeout(max(0.01, min(0.2, deadline - time.monotonic())))
            try:
                data, _ = self.sock.recvfrom(65535)
            except socket.timeout:
                continue
            if not data.startswith(OOB):
                continue
            words = data[4:].decode("latin-1").split()
            if words and words[0] == want:
                return words
            if words and words[0] == "print":
                raise RuntimeError("server refused: %r" % data[4:].decode("latin-1"))
        raise TimeoutError("no %s from %r" % (want, self.server))

    def connect(self, timeout=10):
        mine = random.randint(1, 2**31 - 1)
        words = self._ask(OOB + b"getchallenge %d Quake3Arena" % mine, "challengeResponse",
                          timeout)
        challenge = words[1]
        # OpenArena's game refuses a client without a GUID (32 hex digits,
        # what ioquake3 derives from its qkey file).
        info = ("\\challenge\\%s\\qport\\%d\\protocol\\%d\\name\\%s\\rate\\25000"
                "\\snaps\\20\\cl_guid\\%032X" % (challenge, self.qport, self.protocol,
                                                 self.name, random.getrandbits(128)))
        payload = OOB + b"connect " + huff_compress(('"%s"' % info).encode())
        self._ask(payload, "connectResponse", timeout)
        return self.sock.getsockname()

    def close(self):
        self.sock.close()


def _selfcheck():
    for s in (b"", b"a", b'"\\challenge\\-12345\\qport\\4321\\protocol\\71\\name\\x"',
              bytes(range(256)) * 3, b"abracadabra" * 50):
        if s:
            assert huff_decompress(huff_compress(s)) == s, s[:40]


def main(argv):
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("host")
    ap.add_argument("port", type=int)
    ap.add_argument("--name", default="rally")
    ap.add_argument("--bind", default=None, help="IP:PORT or [IPv6]:PORT (default: any)")
    ap.add_argument("--hold", type=float, default=0)
    a = ap.parse_args(argv)
    _selfcheck()
    bind = None
    if a.bind:
        bh, _, bp = a.bind.rpartition(":")
        bind = (bh.strip("[]"), int(bp))
    c = Q3Client((a.host, a.port), a.name, bind)
    local = c.connect()
    host = "[%s]" % local[0] if ":" in local[0] else local[0]
    print("connected local=%s:%d" % (host, local[1]), flush=True)
    end = time.monotonic() + a.hold
    while time.monotonic() < end:
        c.sock.settimeout(max(0.01, end - time.monotonic()))
        try:
            c.sock.recvfrom(65535)
        except socket.timeout:
            pass
    c.close()


if __name__ == "__main__":
    main(sys.argv[1:])
