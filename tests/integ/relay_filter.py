#!/usr/bin/env python3
"""rcon never reaches the server through the relay, however it is spelled,
while the same rcon sent straight to the server is executed (so the check can
fail); other unknown commands are dropped too, and counted."""

from harness import OAServer, Relay, check, first_token, query, run, wait_for


def scenario(env):
    oa = OAServer(env)
    relay = Relay(env, oa.addr)
    c = env.udp()

    # Positive control: the server does run rcon sent to it directly.
    direct = query(c, oa.addr, "rcon %s echo direct-rcon-marker" % oa.rcon, timeout=2)
    check(direct is not None and first_token(direct[0]) == "print",
          "direct rcon was not answered: %r" % (direct,))
    wait_for(lambda: oa.grep(r"Rcon from .*direct-rcon-marker"), 5,
             "the server to log the direct rcon")

    variants = [
        "rcon %s echo relayed-1" % oa.rcon,
        "RCON %s echo relayed-2" % oa.rcon,
        "  rcon %s echo relayed-3" % oa.rcon,
        "\"rcon\" %s echo relayed-4" % oa.rcon,
        "/* x */rcon %s echo relayed-5" % oa.rcon,
        "\trcon\t%s echo relayed-6" % oa.rcon,
    ]
    before = relay.drops("filtered")
    r2 = env.udp()
    for v in variants:
        got = query(r2, relay.addr, v, timeout=0.3)
        check(got is None, "rcon variant %r was answered through the relay: %r" % (v, got))
    # Other commands the server would act on are dropped as well.
    for v in ("disconnect", "ipAuthorize 1 accept", "getmotd", "heartbeat x", ""):
        check(query(r2, relay.addr, v, timeout=0.2) is None, "%r answered through the relay" % v)
    # A legitimate query still works from the same socket.
    check(query(r2, relay.addr, "getinfo", timeout=2) is not None, "getinfo after rcon")

    check(relay.drops("filtered") - before == len(variants) + 5,
          "filtered drops: %s" % (relay.drops("filtered") - before))
    # The server never saw an rcon from the relay's sockets.
    check(not oa.grep(r"relayed-\d"), "an rcon reached the server: %r" % oa.grep(r"relayed-"))
    check(len(oa.grep(r"Rcon from")) == 1, "server rcon log: %r" % oa.grep("Rcon from"))
    relay.wait_line(r"oob peer=\S+ dir=to-server cmd=rcon len=\d+ drop=filtered")
    env.daemons_alive(relay, oa)


run(scenario)
