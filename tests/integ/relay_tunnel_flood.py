#!/usr/bin/env python3
"""A host that floods the tunnel and never reads: allocate requests (each
answered with an allocate_err once the limits are reached) and pings, sent
without ever reading an answer. The relay must not queue answers without
end: past 8 MiB or 16,384 messages queued for that host it stops answering and drops the
tunnel at its next reaper tick (`tunnel-host-down ... reason=not-reading`),
its memory stays bounded, and a second host on the same relay keeps its
allocation and stream working throughout."""

import json
import os
import socket

from coapeer import (HostPeer, Realm, TcpServer, TunnelRelay, WsConn, connect_client, duplex,
                     echo_handler, skip_unless_ready)
from harness import check, run


def scenario(env):
    skip_unless_ready("relay_tunnel_flood")
    bad, good = Realm(), Realm()
    # Under ASan every freed block waits in a 256 MiB quarantine, which
    # would hide what the relay itself holds: keep it small here.
    asan = os.environ.get("ASAN_OPTIONS", "")
    relay = TunnelRelay(env, [bad, good], pool_size=6,
                        args=["--tunnel-max-allocs-realm", "2", "--tunnel-ping-interval", "1"],
                        extra_env={"ASAN_OPTIONS": (asan + ":" if asan else "") +
                                   "quarantine_size_mb=4"})
    world = TcpServer(env, echo_handler)
    witness = HostPeer(env, relay, good, targets={"world": world.addr}, name="witness")
    a = witness.allocate_ok()

    flooder = HostPeer(env, relay, bad, start=False, name="flooder")
    flooder.ws.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    one = WsConn.frame(WsConn.OP_TEXT, json.dumps(
        {"cmd": "allocate", "request_id": 1,
         "player_id": "11111111-2222-4333-8444-555555555555"}).encode())
    ping = WsConn.frame(WsConn.OP_TEXT, b'{"cmd":"ping"}')
    batch = (one + ping) * 2000
    rss0 = relay.rss()
    sent = 0
    try:
        # ~90 bytes of answers per 2 requests: 8 MiB of them needs ~190k pairs
        for _ in range(150):
            flooder.ws.send_raw(batch)
            sent += 2000
    except (BrokenPipeError, ConnectionResetError, socket.timeout):
        pass
    relay.wait_line(r"tunnel-host-down realm=%s .*reason=not-reading" % bad.id, 20)
    grown = relay.rss() - rss0
    env.log("flooder dropped after %d request pairs; relay RSS +%d KiB" % (sent, grown))
    check(grown < 64 * 1024, "the relay grew %d KiB under the flood" % grown)
    m = relay.tunnel_metrics()
    check(m.get("rally_relay_tunnel_hosts") == 1, "hosts after the drop: %r" % m)

    # the witness never noticed
    check(witness.alive(), "the witness tunnel went down")
    w = connect_client((a["relay_host"], a["world_port"]), timeout=20)
    rec = {}
    duplex(w, 2 << 20, rec)
    check(rec.get("recv_sha") == rec.get("sent_sha"), "the witness stream: %r" % rec)
    w.close()
    env.daemons_alive(relay)


run(scenario)
