"""q3client's player as a program, for tests that run the client inside a
network namespace of their own (tests/integ/relay_transparent*.py):

  python3 q3connect.py HOST PORT [--name N] [--bind IP:PORT] [--hold S]

Connects (getchallenge, the Huffman-coded connect, connectResponse: a real
ioquake3 protocol-71 handshake, q3client.Q3Player), prints "connected
local=IP:PORT", then keeps the player alive (its netchan packets) for
--hold seconds. --bind fixes the local address and port (two servers seen
from one player address and port); the default is any address of the
server's family, port 0."""

import argparse
import socket
import sys
import time

from q3client import Q3Player


class _Env:
    """What Q3Player asks of the harness's Env: a bound UDP socket and a
    list of cleanups."""

    def __init__(self, family, bind):
        self.family = family
        self.bind = bind
        self.cleanups = []

    def udp(self, ip):
        s = socket.socket(self.family, socket.SOCK_DGRAM)
        s.bind(self.bind or (ip, 0))
        return s


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("host")
    ap.add_argument("port", type=int)
    ap.add_argument("--name", default="rally")
    ap.add_argument("--bind", default=None, help="IP:PORT or [IPv6]:PORT (default: any)")
    ap.add_argument("--hold", type=float, default=0)
    a = ap.parse_args(argv)
    v6 = ":" in a.host
    bind = None
    if a.bind:
        bh, _, bp = a.bind.rpartition(":")
        bind = (bh.strip("[]"), int(bp))
    env = _Env(socket.AF_INET6 if v6 else socket.AF_INET, bind)
    p = Q3Player(env, (a.host, a.port), ip="::" if v6 else "0.0.0.0", name=a.name,
                 interval=0.5)
    host, port = p.addr[0], p.addr[1]
    print("connected local=%s:%d" % ("[%s]" % host if ":" in host else host, port), flush=True)
    end = time.monotonic() + a.hold
    while time.monotonic() < end:
        # The player's thread keeps talking; this one only waits for the
        # end of the hold (or SIGTERM from the test).
        time.sleep(min(1.0, max(0.0, end - time.monotonic())))
    for fn in env.cleanups:
        fn()


if __name__ == "__main__":
    main(sys.argv[1:])
