#!/usr/bin/env python3
"""CMD_REALM_LIST rewriting on the auth stream (host -> client): the first
realm's address becomes relay_host:world_port and the length is fixed,
whatever the chunking of the host's data messages: each message its own
chunk, split at every kind of offset (inside the header, the name, the
address, the footer), 1-byte chunks for the whole exchange, the realm list
sharing a chunk with the proof (and everything in one chunk); several
realms (only the first changes); a longer and a shorter address; two
realm lists in a row (the client refreshes); an empty list; a malformed one
(the count says more realms than there are) forwarded untouched. Then the
same through a real TCP fake authserver that answers a client's requests.
The bytes the TCP client receives are compared with the expected ones."""

import socket

from coapeer import (HostPeer, Realm, TcpServer, TunnelRelay, auth_client_session,
                     connect_client, fake_authserver, logon_challenge_server,
                     logon_proof_server, realm, realm_list, recv_all, rewritten,
                     skip_unless_ready)
from harness import check, run, wait_for


def chunked(data, cuts):
    """data cut at the given offsets (sorted, unique, inside)."""
    out, o = [], 0
    for c in sorted(set(c for c in cuts if 0 < c < len(data))):
        out.append(data[o:c])
        o = c
    out.append(data[o:])
    return out


def scenario(env):
    r = Realm()
    relay = TunnelRelay(env, [r], pool_size=64, debug=False)
    host = HostPeer(env, relay, r)
    pending = {}

    def on_connect(peer, m):
        pending[m["stream_id"]] = m
        peer.connect_ok(m["stream_id"])
    host.on_connect = on_connect

    def run_vector(name, build):
        """build(world_addr) -> (chunks the host sends, bytes the client
        must receive)."""
        a = host.allocate_ok()
        waddr = "%s:%d" % (a["relay_host"], a["world_port"])
        chunks, want = build(waddr)
        c = connect_client((a["relay_host"], a["auth_port"]))
        st = host.wait_stream("auth", token=a["token"])
        wait_for(lambda: st.id in pending, 5, "connect of %s" % name)
        c.sendall(b"\x00\x08" + b"client challenge, unchecked")
        for ch in chunks:
            host.send_data(st.id, ch)
        host.send_close(st.id)
        got = recv_all(c, 10)
        c.close()
        if got != want:
            # The first differing offset, for the report.
            i = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]),
                     min(len(got), len(want)))
            check(False, "%s: %d bytes received, %d expected, first difference at %d:\n"
                  "  got  %s\n  want %s" % (name, len(got), len(want), i,
                                            got[max(0, i - 8):i + 40].hex(),
                                            want[max(0, i - 8):i + 40].hex()))
        env.log("%s: ok (%d chunks, %d bytes)" % (name, len(chunks), len(want)))

    one = [realm("Rally", "127.0.0.1:8085")]
    many = [realm("Rally PvE", "127.0.0.1:8085", flags=0x04, pop=1.5, chars=3, rid=1),
            realm("Rally PvP", "192.168.1.20:8086", type_=4, flags=0x02, rid=2),
            realm("Test", "10.0.0.9:8087", flags=0x04 | 0x20, rid=3)]
    n_rewrites = 0
    n_malformed = 0

    def std(realms, **kw):
        def build(waddr):
            ch, pr = logon_challenge_server(), logon_proof_server()
            rl = realm_list(realms, **kw)
            return [ch, pr, rl], ch + pr + rewritten(realms, waddr, **kw)
        return build

    run_vector("one realm", std(one))
    n_rewrites += 1
    run_vector("three realms", std(many))
    n_rewrites += 1
    run_vector("long address", std([realm("Far", "very-long-host-name.realms.example.org:8085")]))
    n_rewrites += 1
    run_vector("short address", std([realm("Near", "h:1")]))
    n_rewrites += 1

    # Splits of the realm list: inside the 3-byte header, in the count,
    # in the name, in the address, just before the footer, in the footer.
    rl = realm_list(many)
    name_at = 3 + 6 + 3 + 2
    addr_at = name_at + len("Rally PvE") + 1 + 5
    for cuts in ([1], [2], [3], [5, 8], [name_at], [addr_at], [addr_at - 1, addr_at + 4],
                 [len(rl) - 2], [len(rl) - 1], list(range(1, len(rl), 7))):
        def build(waddr, cuts=cuts):
            ch, pr = logon_challenge_server(), logon_proof_server()
            return [ch, pr] + chunked(rl, cuts), ch + pr + rewritten(many, waddr)
        run_vector("realm list cut at %s" % (cuts if len(cuts) < 5 else "every 7th byte"), build)
        n_rewrites += 1

    # The whole exchange in 1-byte chunks.
    def bytewise(waddr):
        ch, pr = logon_challenge_server(), logon_proof_server()
        data = ch + pr + realm_list(one)
        return [data[i:i + 1] for i in range(len(data))], ch + pr + rewritten(one, waddr)
    run_vector("1-byte chunks", bytewise)
    n_rewrites += 1

    # Sharing chunks: proof + realm list; everything in one; the challenge's
    # tail with the proof's head.
    def shared(waddr):
        ch, pr = logon_challenge_server(), logon_proof_server()
        return [ch, pr + realm_list(many)], ch + pr + rewritten(many, waddr)
    run_vector("proof and realm list in one chunk", shared)
    n_rewrites += 1

    def single(waddr):
        ch, pr = logon_challenge_server(), logon_proof_server()
        return [ch + pr + realm_list(one)], ch + pr + rewritten(one, waddr)
    run_vector("everything in one chunk", single)
    n_rewrites += 1

    def straddle(waddr):
        ch, pr = logon_challenge_server(), logon_proof_server()
        data = ch + pr + realm_list(one)
        return [data[:100], data[100:130], data[130:160], data[160:]], ch + pr + rewritten(one, waddr)
    run_vector("chunks straddling every message", straddle)
    n_rewrites += 1

    # The client refreshes: two realm lists, both rewritten.
    def twice(waddr):
        ch, pr = logon_challenge_server(), logon_proof_server()
        return ([ch, pr, realm_list(one), realm_list(many)],
                ch + pr + rewritten(one, waddr) + rewritten(many, waddr))
    run_vector("two realm lists", twice)
    n_rewrites += 2

    # An empty list: nothing to rewrite, forwarded as is.
    def empty(waddr):
        ch, pr = logon_challenge_server(), logon_proof_server()
        rl0 = realm_list([])
        return [ch, pr, rl0], ch + pr + rl0
    run_vector("empty realm list", empty)

    # Malformed: the count says 3, one realm follows: untouched.
    def malformed(waddr):
        ch, pr = logon_challenge_server(), logon_proof_server()
        bad = realm_list(one, count=3)
        return [ch, pr, bad], ch + pr + bad
    run_vector("malformed (count 3, one realm)", malformed)
    n_malformed += 1

    # Malformed: the address's terminator gone, the parse runs into the
    # footer and past the end.
    def unterminated(waddr):
        ch, pr = logon_challenge_server(), logon_proof_server()
        good = realm_list(one)
        bad = good[:3] + good[3:].replace(b"127.0.0.1:8085\0", b"127.0.0.1:8085X")
        return [ch, pr, bad], ch + pr + bad
    run_vector("malformed (address runs past the end)", unterminated)
    n_malformed += 1

    # Through a TCP authserver, the client asking twice.
    host.on_connect = None
    rls = [realm("Rally", "127.0.0.1:8085", flags=0x04)]
    auth = TcpServer(env, fake_authserver(lambda: realm_list(rls), refresh=1))
    host.targets["auth"] = auth.addr
    a = host.allocate_ok()
    s, got = auth_client_session((a["relay_host"], a["auth_port"]), refresh=1)
    want = rewritten(rls, "%s:%d" % (a["relay_host"], a["world_port"]))
    check(got[2] == want and got[3] == want, "TCP authserver: realm lists %r, want %r" % (got[2:], want))
    s.shutdown(socket.SHUT_WR)
    s.close()
    n_rewrites += 2

    m = relay.tunnel_metrics()
    env.log("tunnel metrics: %s" % {k: v for k, v in m.items() if v})
    rw = m.get("rally_relay_tunnel_realmlist_rewritten_total")
    mal = m.get("rally_relay_tunnel_realmlist_malformed_total")
    check(rw == n_rewrites, "realm lists rewritten: metric %r, expected %d" % (rw, n_rewrites))
    check(mal == n_malformed, "malformed realm lists: metric %r, expected %d" % (mal, n_malformed))
    host.check_clean()
    env.daemons_alive(relay)


skip_unless_ready("relay_coa_realmlist")
run(scenario)
