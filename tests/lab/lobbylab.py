"""rally-lobby in the network lab: what tests/lab/lab_lobby_*.py and the
connect-time benchmark (tools/bench/lab-connect) share.

A lobby here is the harness's Lobby run inside a lab host's namespace,
pointed at the lab's STUN servers (both addresses of stund, so it can tell a
symmetric NAT) and at rally-master on the lab's public segment for knocks and
relay ports. Nothing here talks to anything outside the lab's namespaces.
"""

import datetime
import re
import time

from lab import PUB_IP, lab_namespaces
from harness import Bridge, Failure, Lobby, check

CONNECTED = re.compile(r"connected host=(\S+):(\d+) after_ms=(\d+)")
JOINED = re.compile(r"^(\S+Z) status state=connected detail=\"joined the host\"$")


def lobby_args(lab, upnp=False, rendezvous=True, natpmp=None):
    """The flags that point a lobby at the lab (and nowhere else). natpmp
    (None: as upnp) asks the router by NAT-PMP when UPnP does not map."""
    natpmp = upnp if natpmp is None else natpmp
    args = ["--stun", lab.internet.stun_arg(0), "--stun", lab.internet.stun_arg(1),
            "--upnp", "on" if upnp else "off", "--natpmp", "on" if natpmp else "off"]
    args += ["--rendezvous", lab.internet.master_url if rendezvous else "off"]
    return args


def host_lobby(lab, where, name, upnp=False, bridge=None, args=(), natpmp=None):
    """A hosting lobby on lab host `where`; returns it once CODE= is out."""
    a = lobby_args(lab, upnp=upnp, natpmp=natpmp) + list(args)
    if bridge:
        a += ["--game-local-port", str(bridge.port)]
    lb = Lobby(lab.env, "host", name=name, args=a, loopback=False, argv_prefix=where.argv(),
               proc_name="lobby-%s" % name)
    lb.where = where
    if bridge:
        bridge.connect(lb)
    lb.wait_code(timeout=20)
    return lb


def join_lobby(lab, where, code, name, rendezvous=True, bridge=None, args=()):
    """A joining lobby on lab host `where` (not waited for)."""
    a = lobby_args(lab, rendezvous=rendezvous) + list(args)
    if bridge:
        a += ["--game-local-port", str(bridge.port)]
    t0 = time.time()
    lb = Lobby(lab.env, "join", code=code, name=name, args=a, loopback=False,
               argv_prefix=where.argv(), proc_name="lobby-%s" % name)
    lb.where = where
    lb.t0 = t0
    if bridge:
        bridge.connect(lb)
    return lb


def bridge(lab, where, ident, **kw):
    return Bridge(lab.env, ident, argv_prefix=where.argv(), name="bridge-%s" % ident, **kw)


def wait_joined(j, timeout=30):
    """Waits until joiner j is in the lobby; returns (host ip, port,
    seconds from the joiner's start to "joined the host" - the stamp of
    that log line, so a caller waiting on several joiners in turn measures
    each one right -, after_ms: from its first HELLO to the first frame
    back)."""
    j.wait_status("connected", "^joined the host$", timeout=timeout)
    m = j.wait_line(JOINED.pattern, 5)
    at = datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()
    secs = at - j.t0
    m = j.wait_line(CONNECTED.pattern, 5)
    return m.group(1), int(m.group(2)), secs, int(m.group(3))


def path_of(lab, host_lobby_, ip):
    """Which of the host's candidates won: lan, direct (its public
    address), relay (a port of the lab master), v6 (its global IPv6
    address, bracketed or not) or the address itself."""
    h = host_lobby_.where
    if h.addr6 is not None and ip in (h.addr6, "[%s]" % h.addr6):
        return "v6"
    if ip == h.addr:
        return "lan"
    if ip == PUB_IP:
        return "relay"
    if h.site is not None and ip == h.site.public_ip:
        return "direct"
    return ip


def observed(lb):
    """The lobby's own NAT profile line, as a dict of strings."""
    m = lb.wait_line(r"observed (lan=.*)$", 15)
    return dict(kv.split("=", 1) for kv in m.group(1).split())


def punches(lb):
    """The host's punch lines (one per knock it answered)."""
    return lb.grep(r"\bpunch to=")


def close_lab(lab):
    """Closes the lab now and checks that no namespace of it is left."""
    prefix = lab.prefix
    lab.close()
    left = lab_namespaces(prefix)
    check(not left, "namespaces left after close: %r" % left)


def expect_failed(j, timeout):
    """A joiner that must give up: exit 1 and a failed status."""
    rc = j.wait_exit(timeout)
    check(rc == 1, "%s exit status %r, wanted 1" % (j.name, rc))
    ev = [e for e in j.events("status") if e.get("state") == "failed"]
    if not ev:
        raise Failure("%s: no failed status event: %r" % (j.name, j.events("status")))
    return ev[-1]
