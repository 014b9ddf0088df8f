#!/usr/bin/env python3
"""Companies as netpunch's host gives them (lobby.py do_join).

coop (the default): every player is company 1, the host's joiners too; a
joiner may still pick its own. companies (--companies): a new name gets the
lowest free id; a returning name gets its remembered company back when no
one holds it, else the lowest free id. Joiners leave and come back as new
processes with the same name, as a player restarting the game does. The
host's {"cmd": "mode"} switches (lobby.py set_mode): companies keeps the
host on 1 and each joiner, in join order, on its own id while free, else
the lowest free one; coop puts everyone on 1. Like every roster change,
the host emits an event only when a company moved (a switch with nobody
else in the lobby emits none, but the first change); a joiner's roster
event counts the mode too.
Only loopback candidates, no STUN, no UPnP, no master."""

from harness import Lobby, check, run, wait_for


def companies(lobby):
    r = lobby.roster()
    return r.get("companies") if r else None


def join(env, code, name, tag):
    j = Lobby(env, "join", code=code, name=name, proc_name="lobby-%s" % tag)
    j.wait_status("connected", "^joined the host$")
    return j


def leave(host, j, name):
    j.command(cmd="quit")
    check(j.wait_exit(10) == 0, "%s did not quit cleanly" % name)
    wait_for(lambda: name not in (companies(host) or {}), 10, "%s gone from the roster" % name)


def coop(env):
    host = Lobby(env, "host", name="alice", proc_name="lobby-coop-host")
    code = host.wait_code()
    bob = join(env, code, "bob", "coop-bob")
    carol = join(env, code, "carol", "coop-carol")
    want = {"alice": 1, "bob": 1, "carol": 1}
    wait_for(lambda: companies(host) == want, 5, "coop: everyone company 1 (host)")
    wait_for(lambda: companies(carol) == want, 5, "coop: everyone company 1 (carol)")
    check(host.roster()["mode"] == "coop" and host.state()["mode"] == "coop", "coop mode")
    # A joiner may set its own company, in coop as well.
    bob.command(cmd="company", id=5)
    wait_for(lambda: (companies(carol) or {}).get("bob") == 5, 5, "bob's own pick")
    leave(host, carol, "carol")
    carol = join(env, code, "carol", "coop-carol-2")
    wait_for(lambda: companies(host) == {"alice": 1, "bob": 5, "carol": 1}, 5,
             "coop: a returning player is company 1 again")
    leave(host, bob, "bob")
    leave(host, carol, "carol")
    host.command(cmd="quit")
    host.wait_exit(10)


def companies_mode(env):
    host = Lobby(env, "host", name="alice", args=["--companies"], proc_name="lobby-comp-host")
    code = host.wait_code()
    bob = join(env, code, "bob", "bob")
    carol = join(env, code, "carol", "carol")
    wait_for(lambda: companies(host) == {"alice": 1, "bob": 2, "carol": 3}, 5,
             "companies: the lowest free ids")
    check(host.roster()["mode"] == "companies", "companies mode")
    bob.command(cmd="company", id=7)
    wait_for(lambda: (companies(host) or {}).get("bob") == 7, 5, "bob picks 7")
    leave(host, bob, "bob")
    dave = join(env, code, "dave", "dave")
    wait_for(lambda: companies(host) == {"alice": 1, "carol": 3, "dave": 2}, 5,
             "a new name: the lowest free id (2)")
    bob = join(env, code, "bob", "bob-2")
    wait_for(lambda: (companies(host) or {}).get("bob") == 7, 5,
             "a returning name: its remembered company (7) while free")
    leave(host, carol, "carol")
    frank = join(env, code, "frank", "frank")
    wait_for(lambda: (companies(host) or {}).get("frank") == 3, 5, "frank takes the free 3")
    carol = join(env, code, "carol", "carol-2")
    wait_for(lambda: (companies(host) or {}).get("carol") == 4, 5,
             "a returning name whose company is held: the lowest free id (4)")
    wait_for(lambda: companies(carol) == {"alice": 1, "bob": 7, "carol": 4, "dave": 2,
                                          "frank": 3}, 5, "carol's roster agrees")
    for p in (bob, dave, frank, carol):
        p.command(cmd="quit")
        p.wait_exit(10)
    host.command(cmd="quit")
    host.wait_exit(10)


def mode_command(env):
    host = Lobby(env, "host", name="alice", proc_name="lobby-mode-host")
    code = host.wait_code()
    wait_for(lambda: host.roster(), 5, "the host's first roster")
    # Alone. The first change always shows (lobby.py compares with the last
    # roster it emitted on a change, none at first); after that a switch
    # that moves nobody's company shows nothing, and the state keeps the
    # mode of the last event.
    host.command(cmd="mode", mode="companies")
    wait_for(lambda: len(host.events("roster")) == 2, 5, "the first change")
    host.command(cmd="mode", mode="coop")
    host.command(cmd="note", text="after the mode")
    host.wait_event(lambda e: e.get("type") == "chat", 5, "the note")
    check(len(host.events("roster")) == 2 and host.state()["mode"] == "companies",
          "a mode switch alone: %r %r" % (host.events("roster"), host.state()))
    bob = join(env, code, "bob", "mode-bob")
    carol = join(env, code, "carol", "mode-carol")
    # carol stays on 1, coop's company for all (a company command of hers
    # could reach the host after the mode switch below: nothing orders the
    # two processes); bob picks 5.
    bob.command(cmd="company", id=5)
    wait_for(lambda: companies(host) == {"alice": 1, "bob": 5, "carol": 1}, 5, "coop picks")
    host.command(cmd="mode", mode="companies")
    # bob keeps his free 5; carol's 1 is the host's: the lowest free, 2.
    want = {"alice": 1, "bob": 5, "carol": 2}
    wait_for(lambda: companies(host) == want and host.roster()["mode"] == "companies", 5,
             "companies: own ids while free")
    wait_for(lambda: companies(carol) == want and carol.roster()["mode"] == "companies", 5,
             "carol sees companies")
    wait_for(lambda: host.state()["mode"] == "companies" and host.state()["companies"] == want,
             5, "the state file's mode and companies")
    host.command(cmd="mode", mode="coop")
    want = {"alice": 1, "bob": 1, "carol": 1}
    wait_for(lambda: companies(host) == want and host.roster()["mode"] == "coop", 5,
             "coop: everyone on 1")
    wait_for(lambda: companies(bob) == want and bob.roster()["mode"] == "coop", 5, "bob sees coop")
    for p in (bob, carol):
        p.command(cmd="quit")
        p.wait_exit(10)
    host.command(cmd="quit")
    host.wait_exit(10)


def scenario(env):
    coop(env)
    companies_mode(env)
    mode_command(env)


run(scenario)
