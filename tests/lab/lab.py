"""The network lab for tests/lab/*.py: an "internet" and home sites behind
real netfilter NATs, in network namespaces of the test's own (root).

    from lab import Lab, run

    def scenario(env):
        lab = Lab(env)                      # internet + rally-master + STUN
        a = lab.site("a", kind="cone")      # or symmetric, cgnat, upnp, natpmp
        h = a.host("h1")                    # a namespace on a's LAN
        lobby = h.proc([LOBBY_BIN, "host", "--stun", lab.internet.stun_arg(0),
                        "--publish", lab.internet.master_url], "lobby-a")
        ...
    run(scenario)

Layout (every address in 198.18.0.0/15, never routed anywhere):

    internet   198.18.0.0/16, one bridge (namespace <prefix>inet)
      pub      198.18.0.10 rally-master (HTTP 8471, UDP 27950, relay ports),
               198.18.0.20 + 198.18.0.21 the STUN server (3478/3479 on both)
      routers  198.18.1.N  the WAN side of site N (for cgnat: the carrier's)
      public   198.18.2.N  lab.public_host(): hosts with no NAT
    site N     198.19.N.0/24 LAN (router .1 on bridge "lan", hosts .10, .11...)
    carrier N  198.19.(128+N).0/24 between the home router and the CGN router

IPv6 (documentation prefix 2001:db8::/32 only, never routed out of the lab):
    internet   2001:db8::/64 on the same bridge; the bridge's namespace
               routes between the sites (2001:db8::1), rally-master has a
               second HTTP listener on 2001:db8::10 (lab.internet.master_url6)
      routers  2001:db8::1:N  the WAN side of site N
      public   2001:db8::2:N  lab.public_host(name, v6=True)
    site N     2001:db8:N::/64 on the LAN, routed, no NAT66 (router ::1, hosts
               ::10, ::11...), with lab.site(..., v6="open"|"firewall"):
    open       the router forwards everything (a v6 host is reachable)
    firewall   a home router's stateful filter: into the LAN only what is
               established/related (and the ICMPv6 errors RFC 4890 keeps)
    A cgnat site's carrier routes v6 (2001:db8:N:ffff::/64) and filters
    nothing; the home router applies the site's mode. site.host(name,
    v6only=True) has no IPv4 at all (lo's 127.0.0.1 aside). Addresses are
    static (nodad: no DAD wait), hosts get a default route via the router.

NATs (nftables; the router's own input chain drops unsolicited WAN packets,
without which conntrack would confirm an early punch on the router and the
host's own mapping would then move - LAB-NOTES):
    cone       `oifname "wan" masquerade`: endpoint-independent mapping,
               address-and-port-dependent filtering (port-restricted cone)
    symmetric  `masquerade fully-random`: a new port for every destination
    cgnat      a cone home router behind a carrier NAT (cgn="cone" by
               default, as RFC 6888 asks of a CGN; cgn="symmetric" too)
    upnp       a cone router running Debian's miniupnpd (nftables backend,
               ext_perform_stun against the lab STUN server, secure mode);
               it answers NAT-PMP too (enable_natpmp=yes)
    natpmp     the same router with enable_upnp=no: NAT-PMP (and PCP) on
               udp/5351 of its LAN address, no SSDP, no HTTP
Options of any site: hairpin=True (the router loops LAN packets sent to its
own WAN address:port back to the LAN host that holds that mapping, see
_HAIRPIN; default off, as Linux masquerade does by itself), and
inside=<site> (a double NAT: the router's WAN is a port on that site's LAN,
198.19.M.200 and up, so its hosts share the outer site's NAT with the hosts
on the outer LAN).

Every namespace is named <prefix><what>, the prefix unique to this test
(pid + random). All are deleted when the test ends: by Lab.close (an env
cleanup), on SIGTERM/SIGINT/SIGHUP (turned into an exception so the
cleanups run), after Lab(deadline=...) seconds, and - if the test is
killed outright - by a detached reaper process that wakes when the test's
end of a pipe closes, kills what runs in the namespaces and deletes them.
"""

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integ"))

import harness  # noqa: E402
from harness import BUILD, MASTER_BIN, Env, Failure, Proc, check, run, wait_for  # noqa: E402,F401

PROBE_BIN = os.path.join(BUILD, "tools", "upnpc-probe")
AGENT = os.path.join(HERE, "udpagent.py")
PYTHON = "/usr/bin/python3"

INET_PREFIX = 16
PUB_IP = "198.18.0.10"
STUN_IPS = ("198.18.0.20", "198.18.0.21")
STUN_PORTS = (3478, 3479)
MASTER_HTTP_PORT = 8471
MASTER_UDP_PORT = 27950
INET6_PLEN = 64
CORE6 = "2001:db8::1"     # the internet's v6 router (the bridge's namespace)
PUB6 = "2001:db8::10"     # rally-master's v6 address
V6_MODES = (None, "open", "firewall")

os.environ["PATH"] = os.environ.get("PATH", "/usr/bin:/bin") + ":/usr/sbin:/sbin"


def _need(prog, pkg):
    path = shutil.which(prog)
    check(path is not None, "%s is missing: apt-get install %s (tools/dev.sh test does)" % (prog, pkg))
    return path


def sh(argv, input=None, check_rc=True, timeout=20):
    r = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout)
    if check_rc and r.returncode != 0:
        raise Failure("%s: status %d: %s" % (" ".join(argv), r.returncode, r.stderr.strip()[-800:]))
    return r


# ---- the reaper: deletes the namespaces even if the test is SIGKILLed ----

_REAPER = r"""
import os, signal, subprocess, sys, time
prefix = sys.argv[1]
if os.fork() > 0:
    os._exit(0)              # the child lives on, re-parented: no one's descendant
os.setsid()
while True:
    try:
        if not os.read(0, 4096):
            break            # the test's end of the pipe closed: it is gone
    except InterruptedError:
        continue
    except OSError:
        break
env = dict(os.environ, PATH=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
try:
    names = [n for n in os.listdir("/run/netns") if n.startswith(prefix)]
except OSError:
    names = []
for n in names:
    r = subprocess.run(["ip", "netns", "pids", n], capture_output=True, text=True, env=env)
    for p in r.stdout.split():
        try:
            os.kill(int(p), signal.SIGKILL)
        except (OSError, ValueError):
            pass
time.sleep(0.2)
for n in names:
    subprocess.run(["ip", "netns", "delete", n], capture_output=True, env=env)
"""


def _start_reaper(prefix):
    r, w = os.pipe()  # both ends are close-on-exec: no other child holds w
    p = subprocess.Popen([PYTHON, "-c", _REAPER, prefix], stdin=r, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)
    p.wait(10)  # the intermediate exits at once
    os.close(r)
    return w


# ---- namespaces ----

class Ns:
    """A network namespace of this lab."""

    def __init__(self, lab, what):
        self.lab = lab
        self.what = what
        self.v6 = False
        self.name = lab.prefix + what
        sh(["ip", "netns", "add", self.name])
        lab.namespaces.append(self)
        self.ip("link", "set", "lo", "up")
        # IPv4 only: no router solicitations, DAD or v6 SSDP in the lab.
        self.sysctl("net.ipv6.conf.all.disable_ipv6", 1)
        self.sysctl("net.ipv6.conf.default.disable_ipv6", 1)

    def ip(self, *args):
        return sh(["ip", "-n", self.name] + [str(a) for a in args])

    def ip_batch(self, lines):
        """Several ip commands in one call (one per line, without "ip")."""
        return sh(["ip", "-n", self.name, "-batch", "-"], input="\n".join(lines) + "\n")

    def argv(self, *argv):
        return ["ip", "netns", "exec", self.name] + [str(a) for a in argv]

    def run(self, *argv, **kw):
        return subprocess.run(self.argv(*argv), **kw)

    def sh(self, *argv, input=None, check_rc=True, timeout=20):
        return sh(self.argv(*argv), input=input, check_rc=check_rc, timeout=timeout)

    def sysctl(self, key, value):
        # /proc/sys/net is per namespace; writing it needs the namespace's view.
        self.sh("sh", "-c", "echo %s > /proc/sys/%s" % (value, key.replace(".", "/")))

    def nft(self, ruleset):
        self.sh("nft", "-f", "-", input=ruleset)

    def enable_ipv6(self, forward=False):
        """IPv6 on in this namespace (every interface, now and later): no
        DAD (addresses usable at once), no router advertisements taken,
        forwarding when it routes."""
        self.v6 = True
        # No DAD anywhere before any interface comes up: writing
        # all/disable_ipv6 enables every interface at once, and a
        # link-local still in DAD leaves neighbour discovery without a
        # source for a second or two.
        script = ("for c in /proc/sys/net/ipv6/conf/*; do echo 0 > $c/accept_dad; "
                  "echo 0 > $c/accept_ra; %s done; "
                  "for c in /proc/sys/net/ipv6/conf/*; do echo 0 > $c/disable_ipv6; done" %
                  ("echo 1 > $c/forwarding;" if forward else ""))
        self.sh("sh", "-c", script)

    def nft_list(self, *what):
        """`nft list ...` output (default: the whole ruleset)."""
        return self.sh("nft", "list", *(what or ("ruleset",))).stdout

    def proc(self, argv, name, **kw):
        """Starts argv inside this namespace; a harness Proc (ended by PID
        at the end of the test)."""
        return Proc(self.lab.env, name, self.argv(*argv), **kw)

    def py(self, code, timeout=20):
        """Runs Python code inside the namespace; returns its stdout."""
        r = self.run(PYTHON, "-c", code, capture_output=True, text=True, timeout=timeout)
        check(r.returncode == 0, "python in %s: %s" % (self.name, r.stderr[-2000:]))
        return r.stdout

    def http(self, method, url, body=None, timeout=5):
        """(status, body text) of one HTTP call made from inside; status 0
        and the error text when no answer came."""
        code = (
            "import json,sys,urllib.request,urllib.error\n"
            "b=sys.stdin.buffer.read() or None\n"
            "r=urllib.request.Request(%r,data=b,method=%r)\n"
            "if b is not None: r.add_header('Content-Type','application/json')\n"
            "try:\n"
            "  x=urllib.request.urlopen(r,timeout=%r); print(x.status); sys.stdout.write(x.read().decode())\n"
            "except urllib.error.HTTPError as e:\n"
            "  print(e.code); sys.stdout.write(e.read().decode())\n"
            "except OSError as e:\n"
            "  print(0); print(e)\n" % (url, method, timeout))
        data = json.dumps(body) if isinstance(body, (dict, list)) else (body or "")
        r = self.run(PYTHON, "-c", code, input=data, capture_output=True, text=True,
                     timeout=timeout + 10)
        check(r.returncode == 0, "http from %s: %s" % (self.name, r.stderr[-2000:]))
        st, _, text = r.stdout.partition("\n")
        return int(st), text

    def pids(self):
        r = sh(["ip", "netns", "pids", self.name], check_rc=False)
        return [int(p) for p in r.stdout.split()]

    def delete(self):
        sh(["ip", "netns", "delete", self.name], check_rc=False)


class Host(Ns):
    """A machine: one interface (eth0) with one address and a default route."""

    def __init__(self, lab, what, ip, site=None):
        super().__init__(lab, what)
        self.addr = ip      # its own (LAN or public) address; None: v6 only
        self.addr6 = None   # its global IPv6 address, if any
        self.site = site    # None for a public host

    def agent(self, name=None, port=0, v6=False):
        """A UdpAgent inside this host: one UDP socket on 0.0.0.0:port, or
        with v6 on [::]:port (v6-only)."""
        return UdpAgent(self, name or "agent-%s" % self.what, port, bind="::" if v6 else None)

    def stun(self, server, port=0, timeout=3):
        """One-shot: the mapped address a STUN server sees for a fresh
        socket (or one bound to port): (ip, port) or None."""
        a = self.agent(port=port)
        try:
            return a.stun(server, timeout)
        finally:
            a.close()


class UdpAgent:
    """udpagent.py inside a host: one UDP socket, driven from the test.
    .addr is its local (ip, port); stun() asks a STUN server from it;
    send() sends from it; received() lists what arrived."""

    def __init__(self, host, name, port=0, bind=None):
        self.host = host
        argv = [PYTHON, "-u", AGENT, "--port", port] + (["--bind", bind] if bind else [])
        self.p = host.proc(argv, name, stdin=subprocess.PIPE)
        m = self.p.wait_line(r'^\{"ev": "ready"', timeout=10)
        self.addr = tuple(json.loads(m.string)["addr"])
        self.port = self.addr[1]
        self.seq = 0

    def _cmd(self, obj):
        self.p.p.stdin.write((json.dumps(obj) + "\n").encode())
        self.p.p.stdin.flush()

    def events(self, kind=None):
        out = []
        for ln in self.p.output():
            if ln.startswith("{"):
                try:
                    ev = json.loads(ln)
                except ValueError:
                    continue
                if kind is None or ev.get("ev") == kind:
                    out.append(ev)
        return out

    def stun_full(self, server, timeout=3, change=0):
        """The whole answer event: ok, mapped, from, attrs."""
        self.seq += 1
        sid = self.seq
        self._cmd({"op": "stun", "id": sid, "server": list(server), "change": change,
                   "timeout": timeout})

        def got():
            for ev in self.events("stun"):
                if ev.get("id") == sid:
                    return ev
            return None
        return wait_for(got, timeout + 5, "a STUN answer from %s:%d" % tuple(server))

    def stun(self, server, timeout=3):
        ev = self.stun_full(server, timeout)
        return tuple(ev["mapped"]) if ev["ok"] else None

    def send(self, to, data, count=1, interval=0.05):
        if isinstance(data, str):
            data = data.encode()
        self._cmd({"op": "send", "to": list(to), "data": data.hex(), "count": count,
                   "interval": interval})

    def received(self, src=None, prefix=None):
        """[(t, (ip, port), bytes)] of what arrived (STUN answers excluded)."""
        out = []
        for ev in self.events("recv"):
            d = bytes.fromhex(ev["data"])
            s = tuple(ev["from"])
            if (src is None or s == tuple(src)) and (prefix is None or d.startswith(prefix)):
                out.append((ev["t"], s, d))
        return out

    def close(self):
        if self.p.alive():
            try:
                self._cmd({"op": "quit"})
                self.p.p.wait(2)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.p.stop()


# ---- the internet ----

class LabMaster(Proc):
    """rally-master inside the pub namespace on fixed lab ports (the
    namespace is the test's own, so fixed ports cannot collide)."""

    def __init__(self, lab, ns, ip, args=(), debug=True, name="master", ip6=None):
        self.state_dir = os.path.join(lab.env.dir, "master-state")
        # A second listener on IPv6 (rally-master's --http repeats), for
        # hosts without IPv4: the same registry, knocks and relay ports.
        http6 = ["--http", "[%s]:%d" % (ip6, MASTER_HTTP_PORT)] if ip6 else []
        argv = [MASTER_BIN, "--http", "%s:%d" % (ip, MASTER_HTTP_PORT)] + http6 + [
                "--udp", "%s:%d" % (ip, MASTER_UDP_PORT), "--relay-ip", ip, "--relay-bind", ip,
                "--state-dir", self.state_dir, "--log", "plain"]
        if debug:
            argv.append("--debug")
        argv += list(args)
        check(os.path.exists(MASTER_BIN), "%s is missing: build first (RALLY_BUILD_DIR)" % MASTER_BIN)
        super().__init__(lab.env, name, ns.argv(*argv))
        m = self.wait_line(r"^(?:<\d>)?ready http=(\S+) udp=(\S+)$", 10)
        self.http_addr = harness.parse_addr(m.group(1))
        self.udp_addr = harness.parse_addr(m.group(2))
        self.http6_addr = (ip6, MASTER_HTTP_PORT) if ip6 else None

    def url(self, path=""):
        return "http://%s:%d%s" % (self.http_addr[0], self.http_addr[1], path)

    def url6(self, path=""):
        """The same over IPv6 ([2001:db8::10]), for v6-only hosts."""
        return "http://[%s]:%d%s" % (self.http6_addr[0], self.http6_addr[1], path)


class Internet:
    """The public segment: a bridge, the pub host (master + STUN), and the
    WAN side of every router."""

    def __init__(self, lab, stun, master, master_args):
        self.lab = lab
        self.bridge = Ns(lab, "inet")
        self.bridge.ip_batch(["link add br0 type bridge", "link set br0 up"])
        self.ports = 0
        self.pub = Host(lab, "pub", PUB_IP)
        self.attach(self.pub, "eth0", [PUB_IP] + list(STUN_IPS))
        self._start_v6()
        self.stun_kind = stun
        self.stun_servers = [(STUN_IPS[0], STUN_PORTS[0]), (STUN_IPS[1], STUN_PORTS[0])]
        self.stun_proc = self._start_stun(stun)
        self.master = LabMaster(lab, self.pub, PUB_IP, master_args, ip6=PUB6) if master else None
        self.master_url = self.master.url() if master else None
        self.master_url6 = self.master.url6() if master else None
        self.master_udp = self.master.udp_addr if master else None

    def attach(self, ns, ifname, ips):
        """Plugs ns into the bridge as interface ifname with ips (/16)."""
        self.ports += 1
        port = "p%d" % self.ports
        self.bridge.ip_batch([
            "link add %s type veth peer name %s netns %s" % (port, ifname, ns.name),
            "link set %s master br0" % port,
            "link set %s up" % port])
        ns.ip_batch(["addr add %s/%d dev %s" % (ip, INET_PREFIX, ifname) for ip in ips] +
                    ["link set %s up" % ifname])

    def _start_v6(self):
        """IPv6 on the bridge: its namespace is the core router between the
        sites' prefixes (route6), the pub host is PUB6."""
        self.bridge.enable_ipv6(forward=True)
        self.bridge.ip("addr", "add", "%s/%d" % (CORE6, INET6_PLEN), "dev", "br0", "nodad")
        self.pub.enable_ipv6()
        self.attach6(self.pub, "eth0", PUB6)
        self.pub.addr6 = PUB6

    def attach6(self, ns, ifname, ip6, gw=True):
        """Gives ns's interface on the bridge (attach) the v6 address ip6
        and, with gw, a default route via the core."""
        lines = ["addr add %s/%d dev %s nodad" % (ip6, INET6_PLEN, ifname)]
        if gw:
            lines.append("route add ::/0 via %s" % CORE6)
        ns.ip_batch(lines)

    def route6(self, prefix, via):
        """The core routes prefix (a site's) via that router's WAN address."""
        self.bridge.ip("route", "add", prefix, "via", via)

    def _start_stun(self, kind):
        ns = self.pub
        if kind == "stund":
            _need("stund", "stun-server")
            p = ns.proc(["stund", "-v", "-h", STUN_IPS[0], "-a", STUN_IPS[1],
                         "-p", STUN_PORTS[0], "-o", STUN_PORTS[1]], "stund")
        elif kind == "coturn":
            _need("turnserver", "coturn")
            d = os.path.join(self.lab.env.dir, "coturn")
            os.makedirs(d, exist_ok=True)
            p = ns.proc(["turnserver", "-n", "--stun-only", "--no-cli", "--no-tls", "--no-dtls",
                         "--no-tcp", "--listening-ip", STUN_IPS[0], "--listening-ip", STUN_IPS[1],
                         "--listening-port", STUN_PORTS[0],
                         "--alt-listening-port", STUN_PORTS[1],
                         "--pidfile", os.path.join(d, "turnserver.pid"),
                         "--userdb", os.path.join(d, "turndb"),
                         "--log-file", "stdout", "--simple-log"], "coturn")
        else:
            raise Failure("unknown STUN server %r (stund or coturn)" % kind)
        # Ready when it answers on both addresses (probed from pub itself).
        code = ("import sys; sys.path.insert(0, %r)\n"
                "import socket, os, udpagent\n"
                "s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(0.1)\n"
                "for srv in %r:\n"
                "  t=os.urandom(12); s.sendto(udpagent.stun_request(t), srv)\n"
                "  d,_=s.recvfrom(2048); assert udpagent.stun_parse(d)[0]==t\n" %
                (HERE, self.stun_servers))

        def answers():
            check(p.alive(), "%s exited: %s" % (kind, "\n".join(p.output()[-20:])))
            r = ns.run(PYTHON, "-c", code, capture_output=True, timeout=10)
            return r.returncode == 0
        wait_for(answers, 10, "%s to answer on %s" % (kind, self.stun_servers), interval=0.1)
        return p

    def stun_arg(self, i=0):
        """"IP:PORT" of STUN server i (0 or 1), for --stun."""
        return "%s:%d" % self.stun_servers[i]


# ---- sites ----

_FILTER = """
  chain input {{
    type filter hook input priority 0; policy drop;
    ct state established,related accept
    iifname "lo" accept
    iifname "lan" accept
{input_extra}  }}
  chain forward {{
    type filter hook forward priority 0; policy drop;
    ct state established,related accept
    iifname "lan" oifname "wan" accept
    iifname "lan" oifname "lan" accept
{forward_extra}  }}
"""


def router_ruleset(nat="cone", upnp=False, stun_from=()):
    """The nftables ruleset of a NAT router with interfaces lan and wan.
    A UPnP router keeps everything in `table inet filter` with the chains
    miniupnpd fills (Debian's nft_init.sh is broken: LAB-NOTES)."""
    input_extra = ""
    if stun_from:
        # miniupnpd's STUN test needs the answers from the other address
        # and port of the STUN server (CHANGE-REQUEST) to reach it.
        input_extra = "    ip saddr { %s } udp sport { %d, %d } accept\n" % (
            ", ".join(stun_from), STUN_PORTS[0], STUN_PORTS[1])
    masq = "masquerade fully-random" if nat == "symmetric" else "masquerade"
    if not upnp:
        return ("table inet lab {" + _FILTER.format(input_extra=input_extra, forward_extra="") +
                """  chain postrouting {
    type nat hook postrouting priority 100; policy accept;
    oifname "wan" counter %s
  }
}
""" % masq)
    return ("table inet filter {" +
            _FILTER.format(input_extra=input_extra, forward_extra="    jump miniupnpd\n") +
            """  chain miniupnpd {
  }
  chain prerouting {
    type nat hook prerouting priority -100; policy accept;
    jump prerouting_miniupnpd
  }
  chain postrouting {
    type nat hook postrouting priority 100; policy accept;
    jump postrouting_miniupnpd
    oifname "wan" counter %s
  }
  chain prerouting_miniupnpd {
  }
  chain postrouting_miniupnpd {
  }
}
""" % masq)


# Hairpinning (RFC 4787 REQ-9), verified in lab_selftest: Linux does not
# hairpin by itself. A LAN packet to the router's own WAN address:port finds
# no conntrack entry (the mapping's reply tuple expects the remote peer as
# its source), goes to the router's input chain and is refused there (ICMP
# port unreachable), even while that port is a live masquerade mapping of
# another LAN host. nftables has no "look up the mapping by its external
# port" either, so the router learns the mappings itself:
#   - a filter chain on postrouting after srcnat (priority 200, where the
#     conntrack's reply tuple already carries the port masquerade picked)
#     records every UDP mapping toward the WAN in a dynamic map, external
#     port -> LAN address . port (refreshed by every packet, 120 s timeout;
#     `ct reply proto-dst` needs the `meta l4proto udp` before it);
#   - prerouting DNATs LAN packets to the WAN address through that map;
#   - postrouting SNATs those (LAN source, DNATed, leaving on the LAN) to
#     the WAN address, so the receiver sees the sender's public side and
#     answers through the router (a plain DNAT would let it answer the
#     sender's LAN address directly, which the sender does not expect).
# A nat chain after masquerade would not do for the first rule: the nat
# hook stops at the first chain that binds a NEW connection. The SNAT keeps
# the sender's source port when it is free (nf_nat picks it first), so the
# receiver usually sees the sender's own mapping. UDP only.
_HAIRPIN = """table ip labhairpin {{
  map mapped {{
    type inet_service : ipv4_addr . inet_service
    flags dynamic, timeout
    timeout 120s
  }}
  chain learn {{
    type filter hook postrouting priority 200; policy accept;
    oifname "wan" meta l4proto udp ct status snat update @mapped {{ ct reply proto-dst : ct original ip saddr . ct original proto-src }}
  }}
  chain prerouting {{
    type nat hook prerouting priority -100; policy accept;
    iifname "lan" ip daddr {wan_ip} meta l4proto udp dnat ip to udp dport map @mapped
  }}
  chain postrouting {{
    type nat hook postrouting priority 100; policy accept;
    oifname "lan" ct status dnat ct original ip saddr {lan_net} counter snat ip to {wan_ip}
  }}
}}
"""


class Router(Ns):
    """A NAT router: interface wan (toward the internet or a carrier) and a
    LAN bridge named lan."""

    def __init__(self, lab, what, nat, lan_ip, upnp=False):
        super().__init__(lab, what)
        self.nat = nat
        self.lan_ip = lan_ip
        self.upnp = upnp
        self.wan_ip = None
        self.hairpin = False
        self.sysctl("net.ipv4.ip_forward", 1)
        # With br_netfilter loaded (docker does it), frames crossing the LAN
        # bridge would meet the router's forward chain; keep them out.
        if os.path.exists("/proc/sys/net/bridge/bridge-nf-call-iptables"):
            self.sysctl("net.bridge.bridge-nf-call-iptables", 0)
        # A fixed MAC: a bridge otherwise takes the lowest MAC of its ports
        # and changes it when a host is plugged in later, and every host
        # that cached the old one loses its gateway until its ARP entry
        # goes stale (~15 s of silence seen in the lab).
        mac = "02:00:%02x:%02x:%02x:%02x" % tuple(int(x) for x in lan_ip.split("."))
        self.ip_batch(["link add lan address %s type bridge" % mac,
                       "addr add %s/24 dev lan" % lan_ip, "link set lan up"])
        self.lan_ports = 0

    def firewall(self, stun_from=()):
        self.nft(router_ruleset(self.nat, self.upnp, stun_from))

    def enable_hairpin(self, lan_net):
        """Loops LAN packets to our WAN address back to the LAN (_HAIRPIN)."""
        self.nft(_HAIRPIN.format(wan_ip=self.wan_ip, lan_net=lan_net))
        self.hairpin = True

    def hairpin_packets(self):
        """Flows hairpinned so far (the SNAT rule's counter: a nat chain
        sees the first packet of a flow only)."""
        out = self.nft_list("chain", "ip", "labhairpin", "postrouting")
        m = re.search(r"counter packets (\d+) bytes \d+ snat", out)
        return int(m.group(1)) if m else 0

    def masq_packets(self):
        """Packets the masquerade rule has translated (its counter)."""
        table = "filter" if self.upnp else "lab"
        out = self.nft_list("chain", "inet", table, "postrouting")
        m = re.search(r"counter packets (\d+) bytes \d+ masquerade", out)
        return int(m.group(1)) if m else 0

    def plug(self, ns, ip, gw=None):
        """Connects ns to the LAN bridge as eth0 with ip/24 (default route
        via this router, or gw); ip None: no IPv4 on it (plug6 then)."""
        self.lan_ports += 1
        port = "h%d" % self.lan_ports
        self.ip_batch(["link add %s type veth peer name eth0 netns %s" % (port, ns.name),
                       "link set %s master lan" % port, "link set %s up" % port])
        if ip is None:
            ns.ip("link", "set", "eth0", "up")
            return
        ns.ip_batch(["addr add %s/24 dev eth0" % ip, "link set eth0 up",
                     "route add default via %s" % (gw or self.lan_ip)])

    # ---- IPv6: a routed prefix, no NAT66 ----

    def enable_v6(self, lan6):
        """IPv6 forwarding, lan6 (the LAN's ::1) on the LAN bridge. With
        br_netfilter loaded, bridged v6 frames stay out of the router's
        chains too (as plug's v4 ones)."""
        self.enable_ipv6(forward=True)
        if os.path.exists("/proc/sys/net/bridge/bridge-nf-call-ip6tables"):
            self.sysctl("net.bridge.bridge-nf-call-ip6tables", 0)
        self.lan6 = lan6
        self.ip("addr", "add", "%s/64" % lan6, "dev", "lan", "nodad")

    def plug6(self, ns, ip6):
        """ns's eth0 (plug) gets ip6/64 and a default v6 route via us."""
        ns.ip_batch(["addr add %s/64 dev eth0 nodad" % ip6, "route add ::/0 via %s" % self.lan6])

    def firewall6(self, mode):
        """The v6 rules beside the NAT ruleset (firewall(), one inet table
        for both families): v6 leaves unNATed, the router answers
        neighbour discovery on its WAN side, and into the LAN goes
        everything (open) or, beyond established/related, only the ICMPv6
        errors and echo requests RFC 4890 says a firewall keeps."""
        t = "filter" if self.upnp else "lab"
        rules = [
            "insert rule inet %s postrouting meta nfproto ipv6 accept" % t,
            "insert rule inet %s input icmpv6 type { nd-neighbor-solicit, nd-neighbor-advert, "
            "nd-router-solicit, nd-router-advert, destination-unreachable, packet-too-big, "
            "time-exceeded, parameter-problem, echo-request } accept" % t,
        ]
        if mode == "open":
            rules.append('add rule inet %s forward meta nfproto ipv6 iifname "wan" oifname "lan" '
                         'accept' % t)
        else:
            rules.append("add rule inet %s forward icmpv6 type { destination-unreachable, "
                         "packet-too-big, time-exceeded, parameter-problem, echo-request } "
                         "accept" % t)
        self.nft("\n".join(rules) + "\n")


class Site:
    """A home site: a NAT router (two for cgnat) and hosts on its LAN."""

    KINDS = ("cone", "symmetric", "cgnat", "upnp", "natpmp")

    def __init__(self, lab, name, kind, index, cgn="cone", upnp=None, hairpin=False, inside=None,
                 v6=None):
        check(kind in self.KINDS, "site kind %r: one of %s" % (kind, ", ".join(self.KINDS)))
        check(inside is None or kind in ("cone", "symmetric"),
              "inside=: a cone or symmetric router (%r)" % kind)
        check(v6 in V6_MODES, "site v6 %r: one of %r" % (v6, V6_MODES))
        self.v6 = v6
        self.prefix6 = None
        check(re.match(r"^[a-z][a-z0-9]{0,7}$", name), "site name %r: [a-z][a-z0-9]{0,7}" % name)
        self.lab = lab
        self.name = name
        self.kind = kind
        self.index = index
        self.lan_net = "198.19.%d.0/24" % index
        self.hosts = []
        self.miniupnpd = None
        self.outer = inside
        self.inner_ports = 0  # routers plugged into this LAN by inside=
        wan = "198.18.1.%d" % index
        use_upnp = kind in ("upnp", "natpmp") if upnp is None else upnp
        nat = "symmetric" if kind == "symmetric" else "cone"
        self.router = Router(lab, "%s-r" % name, nat, "198.19.%d.1" % index, upnp=use_upnp)
        self.cgn = None
        if kind == "cgnat":
            # home router -> carrier segment -> CGN router -> internet
            carrier = "198.19.%d" % (128 + index)
            self.cgn = Router(lab, "%s-cgn" % name, cgn, "%s.1" % carrier)
            self.cgn.lan_ports += 1
            self.cgn.ip_batch(["link add h1 type veth peer name wan netns %s" % self.router.name,
                               "link set h1 master lan", "link set h1 up"])
            self.router.ip_batch(["addr add %s.2/24 dev wan" % carrier, "link set wan up",
                                  "route add default via %s.1" % carrier])
            self.router.wan_ip = "%s.2" % carrier
            lab.internet.attach(self.cgn, "wan", [wan])
            self.cgn.ip("route", "add", "default", "dev", "wan")
            self.cgn.wan_ip = wan
            self.cgn.firewall()
            self.public_ip = wan
        elif inside is not None:
            inside._plug_router(self.router)
            self.public_ip = inside.public_ip
        else:
            lab.internet.attach(self.router, "wan", [wan])
            # An on-link default route: software that looks for one finds it.
            self.router.ip("route", "add", "default", "dev", "wan")
            self.router.wan_ip = wan
            self.public_ip = wan
        self.router.firewall(stun_from=STUN_IPS if use_upnp and kind != "cgnat" else ())
        if hairpin:
            self.router.enable_hairpin(self.lan_net)
        if v6:
            self._start_v6()
        if use_upnp:
            self._start_miniupnpd(stun=kind != "cgnat", upnp=kind != "natpmp")

    def _start_v6(self):
        """The site's routed prefix 2001:db8:N::/64 (module docstring)."""
        n = self.index
        self.prefix6 = "2001:db8:%x::" % n
        wan6 = "2001:db8::1:%x" % n
        self.router.enable_v6(self.prefix6 + "1")
        inet = self.lab.internet
        outer = self.cgn or self.router
        if self.cgn is not None:
            carrier = "2001:db8:%x:ffff::" % n
            self.cgn.enable_v6(carrier + "1")
            self.router.ip_batch(["addr add %s2/64 dev wan nodad" % carrier,
                                  "route add ::/0 via %s1" % carrier])
            self.cgn.ip("route", "add", "%s/64" % self.prefix6, "via", carrier + "2")
            self.cgn.firewall6("open")  # a carrier filters nothing
        inet.attach6(outer, "wan", wan6)
        outer.wan6 = wan6
        inet.route6("%s/48" % self.prefix6, wan6)
        self.router.firewall6(self.v6)

    @property
    def wan_ip(self):
        """The home router's WAN address (a carrier address for cgnat)."""
        return self.router.wan_ip

    def host(self, name, v6only=False):
        """A new host on this site's LAN (198.19.N.10, .11, ...; with the
        site's v6, 2001:db8:N::10, ::11, ... too). v6only: no IPv4 at all."""
        check(re.match(r"^[a-z][a-z0-9]{0,7}$", name), "host name %r: [a-z][a-z0-9]{0,7}" % name)
        check(self.v6 or not v6only, "host %r: v6only needs a site with v6" % name)
        ip = "198.19.%d.%d" % (self.index, 10 + len(self.hosts))
        h = Host(self.lab, "%s-%s" % (self.name, name), None if v6only else ip, site=self)
        if self.v6:
            h.enable_ipv6()
        self.router.plug(h, h.addr)
        if self.v6:
            h.addr6 = "%s%d" % (self.prefix6, 10 + len(self.hosts))
            self.router.plug6(h, h.addr6)
        self.hosts.append(h)
        return h

    def _plug_router(self, router):
        """Plugs an inner site's router into this LAN as its WAN (inside=):
        198.19.N.200 and up, default route via our router."""
        check(self.inner_ports < 50, "%s: too many inner routers" % self.name)
        ip = "198.19.%d.%d" % (self.index, 200 + self.inner_ports)
        self.inner_ports += 1
        r = self.router
        r.lan_ports += 1
        port = "h%d" % r.lan_ports
        r.ip_batch(["link add %s type veth peer name wan netns %s" % (port, router.name),
                    "link set %s master lan" % port, "link set %s up" % port])
        router.ip_batch(["addr add %s/24 dev wan" % ip, "link set wan up",
                         "route add default via %s" % r.lan_ip])
        router.wan_ip = ip

    def _start_miniupnpd(self, stun=True, upnp=True):
        _need("miniupnpd", "miniupnpd miniupnpd-nftables")
        d = os.path.join(self.lab.env.dir, "miniupnpd-%s" % self.name)
        os.makedirs(d, exist_ok=True)
        conf = os.path.join(d, "miniupnpd.conf")
        lines = [
            "ext_ifname=wan", "listening_ip=lan", "http_port=5000",
            "enable_upnp=%s" % ("yes" if upnp else "no"),
            "enable_natpmp=yes", "secure_mode=yes", "system_uptime=yes",
            "uuid=3d3cec3a-8cf0-11e0-98ee-001a6b%06x" % (self.index & 0xFFFFFF),
            "notify_interval=30", "clean_ruleset_interval=600",
            "allow 1024-65535 %s 1024-65535" % self.lan_net, "deny 0-65535 0.0.0.0/0 0-65535",
        ]
        if stun:
            lines += ["ext_perform_stun=yes", "ext_stun_host=%s" % STUN_IPS[0],
                      "ext_stun_port=%d" % STUN_PORTS[0]]
        with open(conf, "w") as f:
            f.write("\n".join(lines) + "\n")
        self.miniupnpd = self.router.proc(
            ["miniupnpd", "-d", "-f", conf, "-P", os.path.join(d, "miniupnpd.pid")],
            "miniupnpd-%s" % self.name)
        if upnp:
            self.miniupnpd.wait_line(r"HTTP listening on port 5000", timeout=15)
        else:
            self.miniupnpd.wait_line(r"Listening for NAT-PMP/PCP traffic on port 5351", timeout=15)

    def upnp_rules(self):
        """The nft chains miniupnpd fills (forward, DNAT, SNAT), as text."""
        return "\n".join(self.router.nft_list("chain", "inet", "filter", c)
                         for c in ("miniupnpd", "prerouting_miniupnpd", "postrouting_miniupnpd"))

    def mapped(self, port):
        """The protocols ("tcp", "udp") miniupnpd holds a DNAT rule for on
        external port `port`, made by UPnP or NAT-PMP alike (nft prints them
        raw: `@nh,72,8 0x11 th dport P dnat ...`, 0x11 UDP, 0x6 TCP)."""
        protos = re.findall(r"@nh,72,8 (0x11|0x6) th dport %d dnat\b" % port, self.upnp_rules())
        return sorted(set({"0x11": "udp", "0x6": "tcp"}[p] for p in protos))


# ---- the lab ----

class Lab:
    """An internet with rally-master and a STUN server; sites are added
    with site(). stun="stund" (the default, or $RALLY_LAB_STUN) or
    "coturn". master=False skips
    rally-master; master_args are appended to its command line. deadline
    (seconds) fails the test, cleanly, if it runs longer."""

    def __init__(self, env, stun=None, master=True, master_args=(), deadline=100):
        check(os.geteuid() == 0, "the lab needs root (network namespaces)")
        stun = stun or os.environ.get("RALLY_LAB_STUN", "stund")
        for prog, pkg in (("ip", "iproute2"), ("nft", "nftables")):
            _need(prog, pkg)
        self.env = env
        self.t0 = time.monotonic()
        self.prefix = "rl%d%s-" % (os.getpid(), "".join(random.choice("abcdefghjkmnpqrstuvwxyz")
                                                        for _ in range(3)))
        self.namespaces = []
        self.sites = {}
        self.publics = []
        self.closed = False
        self._reaper_fd = _start_reaper(self.prefix)
        env.cleanups.append(self.close)
        self._old_handlers = {}
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            self._old_handlers[sig] = signal.signal(sig, self._on_signal)
        if deadline:
            self._old_handlers[signal.SIGALRM] = signal.signal(signal.SIGALRM, self._on_deadline)
            signal.alarm(int(deadline))
        self.internet = Internet(self, stun, master, master_args)
        self.setup_s = time.monotonic() - self.t0

    def _on_signal(self, signo, frame):
        raise SystemExit(128 + signo)  # unwinds through harness.run's finally

    def _on_deadline(self, signo, frame):
        raise Failure("the lab's deadline passed (Lab(deadline=...))")

    def site(self, name, kind="cone", cgn="cone", upnp=None, hairpin=False, inside=None, v6=None):
        """A home site: kind cone, symmetric, cgnat, upnp or natpmp. cgn
        picks the carrier NAT of a cgnat site (cone or symmetric); upnp=True
        runs miniupnpd on the home router of any kind (behind a CGN it runs
        without STUN and cannot forward: what such a router reports).
        hairpin=True makes the router hairpin (_HAIRPIN); inside=<site>
        puts the router's WAN on that site's LAN (a cone or symmetric
        router: a double NAT whose outer NAT the outer LAN shares).
        v6 "open" or "firewall" gives it a routed IPv6 prefix (module
        docstring); None, IPv4 only."""
        check(name not in self.sites, "site %r exists" % name)
        check(inside is None or inside.name in self.sites, "inside=: a site of this lab")
        s = Site(self, name, kind, len(self.sites) + 1, cgn=cgn, upnp=upnp, hairpin=hairpin,
                 inside=inside, v6=v6)
        self.sites[name] = s
        return s

    def public_host(self, name, v6=False):
        """A host with a public address of its own on the internet (no NAT),
        e.g. for a dedicated relay lobby; v6=True: 2001:db8::2:N too."""
        ip = "198.18.2.%d" % (len(self.publics) + 1)
        h = Host(self, "pub-%s" % name, ip)
        if v6:
            h.enable_ipv6()
        self.internet.attach(h, "eth0", [ip])
        if v6:
            h.addr6 = "2001:db8::2:%x" % (len(self.publics) + 1)
            self.internet.attach6(h, "eth0", h.addr6)
        self.publics.append(h)
        return h

    @property
    def master(self):
        return self.internet.master

    def close(self):
        """Ends every process in the lab's namespaces and deletes them."""
        if self.closed:
            return
        self.closed = True
        signal.alarm(0)
        for sig, h in self._old_handlers.items():
            signal.signal(sig, h)
        # Our Procs first (they log their last lines), then anything left.
        for p in self.env.procs:
            if p.argv[:3] == ["ip", "netns", "exec"] and p.argv[3].startswith(self.prefix):
                try:
                    p.stop(3)
                except Exception:
                    pass
        left = []
        for ns in self.namespaces:
            for pid in ns.pids():
                try:
                    os.kill(pid, signal.SIGKILL)
                    left.append(pid)
                except OSError:
                    pass
        if left:
            time.sleep(0.1)
        for ns in reversed(self.namespaces):
            ns.delete()
        os.close(self._reaper_fd)


def punch(a, b, timeout=3.0, interval=0.05, servers=None):
    """A UDP hole punch between two UdpAgents, as lobbies do it: each
    learns its mapped address from STUN on its own socket, then both send
    to the other's mapped address every interval. Returns (a_got, b_got,
    seconds): whether each side heard the other within timeout."""
    srv = (servers or a.host.lab.internet.stun_servers)[0]
    ma, mb = a.stun(srv), b.stun(srv)
    check(ma and mb, "no STUN answer (%r, %r)" % (ma, mb))
    tag = os.urandom(4).hex()
    t0 = time.monotonic()
    n = int(timeout / interval) + 1
    a.send(mb, "punch-a-" + tag, count=n, interval=interval)
    b.send(ma, "punch-b-" + tag, count=n, interval=interval)
    deadline = t0 + timeout
    while time.monotonic() < deadline:
        ga = a.received(prefix=("punch-b-" + tag).encode())
        gb = b.received(prefix=("punch-a-" + tag).encode())
        if ga and gb:
            return True, True, max(ga[0][0], gb[0][0]) - t0
        time.sleep(0.02)
    ga = a.received(prefix=("punch-b-" + tag).encode())
    gb = b.received(prefix=("punch-a-" + tag).encode())
    return bool(ga), bool(gb), time.monotonic() - t0


def lab_namespaces(prefix):
    """Namespaces that exist now with this prefix (for checks)."""
    try:
        return sorted(n for n in os.listdir("/run/netns") if n.startswith(prefix))
    except OSError:
        return []
