#!/usr/bin/env python3
"""The caller's IP is the only authentication of the Fugitive API, so
X-Forwarded-For counts only from --trusted-proxy peers (default 127.0.0.1
and ::1), read from the right: the first address that is not a trusted
proxy is the client. From any other peer the header is ignored: it cannot
claim, update or delete another server's listing, /reflection/ip shows the
peer, and a POST for the claimed address is refused before any datagram is
sent to it. Clients bind 127.0.0.x source addresses to be other peers."""

import json

from harness import Master, PongServer, check, http_raw, run, wait_for

BODY = json.dumps({"name": "proxied server", "game_version": 1, "current_players": 0,
                   "max_players": 8, "is_joinable": True}).encode()
FORBIDDEN = b'{"result":"request IP address does not match client IP address"}'


def call(m, method, path, xff=None, source=None, body=None):
    hdrs = {"X-Forwarded-For": xff} if xff is not None else {}
    st, data, _ = http_raw(method, m.url(path), body=body, headers=hdrs, source=source)
    return st, data


def reflected(m, xff=None, source=None):
    st, data = call(m, "GET", "/reflection/ip", xff, source)
    check(st == 200, "reflection -> %s" % st)
    return json.loads(data)["ip"]


def scenario(env):
    # Default trust: loopback 127.0.0.1 is the proxy.
    m = Master(env)
    check(reflected(m) == "127.0.0.1", "no header")
    check(reflected(m, "203.0.113.4") == "203.0.113.4", "trusted header ignored")
    check(reflected(m, "192.0.2.9, 203.0.113.4") == "203.0.113.4", "rightmost not taken")
    check(reflected(m, "203.0.113.4, 127.0.0.1") == "203.0.113.4", "trusted hop not skipped")
    check(reflected(m, "not-an-ip") == "127.0.0.1", "garbage header not ignored")
    # Behind the trusted proxy a server registers and leaves under the
    # forwarded address (proxy_test.go TestUpdateBehindTrustedProxy).
    st, data = call(m, "PUT", "/servers/203.0.113.4:45677", "203.0.113.4", body=BODY)
    check(st == 201, "PUT through the proxy -> %s %r" % (st, data))

    # Any other peer: the header is an impersonation attempt.
    for src in ("127.0.0.3", "127.0.0.4"):
        check(reflected(m, "203.0.113.4", src) == src, "untrusted %s header believed" % src)
        st, data = call(m, "PUT", "/servers/203.0.113.4:45677", "203.0.113.4", src,
                        b'{"name":"hijacked server","game_version":1,"max_players":8}')
        check((st, data) == (403, FORBIDDEN), "hijack PUT from %s -> %s %r" % (src, st, data))
        st, data = call(m, "DELETE", "/servers/203.0.113.4:45677", "203.0.113.4", src)
        check((st, data) == (403, FORBIDDEN), "DELETE from %s -> %s %r" % (src, st, data))
    entries = json.loads(http_raw("GET", m.url("/servers"))[1])
    check([e["name"] for e in entries] == ["proxied server"], "listing was hijacked: %r" % entries)

    # A POST claiming someone else's address (even one that would answer
    # pong) is refused, and nothing is sent to that address.
    victim = PongServer(env, ip="127.0.0.5")
    vid = "127.0.0.5:%d" % victim.addr[1]
    st, data = call(m, "POST", "/servers/" + vid, "127.0.0.5", "127.0.0.3", BODY)
    check((st, data) == (403, FORBIDDEN), "foreign POST -> %s %r" % (st, data))
    check(victim.packets() == [], "the master pinged an address the caller does not hold")
    # Through the trusted proxy, the forwarded client is pinged and listed.
    st, data = call(m, "POST", "/servers/" + vid, "127.0.0.5", body=BODY)
    check(st == 200, "POST through the proxy -> %s %r" % (st, data))
    wait_for(lambda: len(victim.packets()) == 10, 5, "ten pings at the forwarded client")
    # A peer calling from its own address needs no proxy.
    st, data = call(m, "PUT", "/servers/127.0.0.3:45677", "198.51.100.1", "127.0.0.3", BODY)
    check(st == 201, "own-address PUT from 127.0.0.3 -> %s %r" % (st, data))
    st, data = call(m, "DELETE", "/servers/203.0.113.4:45677", "203.0.113.4")
    check(st == 200, "DELETE through the proxy -> %s %r" % (st, data))
    env.daemons_alive(m)

    # --trusted-proxy replaces the defaults: 127.0.0.1 is then a stranger.
    m2 = Master(env, args=["--trusted-proxy", "127.0.0.2"], name="master2")
    check(reflected(m2, "203.0.113.4") == "127.0.0.1", "127.0.0.1 still trusted")
    st, data = call(m2, "PUT", "/servers/203.0.113.4:45677", "203.0.113.4", body=BODY)
    check((st, data) == (403, FORBIDDEN), "untrusted 127.0.0.1 PUT -> %s %r" % (st, data))
    check(reflected(m2, "203.0.113.4", "127.0.0.2") == "203.0.113.4", "127.0.0.2 not trusted")
    check(reflected(m2, "203.0.113.4, 127.0.0.2", "127.0.0.2") == "203.0.113.4",
          "chain through the trusted proxy")
    check(reflected(m2, "127.0.0.2, 127.0.0.2", "127.0.0.2") == "127.0.0.2",
          "all-trusted chain: leftmost")
    st, data = call(m2, "PUT", "/servers/203.0.113.4:45677", "203.0.113.4", "127.0.0.2", BODY)
    check(st == 201, "PUT through 127.0.0.2 -> %s %r" % (st, data))
    env.daemons_alive(m, m2)


if __name__ == "__main__":
    run(scenario)
