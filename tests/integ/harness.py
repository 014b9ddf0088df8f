"""Shared harness for the integration scenarios (tests/integ/*.py).

Real processes on 127.0.0.0/8 only: our daemons on port 0 (their "ready"
line gives the port), a real OpenArena dedicated server (Debian's
openarena-server, LAN mode, every sv_master cleared so it never contacts the
internet), real clients (qstat). Waits poll a condition with a deadline; no
fixed sleeps stand in for a condition. Every process a scenario starts is
ended by PID when it finishes, and each daemon must still be alive at the end.
"""

import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.error
import urllib.parse
import urllib.request
from http.client import HTTPConnection

BUILD = os.environ.get("RALLY_BUILD_DIR") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "build")
RELAY_BIN = os.path.join(BUILD, "relay", "rally-relay")
MASTER_BIN = os.path.join(BUILD, "master", "rally-master")
OA_SERVER = "/usr/games/openarena-server"
OOB = b"\xff\xff\xff\xff"
TOKEN = "integ-test-token-0123456789abcdef0123456789"


class Failure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failure(msg)


def wait_for(pred, timeout, what, interval=0.02):
    """The one wait of the scenarios: polls pred() until it returns a true
    value and returns that value, or fails after timeout seconds naming what
    it waited for (what may be a callable, called then, to show the state
    at the deadline). Something that must happen is waited for here, never
    slept for; something that must not happen is bounded by a later event
    that proves the daemon got past it. The interval is the pause between
    two polls, bounded by the deadline; it is the only timed pause here."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        left = deadline - time.monotonic()
        if left <= 0:
            raise Failure("timed out after %.1fs waiting for %s" % (
                timeout, what() if callable(what) else what))
        time.sleep(min(interval, left))


def udp_rx_queue(addr):
    """Bytes waiting in the receive queue of the UDP socket bound to addr
    (ip, port), from /proc/net/udp{,6} of the caller's network namespace;
    None if no such socket."""
    ip, port = addr[0], addr[1]
    if ":" in ip:
        table, packed = "/proc/net/udp6", None
    else:
        table = "/proc/net/udp"
        packed = "%08X" % int.from_bytes(socket.inet_aton(ip), "little")
    try:
        with open(table) as f:
            next(f)
            for ln in f:
                cols = ln.split()
                lip, lport = cols[1].split(":")
                if int(lport, 16) == port and (packed is None or lip in (packed, "00000000")):
                    return int(cols[4].split(":")[1], 16)
    except OSError:
        pass
    return None


def wait_rx_drained(addr, timeout=10, what="the daemon to read its socket"):
    """Paces a sender on the receiver: returns once the daemon's socket at
    addr has nothing left unread, so a burst sent in steps never overflows
    its receive buffer (a loss that would not be the daemon's)."""
    wait_for(lambda: udp_rx_queue(addr) == 0, timeout,
             lambda: "%s (%s bytes unread on %s:%d)" % (what, udp_rx_queue(addr), addr[0], addr[1]))


def oob(cmd):
    if isinstance(cmd, str):
        cmd = cmd.encode()
    return OOB + cmd


def first_token(data):
    """The command word of an out-of-band reply, for assertions."""
    if not data.startswith(OOB):
        return None
    line = data[4:].split(b"\n", 1)[0]
    parts = line.split()
    return parts[0].decode("latin-1") if parts else ""


def chromium(env, performance_log=False):
    """Debian's chromium, headless, driven by python3-selenium through
    chromium-driver: a fresh profile in the scenario's dir, 1920x1080, the
    flags that keep it off the network (background networking, component
    updates, sync), its console log kept (and the performance log, which
    lists every request, with performance_log). Quit at cleanup."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        raise Failure("python3-selenium is missing: apt-get install python3-selenium "
                      "chromium chromium-driver (tools/dev.sh installs them)")
    for p in ("/usr/bin/chromium", "/usr/bin/chromedriver"):
        if not os.path.exists(p):
            raise Failure("%s is missing: apt-get install chromium chromium-driver" % p)
    profile = tempfile.mkdtemp(prefix="chromium-", dir=env.dir)
    env.cleanups.append(lambda: shutil.rmtree(profile, ignore_errors=True))
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for a in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
              "--disable-background-networking", "--disable-component-update", "--disable-sync",
              "--disable-dev-shm-usage", "--user-data-dir=" + profile, "--window-size=1920,1080"):
        opts.add_argument(a)
    logs = {"browser": "ALL"}
    if performance_log:
        logs["performance"] = "ALL"
    opts.set_capability("goog:loggingPrefs", logs)
    drv = webdriver.Chrome(service=Service("/usr/bin/chromedriver",
                                           log_path=os.path.join(env.dir, "chromedriver.log")),
                           options=opts)
    env.cleanups.append(drv.quit)
    drv.set_page_load_timeout(20)
    return drv


class Proc:
    """A child process whose stderr (and stdout) lines are collected."""

    def __init__(self, env, name, argv, stdin=None, merge_stdout=True, cwd=None, extra_env=None):
        self.env = env
        self.name = name
        self.argv = argv
        self.lines = []
        self.lock = threading.Lock()
        self.log_path = os.path.join(env.dir, "%s.%d.log" % (name, len(env.procs)))
        self.log = open(self.log_path, "w")
        e = dict(os.environ)
        if extra_env:
            e.update(extra_env)
        self.p = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL if stdin is None else stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merge_stdout else subprocess.PIPE,
            cwd=cwd, env=e)
        self.pid = self.p.pid
        stream = self.p.stdout if merge_stdout else self.p.stderr
        self.reader = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.reader.start()
        env.procs.append(self)

    def _read(self, stream):
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\n")
            with self.lock:
                self.lines.append(line)
            self.log.write(line + "\n")
            self.log.flush()
        stream.close()

    def output(self):
        with self.lock:
            return list(self.lines)

    def grep(self, pattern, start=0):
        """Lines (from index start) matching the regex."""
        rx = re.compile(pattern)
        return [ln for ln in self.output()[start:] if rx.search(ln)]

    def wait_line(self, pattern, timeout=10, start=0):
        rx = re.compile(pattern)

        def find():
            for ln in self.output()[start:]:
                m = rx.search(ln)
                if m:
                    return m
            if self.p.poll() is not None:
                self.reader.join(1)
                for ln in self.output()[start:]:
                    m = rx.search(ln)
                    if m:
                        return m
                raise Failure("%s exited (status %s) before printing /%s/; output:\n%s" % (
                    self.name, self.p.returncode, pattern, "\n".join(self.output()[-40:])))
            return None
        return wait_for(find, timeout, "%s to print /%s/" % (self.name, pattern))

    def alive(self):
        return self.p.poll() is None

    def signal(self, sig):
        if self.alive():
            os.kill(self.pid, sig)

    def stop(self, timeout=5):
        """SIGTERM, wait; SIGKILL if it lingers. Returns the exit status."""
        if self.alive():
            os.kill(self.pid, signal.SIGTERM)
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.p.wait(5)
        self.reader.join(2)
        return self.p.returncode

    def wait_exit(self, timeout=10):
        try:
            self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            raise Failure("%s did not exit within %ss" % (self.name, timeout))
        self.reader.join(2)
        return self.p.returncode


def parse_addr(s):
    m = re.match(r"^\[?([0-9a-fA-F.:]+?)\]?:(\d+)$", s)
    check(m, "bad address %r" % s)
    return (m.group(1), int(m.group(2)))


class Relay(Proc):
    def __init__(self, env, server, args=(), state_dir=None, control=True, debug=True,
                 token=TOKEN, wait_ready=True, name="relay", argv_prefix=(),
                 listen=("127.0.0.1:0",)):
        self.state_dir = state_dir or os.path.join(env.dir, "state")
        self.token = token
        argv = list(argv_prefix) + [RELAY_BIN]
        for a in listen:
            argv += ["--listen", a]
        argv += ["--server", "%s:%d" % server, "--state-dir", self.state_dir, "--log", "plain"]
        if control:
            self.token_file = os.path.join(env.dir, "token")
            if not os.path.exists(self.token_file):
                with open(self.token_file, "w") as f:
                    f.write(token + "\n")
            argv += ["--control", "127.0.0.1:0", "--token-file", self.token_file]
        if debug:
            argv.append("--debug")
        argv += list(args)
        if "--master" not in argv and "--no-heartbeat" not in argv:
            argv.append("--no-heartbeat")
        super().__init__(env, name, argv)
        self.addr = self.control = None
        if wait_ready:
            self.ready()

    def ready(self, timeout=10):
        """.addr is the first public address, .addrs all of them (a
        second --listen gives a second)."""
        m = self.wait_line(r"^(?:<\d>)?ready ((?:listen=\S+ ?)+)(?: control=(\S+))?$", timeout)
        self.addrs = [parse_addr(t[7:]) for t in m.group(1).split()]
        self.addr = self.addrs[0]
        self.control = parse_addr(m.group(2)) if m.group(2) else None
        return self

    def url(self, path):
        return "http://%s:%d%s" % (self.control[0], self.control[1], path)

    def api(self, method, path, body=None, token=None, raw=None, headers=None):
        """(status, parsed JSON or text, headers) of a control API call."""
        tok = self.token if token is None else token
        return http(method, self.url(path), body=body, token=tok, raw=raw, headers=headers)

    def metrics(self):
        st, text, _ = self.api("GET", "/metrics")
        check(st == 200, "GET /metrics -> %s" % st)
        return parse_metrics(text)

    def drops(self, reason):
        return self.metrics().get('rally_relay_drops_total{reason="%s"}' % reason, 0)


class RelayServers(Relay):
    """rally-relay with --servers FILE (several named servers); the file's
    text is written to the test's directory. .addrs maps each server's name
    to its public addresses (the ready line's listen.NAME=...), .addr is the
    first server's first."""

    def __init__(self, env, servers_text, args=(), state_dir=None, control=True, debug=True,
                 token=TOKEN, wait_ready=True, name="relay", path=None, argv_prefix=()):
        self.state_dir = state_dir or os.path.join(env.dir, "state")
        self.token = token
        self.servers_file = path or os.path.join(env.dir, "servers.conf")
        self.write(servers_text)
        argv = list(argv_prefix) + [RELAY_BIN, "--servers", self.servers_file, "--state-dir", self.state_dir,
                "--log", "plain"]
        if control:
            self.token_file = os.path.join(env.dir, "token")
            if not os.path.exists(self.token_file):
                with open(self.token_file, "w") as f:
                    f.write(token + "\n")
            argv += ["--control", "127.0.0.1:0", "--token-file", self.token_file]
        if debug:
            argv.append("--debug")
        argv += list(args)
        Proc.__init__(self, env, name, argv)
        self.addr = self.control = None
        self.addrs = {}
        if wait_ready:
            self.ready()

    def write(self, text):
        tmp = self.servers_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, self.servers_file)

    def ready(self, timeout=10):
        m = self.wait_line(r"^(?:<\d>)?ready ?(.*)$", timeout)
        self.addrs = {}
        for tok in m.group(1).split():
            k, _, v = tok.partition("=")
            if k.startswith("listen."):
                self.addrs.setdefault(k[7:], []).append(parse_addr(v))
            elif k == "control":
                self.control = parse_addr(v)
        first = next(iter(self.addrs.values()), None)
        self.addr = first[0] if first else None
        return self

    def servers(self):
        st, body, _ = self.api("GET", "/servers")
        check(st == 200, "GET /servers -> %s %r" % (st, body))
        return {s["name"]: s for s in body}

    def public(self, name, i=0):
        """Server name's public address i, as GET /servers says now."""
        return parse_addr(self.servers()[name]["listen"][i])


class Master(Proc):
    """rally-master on loopback: HTTP and the Q3 UDP master on port 0."""

    def __init__(self, env, args=(), state_dir=None, debug=True, wait_ready=True, name="master"):
        self.state_dir = state_dir or os.path.join(env.dir, "master-state")
        argv = [MASTER_BIN, "--http", "127.0.0.1:0", "--udp", "127.0.0.1:0",
                "--state-dir", self.state_dir, "--log", "plain"]
        if debug:
            argv.append("--debug")
        argv += list(args)
        super().__init__(env, name, argv)
        self.http_addr = self.udp_addr = None
        if wait_ready:
            self.ready()

    def ready(self, timeout=10):
        m = self.wait_line(r"^(?:<\d>)?ready http=(\S+) udp=(\S+)$", timeout)
        self.http_addr = parse_addr(m.group(1))
        self.udp_addr = parse_addr(m.group(2))
        return self

    def url(self, path):
        return "http://%s:%d%s" % (self.http_addr[0], self.http_addr[1], path)

    def call(self, method, path, body=None, raw=None, headers=None):
        """(status, parsed JSON or text, headers) of an HTTP call."""
        return http(method, self.url(path), body=body, raw=raw, headers=headers)

    def metrics(self):
        st, text, _ = self.call("GET", "/metrics")
        check(st == 200, "GET /metrics -> %s" % st)
        return parse_metrics(text)


def http(method, url, body=None, token=None, raw=None, headers=None, timeout=5):
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(url, data=data, method=method)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, text, hdrs = r.status, r.read().decode(), dict(r.headers)
    except urllib.error.HTTPError as e:
        status, text, hdrs = e.code, e.read().decode(), dict(e.headers)
    ctype = hdrs.get("Content-Type", "")
    if ctype.startswith("application/json") and text:
        return status, json.loads(text), hdrs
    return status, text, hdrs


def udp_socket_ports(pid):
    """UDP ports bound by a process, read from /proc (no port probing)."""
    inodes = set()
    fddir = "/proc/%d/fd" % pid
    try:
        for fd in os.listdir(fddir):
            try:
                t = os.readlink(os.path.join(fddir, fd))
            except OSError:
                continue
            m = re.match(r"socket:\[(\d+)\]", t)
            if m:
                inodes.add(m.group(1))
    except OSError:
        return []
    ports = []
    for table in ("/proc/%d/net/udp" % pid, "/proc/%d/net/udp6" % pid):
        try:
            with open(table) as f:
                next(f)
                for ln in f:
                    cols = ln.split()
                    if cols[9] in inodes:
                        ports.append(int(cols[1].split(":")[1], 16))
        except OSError:
            pass
    return ports


class OAServer(Proc):
    """A real OpenArena dedicated server on 127.0.0.1 (ioquake3 engine)."""

    def __init__(self, env, dedicated=1, masters=(), hostname="rally-integ", rcon="integ-rcon",
                 name="oa", extra=()):
        self.home = os.path.join(env.dir, "%s-home-%d" % (name, len(env.procs)))
        os.makedirs(self.home, exist_ok=True)
        self.hostname = hostname
        self.rcon = rcon
        argv = [OA_SERVER, "+set", "fs_homepath", self.home, "+set", "dedicated", str(dedicated),
                "+set", "net_enabled", "1", "+set", "net_ip", "127.0.0.1", "+set", "net_port", "0"]
        ms = list(masters) + [""] * (5 - len(masters))
        for i, m in enumerate(ms[:5], 1):
            argv += ["+set", "sv_master%d" % i, m]
        argv += ["+set", "sv_hostname", hostname, "+set", "rconpassword", rcon,
                 "+set", "ttycon", "0", "+set", "com_hunkmegs", "64"] + list(extra) + ["+map", "oa_dm1"]
        check(os.path.exists(OA_SERVER), "%s is missing: apt-get install openarena-server" % OA_SERVER)
        super().__init__(env, name, argv, cwd=self.home)
        ports = wait_for(lambda: udp_socket_ports(self.pid), 20, "the OpenArena server to bind")
        self.addr = ("127.0.0.1", ports[0])
        s = env.udp()
        wait_for(lambda: query(s, self.addr, "getinfo boot", 0.2), 30,
                 "the OpenArena server to answer getinfo")

    def console_lines(self, pattern):
        return self.grep(pattern)


def query(sock, addr, cmd, timeout=1.0, raw=False):
    """Sends an out-of-band command; returns (data, source) or None."""
    sock.settimeout(timeout)
    sock.sendto(cmd if raw else oob(cmd), addr)
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        sock.settimeout(left)
        try:
            return sock.recvfrom(65535)
        except socket.timeout:
            return None


def drain(sock, timeout=0.1):
    out = []
    sock.settimeout(timeout)
    while True:
        try:
            out.append(sock.recvfrom(65535))
        except socket.timeout:
            return out


def file_digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class Env:
    def __init__(self, name):
        self.name = name
        self.dir = tempfile.mkdtemp(prefix="rally-integ-%s-" % name)
        self.procs = []
        self.socks = []
        self.cleanups = []

    def log(self, msg):
        """A line for the test's output (figures worth keeping)."""
        print(msg, flush=True)

    def udp(self, ip="127.0.0.1", family=socket.AF_INET):
        s = socket.socket(family, socket.SOCK_DGRAM)
        s.bind((ip, 0))
        self.socks.append(s)
        return s

    def daemons_alive(self, *procs):
        for p in procs:
            check(p.alive(), "%s died (status %s); last output:\n%s" % (
                p.name, p.p.returncode, "\n".join(p.output()[-30:])))

    def close(self, ok):
        for fn in reversed(self.cleanups):
            try:
                fn()
            except Exception:
                traceback.print_exc()
        for p in reversed(self.procs):
            try:
                p.stop()
            except Exception:
                traceback.print_exc()
        for s in self.socks:
            s.close()
        if ok and not os.environ.get("RALLY_KEEP"):
            shutil.rmtree(self.dir, ignore_errors=True)
        else:
            print("logs kept in %s" % self.dir)
            for p in self.procs:
                print("---- %s (%s) last lines ----" % (p.name, p.log_path))
                for ln in p.output()[-25:]:
                    print("   " + ln)


def run(scenario):
    """Runs scenario(env) and exits 0 on success, 1 with the reason otherwise."""
    name = os.path.splitext(os.path.basename(sys.argv[0]))[0]
    env = Env(name)
    ok = False
    try:
        scenario(env)
        ok = True
    except Failure as e:
        print("FAIL %s: %s" % (name, e))
    except Exception:
        traceback.print_exc()
    finally:
        env.close(ok)
    if ok:
        print("PASS %s" % name)
    sys.exit(0 if ok else 1)


class Netns:
    """A network namespace of the test's own, deleted when the test ends."""

    count = 0

    def __init__(self, env, tag):
        check(os.geteuid() == 0, "network namespaces need root")
        Netns.count += 1
        self.name = "rly%d%s%d" % (os.getpid() % 100000, tag, Netns.count)
        subprocess.run(["ip", "netns", "add", self.name], check=True)
        env.cleanups.append(self.delete)
        self.ip("link", "set", "lo", "up")

    def ip(self, *args):
        subprocess.run(["ip", "-n", self.name] + list(args), check=True)

    def run(self, *argv, **kw):
        return subprocess.run(["ip", "netns", "exec", self.name] + list(argv), **kw)

    def argv(self, *argv):
        return ["ip", "netns", "exec", self.name] + list(argv)

    def py(self, code, timeout=20):
        """Runs Python code inside the namespace; returns its stdout."""
        r = self.run("/usr/bin/python3", "-c", code, capture_output=True, text=True, timeout=timeout)
        check(r.returncode == 0, "in %s: %s" % (self.name, r.stderr[-2000:]))
        return r.stdout

    def delete(self):
        subprocess.run(["ip", "netns", "delete", self.name], stderr=subprocess.DEVNULL)


def veth(a, b, ip_a, ip_b, prefix=30):
    """A veth pair between namespaces a and b with the given addresses."""
    na, nb = "va%d" % Netns.count, "vb%d" % Netns.count
    subprocess.run(["ip", "-n", a.name, "link", "add", na, "type", "veth", "peer", "name", nb,
                    "netns", b.name], check=True)
    a.ip("addr", "add", "%s/%d" % (ip_a, prefix), "dev", na)
    b.ip("addr", "add", "%s/%d" % (ip_b, prefix), "dev", nb)
    a.ip("link", "set", na, "up")
    b.ip("link", "set", nb, "up")
    return na, nb


def ns_http(ns, url, token=None):
    """GET url from inside a namespace; (status, body text)."""
    code = ("import urllib.request,urllib.error,sys\n"
            "r=urllib.request.Request(%r)\n" % url +
            ("r.add_header('Authorization','Bearer %s')\n" % token if token else "") +
            "try:\n  x=urllib.request.urlopen(r,timeout=3); print(x.status); print(x.read().decode())\n"
            "except urllib.error.HTTPError as e:\n  print(e.code); print(e.read().decode())\n"
            "except OSError as e:\n  print(0); print(e)\n")
    out = ns.py(code)
    st, _, body = out.partition("\n")
    return int(st), body


def parse_metrics(text):
    out = {}
    for ln in text.splitlines():
        if ln.startswith("#") or not ln.strip():
            continue
        k, v = ln.rsplit(" ", 1)
        out[k] = float(v)
    return out


class UdpPeer:
    """A UDP socket on 127.0.0.1 served by a thread: records every datagram
    (time, data, source) and lets a subclass answer it (on_datagram)."""

    def __init__(self, env, ip="127.0.0.1"):
        self.sock = env.udp(ip)
        self.addr = self.sock.getsockname()
        self.got = []
        self.lock = threading.Lock()
        self.stop = False
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()
        env.cleanups.append(self.close)

    def on_datagram(self, data, src):
        pass

    def run(self):
        self.sock.settimeout(0.1)
        while not self.stop:
            try:
                data, src = self.sock.recvfrom(65535)
            except OSError:
                continue
            with self.lock:
                self.got.append((time.monotonic(), data, src))
            self.on_datagram(data, src)

    def close(self):
        self.stop = True
        self.t.join(2)

    def flush(self, timeout=5):
        """Returns once this peer has read everything that reached its
        socket before now: a marker is sent from a socket of its own and
        waited for (one receive queue, read in order), then forgotten, so
        .got holds only what others sent. For checks that something did
        not arrive: after flush() it would have."""
        marker = b"rally-integ-flush " + os.urandom(8).hex().encode()
        s = socket.socket(socket.AF_INET6 if ":" in self.addr[0] else socket.AF_INET,
                          socket.SOCK_DGRAM)
        try:
            s.sendto(marker, self.addr[:2])
            wait_for(lambda: any(d == marker for _, d, _ in self.packets()), timeout,
                     "%s:%d to read everything sent to it" % self.addr[:2])
        finally:
            s.close()
        with self.lock:
            self.got = [g for g in self.got if g[1] != marker]

    def packets(self, since=0, src=None, prefix=None):
        with self.lock:
            return [(t, d, s) for t, d, s in self.got
                    if t >= since and (src is None or s == src) and
                    (prefix is None or d.startswith(prefix))]


class Echo(UdpPeer):
    """A UDP echo server on 127.0.0.1, for relay behaviour that needs every
    datagram answered: a real engine answers one IP (and the relay's
    sessions all share one) at most 10 times a second, which would make
    tests about session bookkeeping measure the engine's limiter instead."""

    def on_datagram(self, data, src):
        try:
            self.sock.sendto(data, src)
        except OSError:
            pass


def http_raw(method, url, body=None, headers=None, source=None, timeout=10):
    """(status, body bytes, headers) of one HTTP call, nothing parsed, for
    byte-exact checks. source binds the client to that local IP (another
    127.0.0.x), so a test can be a caller other than 127.0.0.1."""
    u = urllib.parse.urlsplit(url)
    c = HTTPConnection(u.hostname, u.port, timeout=timeout,
                       source_address=(source, 0) if source else None)
    try:
        c.request(method, u.path + ("?" + u.query if u.query else ""), body=body,
                  headers=headers or {})
        r = c.getresponse()
        return r.status, r.read(), dict(r.getheaders())
    finally:
        c.close()


class PongServer(UdpPeer):
    """A stand-in for a Fugitive3D game server (not packaged for Debian):
    answers each "ping" datagram with reply ("pong"; None stays silent)."""

    def __init__(self, env, ip="127.0.0.1", reply=b"pong"):
        self.reply = reply
        super().__init__(env, ip)

    def on_datagram(self, data, src):
        if self.reply is not None and data == b"ping":
            try:
                self.sock.sendto(self.reply, src)
            except OSError:
                pass


# ---- Quake 3 master (master_q3_*.py) ----

Q3_INFO = {"protocol": "71", "sv_maxclients": "8", "clients": "0", "gamename": "Quake3Arena"}


class FakeQ3Server(UdpPeer):
    """A scripted Quake 3 engine server for the master's UDP side: it answers
    every getinfo with an infoResponse echoing the challenge, followed by
    `info` (a dict, or a raw infostring). answer=False keeps it silent;
    challenge= makes it echo that instead. Every challenge it was sent is
    kept in .challenges."""

    def __init__(self, env, ip="127.0.0.1", info=None, answer=True, challenge=None):
        self.info = dict(Q3_INFO) if info is None else info
        self.answer = answer
        self.challenge = challenge
        self.challenges = []
        if ":" not in ip:
            super().__init__(env, ip)
            return
        # UdpPeer binds IPv4 only: the same, on an IPv6 socket.
        self.sock = env.udp(ip, socket.AF_INET6)
        self.addr = self.sock.getsockname()[:2]
        self.got = []
        self.lock = threading.Lock()
        self.stop = False
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()
        env.cleanups.append(self.close)

    def infostring(self):
        if isinstance(self.info, dict):
            return "".join("\\%s\\%s" % kv for kv in self.info.items())
        return self.info

    def on_datagram(self, data, src):
        if not data.startswith(OOB + b"getinfo "):
            return
        ch = data[len(OOB) + 8:].decode("latin-1")
        self.challenges.append(ch)
        if not self.answer:
            return
        echo = ch if self.challenge is None else self.challenge
        try:
            self.sock.sendto(OOB + b"infoResponse\n" + ("\\challenge\\" + echo +
                                                        self.infostring()).encode("latin-1"), src)
        except OSError:
            pass

    def heartbeat(self, master, tag="QuakeArena-1"):
        self.sock.sendto(OOB + ("heartbeat %s\n" % tag).encode(), master)


def q3_parse_response(datagrams, ext=False):
    """Servers [(ip, port)] of a getservers(Ext)Response run; checks the
    framing: the header on each datagram, at most 1,400 bytes each, the EOT
    mark at the end of the last one only. Returns None if there is no EOT."""
    hdr = OOB + (b"getserversExtResponse" if ext else b"getserversResponse")
    out = []
    for i, d in enumerate(datagrams):
        check(len(d) <= 1400, "response datagram of %d bytes" % len(d))
        check(d.startswith(hdr), "response without its header: %r" % d[:40])
        o = len(hdr)
        while o < len(d):
            if d[o:] == b"\\EOT\0\0\0":
                check(i == len(datagrams) - 1, "EOT in datagram %d of %d" % (i + 1, len(datagrams)))
                return out
            if d[o:o + 1] == b"\\" and len(d) - o >= 7:
                out.append((socket.inet_ntop(socket.AF_INET, d[o + 1:o + 5]),
                            int.from_bytes(d[o + 5:o + 7], "big")))
                o += 7
            elif ext and d[o:o + 1] == b"/" and len(d) - o >= 19:
                out.append((socket.inet_ntop(socket.AF_INET6, d[o + 1:o + 17]),
                            int.from_bytes(d[o + 17:o + 19], "big")))
                o += 19
            else:
                raise Failure("bad entry at %d: %r" % (o, d[o:o + 20]))
    return None


def q3_getservers(sock, master, request, timeout=2.0):
    """Sends "getservers ..." or "getserversExt ..." and reads the answer up
    to its EOT mark: (servers, datagrams), or (None, datagrams) when no
    complete answer came within timeout."""
    ext = request.startswith("getserversExt")
    sock.setblocking(False)
    try:
        while True:
            sock.recvfrom(65535)  # leftovers of an earlier request
    except (BlockingIOError, InterruptedError):
        pass
    sock.setblocking(True)
    sock.sendto(oob(request), master)
    got = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            data, _ = sock.recvfrom(65535)
        except socket.timeout:
            break
        got.append(data)
        if data.endswith(b"\\EOT\0\0\0"):
            return q3_parse_response(got, ext), got
    return None, got


def quakestat(kind, master, srcip=None, timeout=30):
    """qstat against a master (kind "-q3m", "-q3m,71", "-openarenam"), raw
    output: (number of servers the master gave, [server lines as field
    lists]). srcip picks the client's address (the master throttles per IP)."""
    argv = ["quakestat", "-retry", "1", "-mi", "0.2", "-raw", ",", "-nh"]
    if srcip:
        argv += ["-srcip", srcip]
    argv += [kind, "%s:%d" % master]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    check(r.returncode == 0, "%s: status %d: %s" % (" ".join(argv), r.returncode, r.stderr))
    lines = [ln.split(",") for ln in r.stdout.splitlines() if ln.strip()]
    check(lines and lines[0][1] == "%s:%d" % master, "quakestat output: %r" % r.stdout)
    return int(lines[0][2]), lines[1:]


def udp_spoof(src, dst, payload):
    """Sends a UDP datagram that claims to come from src (ip, port) through
    a raw socket (root): what an attacker who spoofs sources can do."""
    import struct
    check(os.geteuid() == 0, "spoofing a source address needs root (raw socket)")
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP)
    try:
        s.bind((src[0], 0))
        s.sendto(struct.pack("!HHHH", src[1], dst[1], 8 + len(payload), 0) + payload, (dst[0], 0))
    finally:
        s.close()


def private_loopback():
    """A loopback address of this test's own (127.100-250.x.y, drawn at
    random), for a daemon that takes fixed ports (rally-master
    --relay-ports): on its own address the fixed range cannot collide with
    another test's, and no port is probed."""
    import random
    rnd = random.Random(os.getpid() ^ int(time.time() * 1000))
    return "127.%d.%d.%d" % (rnd.randint(100, 250), rnd.randint(0, 255), rnd.randint(1, 254))


LOBBY_BIN = os.path.join(BUILD, "lobby", "rally-lobby")
BRIDGE_BIN = os.path.join(BUILD, "tools", "bridge-sim")


class Lobby(Proc):
    """rally-lobby on loopback: its own io dir, no STUN, no UPnP, no master
    unless asked, and only loopback candidates (--lan-ip 127.0.0.1, and
    IPv6 off unless args say --ipv6 ::1)."""

    def __init__(self, env, role, code=None, name="player", args=(), loopback=True,
                 wait_ready=True, proc_name=None, argv_prefix=(), io=None, log_ips=True):
        self.role = role
        self.io = io or os.path.join(env.dir, "io-%s-%d" % (proc_name or name, len(env.procs)))
        os.makedirs(self.io, exist_ok=True)
        argv = list(argv_prefix) + [LOBBY_BIN, role]
        if code is not None:
            argv.append(code)
        argv += ["--name", name, "--io-dir", self.io, "--log", "plain", "--debug",
                 "--game-relay-port", "0", "--game-local-port", "9"]
        if loopback:
            argv += ["--stun", "off", "--upnp", "off", "--lan-ip", "127.0.0.1"]
            # No v6 candidate from the machine's own global address (a
            # test would dial it); --ipv6 ::1 in args runs IPv6 on loopback.
            if "--ipv6" not in args:
                argv += ["--ipv6", "off"]
            if "--rendezvous" not in args:
                argv += ["--rendezvous", "off"]
            if role == "host" and "--local-port" not in args:
                argv += ["--local-port", "0"]
        argv += list(args)
        # stdout (CODE=) and stderr are read separately.
        self.stdout_lines = []
        # Tests read addresses in the logs: unmasked (TPF2MP_LOG_IPS=1), as
        # netpunch's own test wrapper has them, unless log_ips=False.
        super().__init__(env, proc_name or ("lobby-" + name), argv, merge_stdout=False,
                         extra_env={"TPF2MP_LOG_IPS": "1"} if log_ips else None)
        self.out_thread = threading.Thread(target=self._read_stdout, daemon=True)
        self.out_thread.start()
        self.udp_port = self.game_port = None
        self.code = None
        if wait_ready:
            self.ready()

    def _read_stdout(self):
        for raw in iter(self.p.stdout.readline, b""):
            self.stdout_lines.append(raw.decode("utf-8", "replace").rstrip("\n"))

    def ready(self, timeout=15):
        m = self.wait_line(r"^(?:<\d>)?ready udp=\S+:(\d+) game=\S+:(\d+)$", timeout)
        self.udp_port, self.game_port = int(m.group(1)), int(m.group(2))
        return self

    def wait_code(self, timeout=15):
        def code():
            for ln in self.stdout_lines:
                if ln.startswith("CODE="):
                    return ln[5:]
            if not self.alive():
                raise Failure("%s exited before printing CODE=" % self.name)
            return None
        self.code = wait_for(code, timeout, "%s to print CODE=" % self.name)
        return self.code

    def events(self, type_=None):
        path = os.path.join(self.io, "lobby_out.jsonl")
        out = []
        try:
            with open(path) as f:
                for ln in f:
                    # A line still being written (no newline yet) is
                    # read next time.
                    if ln.strip() and ln.endswith("\n"):
                        ev = json.loads(ln)
                        if type_ is None or ev.get("type") == type_:
                            out.append(ev)
        except FileNotFoundError:
            pass
        return out

    def raw_events(self):
        with open(os.path.join(self.io, "lobby_out.jsonl"), "rb") as f:
            return f.read().splitlines()

    def wait_event(self, pred, timeout=10, what="an event"):
        def find():
            for ev in self.events():
                if pred(ev):
                    return ev
            return None
        return wait_for(find, timeout, "%s: %s" % (self.name, what))

    def wait_status(self, state, detail=None, timeout=10):
        return self.wait_event(lambda e: e.get("type") == "status" and e.get("state") == state and
                               (detail is None or re.search(detail, e.get("detail", ""))),
                               timeout, "status %s %s" % (state, detail or ""))

    def command(self, **cmd):
        with open(os.path.join(self.io, "lobby_in.jsonl"), "a") as f:
            f.write(json.dumps(cmd) + "\n")

    def state(self):
        with open(os.path.join(self.io, "lobby_state.json")) as f:
            return json.load(f)

    def roster(self):
        rs = self.events("roster")
        return rs[-1] if rs else None


class Bridge(Proc):
    """tools/bridge-sim: a stand-in for the game's bridge on loopback. It
    starts first (its port goes to the lobby's --game-local-port); then
    connect(lobby) hands it the lobby's game relay port."""

    def __init__(self, env, ident, send=0, size=64, rate=200, duration_ms=3000, echo=False,
                 name=None, wait_go=False, argv_prefix=(), port=0):
        argv = list(argv_prefix) + [BRIDGE_BIN, "--port", str(port), "--lobby", "-", "--id", str(ident),
                "--send", str(send), "--size", str(size), "--rate", str(rate),
                "--duration-ms", str(duration_ms)]
        if echo:
            argv.append("--echo")
        if wait_go:
            argv.append("--wait-go")
        super().__init__(env, name or ("bridge%d" % ident), argv, stdin=subprocess.PIPE)
        self.port = int(self.wait_line(r"^ready port=(\d+)$").group(1))

    def connect(self, lobby):
        self.p.stdin.write(b"%d\n" % lobby.game_port)
        self.p.stdin.flush()

    def go(self):
        """Starts sending (with wait_go)."""
        self.p.stdin.write(b"go\n")
        self.p.stdin.flush()

    def result(self, timeout=30):
        self.wait_exit(timeout)
        out = {"from": {}}
        for ln in self.output():
            m = re.match(r"^from=(\d+) frames=(\d+) first=(\d+) last=(\d+) dup=(\d+)$", ln)
            if m:
                out["from"][int(m.group(1))] = {"frames": int(m.group(2)), "dup": int(m.group(5))}
            m = re.match(r"^sent=(\d+)$", ln)
            if m:
                out["sent"] = int(m.group(1))
            m = re.match(r"^rtt_us p50=(\d+) p99=(\d+) n=(\d+)$", ln)
            if m:
                out["rtt"] = {"p50": int(m.group(1)), "p99": int(m.group(2)), "n": int(m.group(3))}
        return out


PEER_BIN = os.path.join(BUILD, "tools", "lobby-peer")
PEER_VERSION = "0.6.1.24"


class Peer(Proc):
    """tools/lobby-peer: a scripted joiner. Its stdout lines are JSON (one
    per datagram received) once "connected" is printed; script() feeds it
    lines on stdin (tools/lobby-peer.c has the language)."""

    def __init__(self, env, code, name="mallory"):
        super().__init__(env, name, [PEER_BIN, code], stdin=subprocess.PIPE)
        self.seen = 0
        self.parsed = []
        self.plock = threading.RLock()
        self.hlock = threading.Lock()
        self.taken = 0
        self.wait_line(r"^connected$", timeout=10)

    def script(self, *lines):
        self.p.stdin.write("".join(json.dumps(ln) + "\n" for ln in lines).encode())
        self.p.stdin.flush()

    def send(self, obj):
        self.script({"send": obj})

    def join(self, name):
        self.send({"t": "join", "version": PEER_VERSION, "name": name, "mesh": False,
                   "recovery": 0, "batches": 1})

    def msgs(self, pred=lambda m: True):
        """The lobby messages received so far (parsed once each)."""
        with self.plock:
            out = self.output()
            for ln in out[self.seen:]:
                if ln.startswith("{\"msg\": "):
                    self.parsed.append(json.loads(ln)["msg"])
            self.seen = len(out)
            return [m for m in self.parsed if pred(m)]

    def wait_msg(self, pred, timeout=10, what="a message"):
        return wait_for(lambda: next(iter(self.msgs(pred)), None), timeout,
                        "%s: %s" % (self.name, what))

    def forget(self):
        """Drops what was received so far (long scenarios)."""
        with self.plock:
            self.msgs()
            self.parsed = []

    def bad(self):
        return [ln for ln in self.output() if ln.startswith("{\"bad\": ")]

    def hellos(self, name, n=1, sealed_as=None):
        """n dual-link hello lines sealed by this peer's sealer, fresh seals."""
        line = {"link_hello": name}
        if sealed_as is not None:
            line["sealed_as"] = sealed_as
        with self.hlock:
            self.script(*([line] * n))

            def got():
                out = [ln for ln in self.output() if ln.startswith('{"link_hello": ')]
                return out[self.taken:self.taken + n] if len(out) >= self.taken + n else None
            lines = wait_for(got, 5, "%s's link hellos" % self.name)
            self.taken += n
        return [bytes.fromhex(json.loads(ln)["link_hello"]) for ln in lines]


def mesh_links(lobby):
    """A mesh joiner's last links report (its log), as a set of names, or
    None before the first."""
    got = None
    for ln in lobby.output():
        m = re.search(r'mesh-links direct=\d+ names="([^"]*)"', ln)
        if m:
            got = set(n for n in m.group(1).split(",") if n)
    return got


def mesh_stats(lobby):
    """A mesh joiner's counters at exit (its mesh-stats line), or None."""
    for ln in lobby.output():
        m = re.search(r"mesh-stats (.*)$", ln)
        if m:
            return {k: int(v) for k, v in (kv.split("=") for kv in m.group(1).split())}
    return None


# ---- Redis (master_redis_*.py: the masters' shared registry) ----

REDIS_SERVER = "/usr/bin/redis-server"


class RedisServer(Proc):
    """A real redis-server (Debian's) of the test's own: a scratch directory
    and config, no persistence (a restart starts empty, as a lost server
    does), on a private loopback address with the fixed port 6379 (Redis
    has no port 0: on its own address the port cannot collide with another
    test's, and none is probed). password sets requirepass; users adds ACL
    lines. restart() runs it again with the same config."""

    def __init__(self, env, password=None, users=(), name="redis"):
        self.ip = private_loopback()
        self.port = 6379
        self.password = password
        self.dir = os.path.join(env.dir, name)
        os.makedirs(self.dir, exist_ok=True)
        self.conf = os.path.join(self.dir, "redis.conf")
        lines = ["bind %s" % self.ip, "port %d" % self.port, "dir %s" % self.dir,
                 'save ""', "appendonly no", "daemonize no", "protected-mode yes",
                 "databases 4", "enable-debug-command local", "loglevel notice",
                 'logfile ""', "unixsocket %s/redis.sock" % self.dir, "unixsocketperm 700"]
        self.sock = "%s/redis.sock" % self.dir
        if password:
            lines.append("requirepass %s" % password)
        lines += list(users)
        with open(self.conf, "w") as f:
            f.write("\n".join(lines) + "\n")
        self.name_ = name
        self._start(env)

    def _start(self, env):
        super().__init__(env, self.name_, [REDIS_SERVER, self.conf])
        self.wait_line(r"Ready to accept connections", 10)

    def restart(self, env):
        self._start(env)
        return self

    def url(self):
        return "%s:%d" % (self.ip, self.port)

    def cmd(self, *args, db=0, timeout=5):
        """One command on a fresh connection (authenticated as the default
        user when the server has a password, database db): the decoded
        reply; a Redis error comes back as a RedisError instance."""
        with socket.create_connection((self.ip, self.port), timeout=timeout) as s:
            f = s.makefile("rb")
            if self.password:
                s.sendall(resp_encode(["AUTH", self.password]))
                check(resp_read(f) == "OK", "AUTH refused")
            if db:
                s.sendall(resp_encode(["SELECT", db]))
                check(resp_read(f) == "OK", "SELECT refused")
            s.sendall(resp_encode(list(args)))
            return resp_read(f)


def redis_pipeline(server, cmds, db=0, timeout=10):
    """Many commands on one connection to a RedisServer: their replies."""
    with socket.create_connection((server.ip, server.port), timeout=timeout) as s:
        f = s.makefile("rb")
        pre = []
        if server.password:
            pre.append(["AUTH", server.password])
        if db:
            pre.append(["SELECT", db])
        s.sendall(b"".join(resp_encode(c) for c in pre + list(cmds)))
        out = [resp_read(f) for _ in range(len(pre) + len(cmds))]
        return out[len(pre):]


class RedisError(str):
    pass


def resp_encode(args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


def resp_read(f):
    """One RESP2 reply from a file: str for simple strings, bytes for bulk
    strings, int, list, None, RedisError."""
    line = f.readline()
    check(line.endswith(b"\r\n"), "short Redis reply %r" % line)
    t, rest = line[:1], line[1:-2]
    if t == b"+":
        return rest.decode()
    if t == b"-":
        return RedisError(rest.decode())
    if t == b":":
        return int(rest)
    if t == b"$":
        n = int(rest)
        if n < 0:
            return None
        data = f.read(n + 2)
        return data[:-2]
    if t == b"*":
        n = int(rest)
        return None if n < 0 else [resp_read(f) for _ in range(n)]
    raise Failure("unexpected Redis reply %r" % line)
