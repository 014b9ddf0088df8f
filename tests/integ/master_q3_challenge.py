#!/usr/bin/env python3
"""The challenge is what lists a server. A wrong challenge does not list;
an infoResponse without a heartbeat does not; one from another port than
the heartbeat's does not; one sent after the challenge's validity does not;
one with sv_maxclients 0 or without clients does not. The right one does,
and a heartbeat alone never refreshes a listing: a server that heartbeats
but no longer answers is delisted when --q3-ttl has passed since its last
infoResponse."""

import time

from harness import OOB, FakeQ3Server, Master, check, q3_getservers, run, wait_for

TTL_MS = 3000
CHALLENGE_MS = 600


def scenario(env):
    m = Master(env, args=["--q3-ttl", str(TTL_MS), "--q3-challenge", str(CHALLENGE_MS)])
    c = env.udp("127.0.0.81")

    def drops(reason):
        return m.metrics()['rally_master_q3_drops_total{reason="%s"}' % reason]

    def listed():
        return m.metrics()["rally_master_q3_servers"]

    # A wrong challenge.
    wrong = FakeQ3Server(env, challenge="not-it-123")
    wrong.heartbeat(m.udp_addr)
    wait_for(lambda: drops("bad_challenge") == 1, 5, "the wrong challenge")
    check(len(wrong.challenges) == 1 and wrong.challenges[0] != "not-it-123", "getinfo")

    # An infoResponse nobody asked for, carrying a challenge the master did
    # send to someone else.
    silent = FakeQ3Server(env, answer=False)
    silent.heartbeat(m.udp_addr)
    wait_for(lambda: silent.challenges, 5, "the getinfo")
    intruder = env.udp("127.0.0.82")
    intruder.sendto(OOB + ("infoResponse\n\\challenge\\%s\\protocol\\71\\sv_maxclients\\8\\"
                           "clients\\0" % silent.challenges[0]).encode(), m.udp_addr)
    # The same, from the challenged IP but another port.
    other_port = env.udp("127.0.0.1")
    other_port.sendto(OOB + ("infoResponse\n\\challenge\\%s\\protocol\\71\\sv_maxclients\\8\\"
                             "clients\\0" % silent.challenges[0]).encode(), m.udp_addr)
    wait_for(lambda: drops("no_pending") == 2, 5, "the unasked infoResponses")

    # Too late: the answer comes after the challenge's validity.
    t = time.monotonic()
    wait_for(lambda: time.monotonic() - t > CHALLENGE_MS / 1000.0 + 0.2, 3, "the validity to pass")
    silent.sock.sendto(OOB + ("infoResponse\n\\challenge\\%s\\protocol\\71\\sv_maxclients\\8\\"
                              "clients\\0" % silent.challenges[0]).encode(), m.udp_addr)
    wait_for(lambda: drops("no_pending") == 3, 5, "the late infoResponse")

    # Required fields.
    zero = FakeQ3Server(env, info={"protocol": "71", "sv_maxclients": "0", "clients": "0"})
    noclients = FakeQ3Server(env, info={"protocol": "71", "sv_maxclients": "8"})
    zero.heartbeat(m.udp_addr)
    noclients.heartbeat(m.udp_addr)
    wait_for(lambda: drops("bad_maxclients") == 1 and drops("bad_clients") == 1, 5,
             "the incomplete infoResponses")
    check(listed() == 0, "something got listed: %s" % listed())
    servers, _ = q3_getservers(c, m.udp_addr, "getservers 71 empty full")
    check(servers == [], "listed: %r" % servers)

    # The right challenge lists.
    good = FakeQ3Server(env)
    good.heartbeat(m.udp_addr)
    wait_for(lambda: listed() == 1, 5, "the good server")
    m.wait_line(r"q3-listed server=127\.0\.0\.1:%d game=Quake3Arena protocol=71" % good.addr[1])
    t_answer = time.monotonic()
    servers, _ = q3_getservers(c, m.udp_addr, "getservers 71 empty full")
    check(servers == [good.addr], "listed: %r" % servers)

    # It stops answering but keeps heartbeating: the getinfos go out, the
    # listing is not refreshed and expires on time.
    good.answer = False
    n0 = len(good.challenges)
    while listed() == 1:
        check(time.monotonic() - t_answer < TTL_MS / 1000.0 + 3, "never delisted")
        good.heartbeat(m.udp_addr)
        t_hb = time.monotonic()
        wait_for(lambda: time.monotonic() - t_hb >= 0.5 or listed() == 0, 2, "the next heartbeat")
    gone = time.monotonic() - t_answer
    check(gone >= TTL_MS / 1000.0 - 0.3, "delisted %.2fs after its last answer" % gone)
    check(len(good.challenges) - n0 >= 3, "heartbeats got no getinfo")
    m.wait_line(r"q3-delisted server=127\.0\.0\.1:%d game=Quake3Arena reason=expired" %
                good.addr[1], 2)
    env.daemons_alive(m)


run(scenario)
