"""A coa Host Manager peer for rally-relay's coa-compatible tunnel
(tests/integ/relay_coa_*.py), written from coa's protocol
(/work/shared/seeds/coa-relay-PROTOCOL.md and coa's code), not from ours.

The pieces a scenario needs, each on real sockets on 127.0.0.0/8:
  - Realm: a realm id and its Ed25519 key (PyNaCl), the keys-file line;
  - TunnelRelay: rally-relay in tunnel mode, its port pool on a loopback
    address of the test's own (so a fixed range collides with no other
    test), its health, metrics and RSS;
  - WsConn: a WebSocket client of our own (RFC 6455 framing by hand), so a
    scenario can send what a library would refuse to: oversize frames,
    binary frames, broken UTF-8, lies in a frame header;
  - HostPeer: what coa's Host Manager does on that WebSocket: the signed
    hello, pong to every ping, allocate, and for each connect the local
    target opened and its bytes carried as data messages (chunks of at
    most 16 KiB), half-close and reset both ways;
  - TcpServer and the WoW auth messages: local targets (echo, blast/sink,
    a fake authserver that sends AUTH_LOGON_CHALLENGE, AUTH_LOGON_PROOF
    then CMD_REALM_LIST).

Not registered as a scenario: the glob is *_*.py and this name has no
underscore.
"""

import base64
import hashlib
import json
import os
import random
import re
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid

from harness import (RELAY_BIN, TOKEN, Failure, Proc, check, http, parse_addr, parse_metrics,
                     private_loopback, wait_for)

try:
    import nacl.signing
    import nacl.encoding
except ImportError:  # the scenarios skip (exit 77) on this
    nacl = None

HOST_PATH = "/relay/v1/host"
HEALTH_PATH = "/relay/v1/health"
SIG_CONTEXT = "coa-relay-host-v1\n1\n"
CHUNK_MAX = 16 * 1024


def skip_unless_ready(name):
    """Exit 77 with the reason when this machine cannot run the scenario:
    PyNaCl missing (tools/dev.sh installs python3-nacl). The relay itself
    is never a reason to skip: a relay that cannot run fails the test."""
    if nacl is None:
        print("SKIP %s: python3-nacl is not installed" % name)
        sys.exit(77)


# ---- rally-relay agent (our own home side) ----

class AgentProc(Proc):
    """`rally-relay agent` for realm, dialing url, its key file written
    from the realm's seed, its control API on 127.0.0.1:0 with TOKEN.
    args: the targets (--auth/--world/--server) and any other flag."""

    def __init__(self, env, url, realm, args=(), name="agent", wait_up=True):
        self.key_file = os.path.join(env.dir, "%s.key" % name)
        with open(self.key_file, "w") as f:
            f.write(bytes(realm.key).hex() + "\n")  # the 32-byte seed
        self.token_file = os.path.join(env.dir, "%s-token" % name)
        with open(self.token_file, "w") as f:
            f.write(TOKEN + "\n")
        argv = [RELAY_BIN, "agent", "--relay", url, "--realm-id", realm.id, "--key",
                self.key_file, "--control", "127.0.0.1:0", "--token-file", self.token_file,
                "--log", "plain"] + list(args)
        super().__init__(env, name, argv)
        m = self.wait_line(r"^(?:<\d>)?ready control=(\S+)$", 10)
        self.control = parse_addr(m.group(1))
        if wait_up:
            self.wait_line(r"tunnel-up", 10)

    def api(self, method, path, body=None):
        return http(method, "http://%s:%d%s" % (self.control + (path,)), body=body, token=TOKEN,
                    timeout=15)

    def allocate(self, player, ip="127.0.0.1"):
        st, body, _ = self.api("POST", "/allocate", {"player_id": player,
                                                      "expected_client_ip": ip})
        check(st == 200, "POST /allocate -> %s %r" % (st, body))
        return body

    def status(self):
        st, body, _ = self.api("GET", "/status")
        check(st == 200, "GET /status -> %s" % st)
        return body


# ---- realms and keys ----

class Realm:
    """A coa realm: its UUID and Ed25519 signing key."""

    def __init__(self, realm_id=None, seed=None):
        self.id = realm_id or str(uuid.uuid4())
        self.key = nacl.signing.SigningKey(seed) if seed else nacl.signing.SigningKey.generate()
        self.pub = bytes(self.key.verify_key)

    def line(self, fmt="hex"):
        pub = self.pub.hex() if fmt == "hex" else base64.b64encode(self.pub).decode()
        return "%s %s\n" % (self.id, pub)

    def sign(self, nonce, realm_id=None):
        msg = (SIG_CONTEXT + (realm_id or self.id) + "\n" + nonce).encode()
        return self.key.sign(msg).signature


def write_keys(path, realms, fmt="hex", comment=True):
    with open(path, "w") as f:
        if comment:
            f.write("# realm_id public_key (written by the test)\n")
        for r in realms:
            f.write(r.line(fmt))


# ---- ports ----

def tcp_port_free(ip, port):
    s = socket.socket()
    try:
        s.bind((ip, port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def pool_range(n, ip=None):
    """(ip, lo, hi): n consecutive TCP ports free on ip, a loopback address
    of this test's own unless given (below the ephemeral range, checked by
    binding each)."""
    ip = ip or private_loopback()
    rnd = random.Random(os.getpid() ^ int(time.time() * 1e6))
    for _ in range(200):
        lo = rnd.randint(12000, 30000)
        if all(tcp_port_free(ip, p) for p in range(lo, lo + n)):
            return ip, lo, lo + n - 1
    raise Failure("no %d consecutive free ports on %s" % (n, ip))


def make_cert(d, name, san):
    """A self-signed P-256 certificate for san ("IP:...,DNS:..."): (key, crt)."""
    key, crt = os.path.join(d, name + ".key"), os.path.join(d, name + ".crt")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-days", "1", "-subj", "/CN=" + name,
                    "-addext", "subjectAltName=" + san, "-keyout", key, "-out", crt],
                   check=True, capture_output=True)
    return key, crt


def free_port(ip="127.0.0.1"):
    s = socket.socket()
    s.bind((ip, 0))
    p = s.getsockname()[1]
    s.close()
    return p


def port_state(addr, source=None, timeout=2.0):
    """What a TCP connect to addr meets: "refused", "open" (accepted and
    still open after a moment, connection closed by us), "dropped"
    (accepted, then closed or reset by the far end), or "timeout"."""
    s = socket.socket()
    s.settimeout(timeout)
    try:
        if source:
            s.bind((source, 0))
        try:
            s.connect(addr)
        except ConnectionRefusedError:
            return "refused"
        except socket.timeout:
            return "timeout"
        s.settimeout(0.3)
        try:
            d = s.recv(1)
            return "dropped" if d == b"" else "open"
        except socket.timeout:
            return "open"
        except ConnectionResetError:
            return "dropped"
    finally:
        s.close()


def listening(addr):
    """Whether a TCP socket listens on addr (ip, port), from /proc/net/tcp:
    no connection is made (one would spend an allocation's port)."""
    want = "%08X:%04X" % (int.from_bytes(socket.inet_aton(addr[0]), "little"), addr[1])
    anyip = "00000000:%04X" % addr[1]
    with open("/proc/net/tcp") as f:
        next(f)
        for ln in f:
            cols = ln.split()
            if cols[3] == "0A" and cols[1] in (want, anyip):
                return True
    return False


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for ln in f:
            if ln.startswith("VmRSS:"):
                return int(ln.split()[1])
    return 0


# ---- the relay in tunnel mode ----

class TunnelRelay(Proc):
    """rally-relay --tunnel-listen on 127.0.0.1, its pool of pool_size ports
    on a loopback address of the test's own (relay_host is that address)."""

    def __init__(self, env, realms=(), pool_size=8, args=(), keys_fmt="hex", debug=True,
                 extra_env=None, name="relay", wait_ready=True, pool=None):
        self.keys_file = os.path.join(env.dir, "%s-keys.txt" % name)
        self.realms = list(realms)
        write_keys(self.keys_file, self.realms, keys_fmt)
        self.state_dir = os.path.join(env.dir, "%s-state" % name)
        self.token = TOKEN
        self.token_file = os.path.join(env.dir, "token")
        if not os.path.exists(self.token_file):
            with open(self.token_file, "w") as f:
                f.write(TOKEN + "\n")
        self.pool_ip, self.pool_lo, self.pool_hi = pool or pool_range(pool_size)
        self.relay_host = self.pool_ip
        argv = [RELAY_BIN, "--tunnel-listen", "127.0.0.1:0", "--tunnel-keys", self.keys_file,
                "--tunnel-relay-host", self.relay_host, "--tunnel-bind", self.pool_ip,
                "--tunnel-ports", "%d-%d" % (self.pool_lo, self.pool_hi),
                "--control", "127.0.0.1:0", "--token-file", self.token_file,
                "--state-dir", self.state_dir, "--log", "plain"]
        if "--master" not in args and "--servers" not in args:
            argv.append("--no-heartbeat")
        if debug:
            argv.append("--debug")
        argv += list(args)
        super().__init__(env, name, argv, extra_env=extra_env)
        self.tunnel = self.control = None
        if wait_ready:
            self.ready()

    def ready(self, timeout=10):
        """.front is the first game port (if any); .fronts maps each
        server's name ("" for --server) to its first public address."""
        m = self.wait_line(r"^(?:<\d>)?ready ((?:listen\S*=\S+ )*)tunnel=(\S+)(?: control=(\S+))?",
                           timeout)
        self.fronts = {}
        for tok in m.group(1).split():
            k, _, v = tok.partition("=")
            self.fronts.setdefault(k[7:], parse_addr(v))
        self.front = next(iter(self.fronts.values()), None)
        self.tunnel = parse_addr(m.group(2))
        self.control = parse_addr(m.group(3)) if m.group(3) else None
        return self

    def pool_ports(self):
        return list(range(self.pool_lo, self.pool_hi + 1))

    def add_realm(self, realm, fmt="hex"):
        """Appends realm to the keys file and reloads (SIGHUP)."""
        self.realms.append(realm)
        with open(self.keys_file, "a") as f:
            f.write(realm.line(fmt))
        self.signal(1)

    def rewrite_keys(self, realms, fmt="hex"):
        self.realms = list(realms)
        write_keys(self.keys_file, self.realms, fmt)
        self.signal(1)

    def health(self):
        st, body, hdrs = http("GET", "http://%s:%d%s" % (self.tunnel + (HEALTH_PATH,)))
        check(st == 200, "GET %s -> %s %r" % (HEALTH_PATH, st, body))
        check(isinstance(body, dict), "health is not JSON (Content-Type %r): %r" % (
            hdrs.get("Content-Type"), body))
        return body

    def metrics(self):
        st, text, _ = http("GET", "http://%s:%d/metrics" % self.control, token=self.token)
        check(st == 200, "GET /metrics -> %s" % st)
        return parse_metrics(text)

    def tunnel_metrics(self):
        return {k: v for k, v in self.metrics().items() if k.startswith("rally_relay_tunnel")}

    def rss(self):
        return rss_kib(self.pid)

    def wait_health(self, timeout=5, **want):
        """Waits until every field in want has that value in the health."""
        last = {}

        def ok():
            last.clear()
            last.update(self.health())
            return all(last.get(k) == v for k, v in want.items())
        wait_for(ok, timeout, lambda: "health %r (have %r)" % (want, last))
        return last


def metric_sum(m, pattern):
    """The sum of the metrics whose full name (labels included) matches the
    regex; None when none does."""
    rx = re.compile(pattern)
    vals = [v for k, v in m.items() if rx.search(k)]
    return sum(vals) if vals else None


# ---- WebSocket client, by hand ----

def _mask(data, key):
    n = len(data)
    if n == 0:
        return b""
    k = (key * (n // 4 + 1))[:n]
    return (int.from_bytes(data, "little") ^ int.from_bytes(k, "little")).to_bytes(n, "little")


class WsClosed(Exception):
    pass


class WsConn:
    """A WebSocket client connection (RFC 6455) on a blocking socket. One
    reader (recv_msg), any number of senders (serialized)."""

    OP_CONT, OP_TEXT, OP_BIN, OP_CLOSE, OP_PING, OP_PONG = 0, 1, 2, 8, 9, 10

    def __init__(self, addr, path=HOST_PATH, timeout=5, source=None, headers=None, upgrade=True):
        self.addr = addr
        self.sock = socket.socket()
        if source:
            self.sock.bind((source, 0))
        self.sock.settimeout(timeout)
        self.sock.connect(addr)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        self.wlock = threading.Lock()
        self.closed = False          # the far end is gone (close frame, EOF, reset)
        self.close_code = None
        self.close_sent = False
        self.eof_how = None          # "close-frame", "eof", "reset"
        self.frames_in = 0
        self.status = None
        if upgrade:
            self.upgrade(path, headers)

    def upgrade(self, path=HOST_PATH, headers=None):
        key = base64.b64encode(os.urandom(16)).decode()
        req = ("GET %s HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n" % (path, self.addr[0],
                                                                           self.addr[1], key))
        for k, v in (headers or {}).items():
            req += "%s: %s\r\n" % (k, v)
        self.sock.sendall((req + "\r\n").encode())
        while b"\r\n\r\n" not in self.buf:
            d = self.sock.recv(65536)
            if not d:
                raise WsClosed("connection closed during the upgrade: %r" % bytes(self.buf))
            self.buf += d
            check(len(self.buf) < 65536, "endless upgrade response")
        head, _, rest = bytes(self.buf).partition(b"\r\n\r\n")
        self.buf = bytearray(rest)
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split()[1])
        self.headers = {}
        for ln in lines[1:]:
            k, _, v = ln.partition(":")
            self.headers[k.strip().lower()] = v.strip()
        check(self.status == 101, "upgrade refused: %s" % lines[0])
        want = base64.b64encode(hashlib.sha1(
            (key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
        check(self.headers.get("sec-websocket-accept") == want,
              "bad Sec-WebSocket-Accept %r" % self.headers.get("sec-websocket-accept"))

    # -- sending --

    @staticmethod
    def frame(opcode, payload, fin=True, mask=True, length=None, rsv=0):
        """A frame's bytes; length lies in the header when given."""
        n = len(payload) if length is None else length
        b0 = (0x80 if fin else 0) | (rsv << 4) | opcode
        mbit = 0x80 if mask else 0
        if n < 126:
            hdr = struct.pack("!BB", b0, mbit | n)
        elif n < 65536:
            hdr = struct.pack("!BBH", b0, mbit | 126, n)
        else:
            hdr = struct.pack("!BBQ", b0, mbit | 127, n)
        if mask:
            key = os.urandom(4)
            return hdr + key + _mask(payload, key)
        return hdr + payload

    def send_raw(self, data):
        with self.wlock:
            self.sock.sendall(data)

    def send_frame(self, opcode, payload, **kw):
        self.send_raw(self.frame(opcode, payload, **kw))

    def send_text(self, text):
        self.send_frame(self.OP_TEXT, text.encode() if isinstance(text, str) else text)

    def send_json(self, obj):
        self.send_text(json.dumps(obj, separators=(",", ":")))

    def send_close(self, code=1000):
        if not self.close_sent:
            self.close_sent = True
            try:
                self.send_frame(self.OP_CLOSE, struct.pack("!H", code))
            except OSError:
                pass

    # -- receiving --

    def _fill(self, n):
        while len(self.buf) < n:
            try:
                d = self.sock.recv(262144)
            except ConnectionResetError:
                self.closed, self.eof_how = True, "reset"
                raise WsClosed("reset")
            if not d:
                self.closed, self.eof_how = True, "eof"
                raise WsClosed("eof")
            self.buf += d

    def recv_frame(self):
        self._fill(2)
        b0, b1 = self.buf[0], self.buf[1]
        n = b1 & 0x7F
        o = 2
        if n == 126:
            self._fill(4)
            n = struct.unpack_from("!H", self.buf, 2)[0]
            o = 4
        elif n == 127:
            self._fill(10)
            n = struct.unpack_from("!Q", self.buf, 2)[0]
            o = 10
        masked = b1 & 0x80
        if masked:
            o += 4
        self._fill(o + n)
        payload = bytes(self.buf[o:o + n])
        if masked:
            payload = _mask(payload, bytes(self.buf[o - 4:o]))
        del self.buf[:o + n]
        self.frames_in += 1
        return bool(b0 & 0x80), b0 & 0x0F, payload, bool(masked)

    def recv_msg(self, timeout=None):
        """(opcode, payload) of the next text or binary message; answers
        pings; raises WsClosed when the far end closes (close frame, EOF or
        reset), socket.timeout after timeout."""
        if self.closed:
            raise WsClosed(self.eof_how)
        self.sock.settimeout(timeout)
        parts, op0 = [], None
        while True:
            fin, op, payload, masked = self.recv_frame()
            if masked:
                self.server_masked = True
            if op == self.OP_PING:
                try:
                    self.send_frame(self.OP_PONG, payload)
                except OSError:
                    pass
                continue
            if op == self.OP_PONG:
                continue
            if op == self.OP_CLOSE:
                self.close_code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None
                self.closed, self.eof_how = True, "close-frame"
                self.send_close(self.close_code or 1000)
                raise WsClosed("close frame %s" % self.close_code)
            if op != self.OP_CONT:
                op0 = op
            parts.append(payload)
            if fin:
                return op0, b"".join(parts)

    def recv_json(self, timeout=5):
        op, payload = self.recv_msg(timeout)
        check(op == self.OP_TEXT, "a binary frame from the relay: %r" % payload[:80])
        return json.loads(payload)

    def wait_closed(self, timeout=5):
        """True once the far end has closed (messages meanwhile are
        dropped); False if still open after timeout."""
        deadline = time.monotonic() + timeout
        while not self.closed:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            try:
                self.recv_msg(left)
            except WsClosed:
                self.close()
                return True
            except socket.timeout:
                return False
            except OSError:
                self.closed, self.eof_how = True, "reset"
                return True
        return True

    def close(self):
        self.send_close()
        try:
            self.sock.close()
        except OSError:
            pass

    def abort(self):
        """Drops the TCP connection with a reset, no close frame."""
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        self.sock.close()


# ---- the Host Manager ----

class Stream:
    """One relay stream as the host sees it."""

    def __init__(self, sid, target, token):
        self.id = sid
        self.target = target
        self.token = token
        self.sock = None
        self.rx = 0                 # bytes the relay sent for it (to the local target)
        self.tx = 0                 # bytes sent to the relay
        self.got_close = threading.Event()
        self.got_reset = threading.Event()
        self.sent_close = False
        self.sent_reset = False
        self.done = threading.Event()   # the pump ended
        self.data_after_close = 0
        self.chunks = []            # raw chunks, when the peer records them


class HostPeer:
    """coa's Host Manager on one tunnel. targets maps "auth"/"world" to the
    local (ip, port) a connect opens; on_connect(peer, msg) replaces that
    (a scripted host). The handshake runs in the constructor unless
    hello=False; then start() runs the reader thread."""

    def __init__(self, env, relay, realm, sig="hex", targets=None, hello=True, start=True,
                 name="host", auto_pong=True, record=False, source=None):
        self.env = env
        self.relay = relay
        self.realm = realm
        self.sig = sig
        self.name = name
        self.targets = dict(targets or {})
        self.token_targets = {}     # token -> {target: addr}, before targets
        self.on_connect = None
        self.auto_pong = auto_pong
        self.record = record
        self.msgs = []
        self.cond = threading.Condition()
        self.streams = {}
        self.violations = []
        self.pings = 0
        self.pongs = 0
        self.next_req = 1
        self.reader = None
        self.stop_reading = threading.Event()
        self.paused = threading.Event()
        self.paused.set()           # set = reading allowed
        self.ws = WsConn(relay.tunnel, source=source)
        env.cleanups.append(self.shutdown)
        self.challenge = None
        self.welcome = None
        if hello:
            self.welcome = self.hello()
            check(self.welcome == {"ok": True, "message": "welcome"},
                  "%s: handshake answer %r" % (name, self.welcome))
            if start:
                self.start()

    # -- handshake --

    def read_challenge(self, timeout=5):
        self.challenge = self.ws.recv_json(timeout)
        check(isinstance(self.challenge, dict) and isinstance(self.challenge.get("nonce"), str)
              and self.challenge["nonce"], "bad challenge %r" % self.challenge)
        return self.challenge["nonce"]

    def hello(self, realm_id=None, signature=None, sig=None, raw=None, timeout=5):
        """Reads the challenge, sends the hello; the relay's answer (a dict),
        or None when it closed without one."""
        nonce = self.read_challenge(timeout)
        if raw is not None:
            self.ws.send_text(raw)
        else:
            if signature is None:
                s = self.realm.sign(nonce, realm_id)
                fmt = sig or self.sig
                signature = s.hex() if fmt == "hex" else base64.b64encode(s).decode()
            self.ws.send_json({"realm_id": realm_id or self.realm.id, "signature": signature})
        try:
            return self.ws.recv_json(timeout)
        except WsClosed:
            return None

    # -- the reader --

    def start(self):
        self.reader = threading.Thread(target=self._read_loop, daemon=True)
        self.reader.start()
        return self

    def pause(self):
        """Stops reading the tunnel (the relay's sends back up in TCP)."""
        self.paused.clear()

    def resume(self):
        self.paused.set()

    def _read_loop(self):
        while not self.stop_reading.is_set():
            self.paused.wait()
            try:
                op, payload = self.ws.recv_msg(0.5)
            except socket.timeout:
                continue
            except (WsClosed, OSError):
                break
            if op != WsConn.OP_TEXT:
                self.violations.append("binary frame from the relay (%d bytes)" % len(payload))
                continue
            try:
                m = json.loads(payload)
            except ValueError:
                self.violations.append("not JSON from the relay: %r" % payload[:80])
                continue
            try:
                self._dispatch(m)
            except Exception as e:  # a bug of the test: recorded, shown by check_clean
                self.violations.append("dispatching %r: %r" % (str(m)[:120], e))
        if self.ws.closed:
            self.ws.close()         # the close handshake is done: the TCP side too
        with self.cond:
            self.cond.notify_all()
        for st in list(self.streams.values()):
            self._close_local(st)

    def _dispatch(self, m):
        cmd = m.get("cmd")
        if cmd == "ping":
            self.pings += 1
            if self.auto_pong:
                self.send({"cmd": "pong"})
            self._note(m)
            return
        if cmd == "pong":
            self.pongs += 1
            self._note(m)
            return
        if cmd == "connect":
            st = Stream(m.get("stream_id"), m.get("target"), m.get("token"))
            if st.id in self.streams:
                self.violations.append("stream id %r reused" % st.id)
            self.streams[st.id] = st
            self._note(m)
            if self.on_connect:
                self.on_connect(self, m)
            else:
                self.open_target(st)
            return
        if cmd == "data":
            st = self.streams.get(m.get("stream_id"))
            raw = base64.b64decode(m.get("chunk", ""), validate=True)
            if len(raw) > CHUNK_MAX:
                self.violations.append("a %d-byte chunk from the relay" % len(raw))
            if st is None:
                self.violations.append("data for unknown stream %r" % m.get("stream_id"))
                return
            if st.got_close.is_set():
                st.data_after_close += len(raw)
                self.violations.append("data after close on stream %r" % st.id)
            st.rx += len(raw)
            if self.record:
                st.chunks.append(raw)
            if st.sock is not None and not st.got_reset.is_set():
                try:
                    st.sock.sendall(raw)
                except OSError:
                    pass
            return
        if cmd == "close":
            st = self.streams.get(m.get("stream_id"))
            if st:
                st.got_close.set()
                if st.sock is not None:
                    try:
                        st.sock.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
            self._note(m)
            return
        if cmd == "reset":
            st = self.streams.get(m.get("stream_id"))
            if st:
                st.got_reset.set()
                self._close_local(st, abort=True)
            self._note(m)
            return
        self._note(m)

    def _note(self, m):
        with self.cond:
            self.msgs.append(m)
            self.cond.notify_all()

    # -- local targets --

    def open_target(self, st):
        addr = self.token_targets.get(st.token, {}).get(st.target) or self.targets.get(st.target)
        if addr is None:
            self.send({"cmd": "connect_err", "stream_id": st.id, "error": "target not allowed"})
            return
        try:
            s = socket.create_connection(addr, timeout=2)
        except OSError as e:
            self.send({"cmd": "connect_err", "stream_id": st.id, "error": str(e)})
            return
        s.settimeout(None)
        st.sock = s
        self.send({"cmd": "connect_ok", "stream_id": st.id})
        threading.Thread(target=self._pump, args=(st,), daemon=True).start()

    def _pump(self, st):
        """Local target -> relay: data chunks, then close at EOF, reset on
        an error."""
        sock = st.sock
        try:
            while sock is not None:
                try:
                    d = sock.recv(CHUNK_MAX)
                except OSError:
                    if not st.got_reset.is_set() and not self.ws.closed:
                        self.send_reset(st.id)
                    return
                if st.got_reset.is_set():
                    return
                if not d:
                    self.send_close(st.id)
                    return
                if not self.send_data(st.id, d):
                    return
        finally:
            st.done.set()

    def _close_local(self, st, abort=False):
        s, st.sock = st.sock, None
        if s is None:
            return
        try:
            if abort:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()

    # -- sending --

    def send(self, obj):
        try:
            self.ws.send_json(obj)
            return True
        except OSError:
            return False

    def send_data(self, sid, raw):
        for o in range(0, max(len(raw), 1), CHUNK_MAX):
            piece = raw[o:o + CHUNK_MAX]
            if not self.send({"cmd": "data", "stream_id": sid,
                              "chunk": base64.b64encode(piece).decode()}):
                return False
            st = self.streams.get(sid)
            if st:
                st.tx += len(piece)
        return True

    def send_close(self, sid):
        st = self.streams.get(sid)
        if st:
            st.sent_close = True
        return self.send({"cmd": "close", "stream_id": sid})

    def send_reset(self, sid):
        st = self.streams.get(sid)
        if st:
            st.sent_reset = True
        return self.send({"cmd": "reset", "stream_id": sid})

    def connect_ok(self, sid):
        return self.send({"cmd": "connect_ok", "stream_id": sid})

    # -- requests --

    def wait_msg(self, pred, timeout=5, what="a message", since=0):
        """The first message (index >= since) pred accepts."""
        def find():
            with self.cond:
                for m in self.msgs[since:]:
                    if pred(m):
                        return m
            if self.ws.closed or (self.reader is not None and not self.reader.is_alive()):
                with self.cond:
                    for m in self.msgs[since:]:
                        if pred(m):
                            return m
                raise Failure("%s: tunnel closed (%s) while waiting for %s" % (
                    self.name, self.ws.eof_how, what))
            return None
        return wait_for(find, timeout, "%s: %s" % (self.name, what), interval=0.005)

    def allocate(self, player_id=None, expected_ip="127.0.0.1", timeout=5, request_id=None,
                 extra=None):
        rid = request_id if request_id is not None else self._rid()
        req = {"cmd": "allocate", "request_id": rid, "player_id": player_id or str(uuid.uuid4())}
        if expected_ip is not None:
            req["expected_client_ip"] = expected_ip
        req.update(extra or {})
        check(self.send(req), "%s: tunnel closed before allocate" % self.name)
        return self.wait_msg(lambda m: m.get("cmd") in ("allocate_ok", "allocate_err") and
                             m.get("request_id") == rid, timeout, "answer to allocate %d" % rid)

    def allocate_ok(self, **kw):
        a = self.allocate(**kw)
        check(a.get("cmd") == "allocate_ok", "%s: allocate refused: %r" % (self.name, a))
        return a

    def _rid(self):
        with self.cond:
            rid = self.next_req
            self.next_req += 1
            return rid

    def ping(self, timeout=5):
        """Sends ping (as coa's host does every 30 s), waits for a pong."""
        n = len(self.msgs)
        check(self.send({"cmd": "ping"}), "%s: tunnel closed before ping" % self.name)
        return self.wait_msg(lambda m: m.get("cmd") == "pong", timeout, "pong", since=n)

    def wait_stream(self, target=None, token=None, timeout=5, exclude=()):
        def find():
            for st in list(self.streams.values()):
                if st.id in exclude:
                    continue
                if (target is None or st.target == target) and (token is None or st.token == token):
                    return st
            if self.ws.closed:
                raise Failure("%s: tunnel closed waiting for a connect" % self.name)
            return None
        return wait_for(find, timeout, "%s: connect for %s" % (self.name, target or "a stream"))

    def connects(self):
        return [m for m in list(self.msgs) if m.get("cmd") == "connect"]

    def alive(self):
        return not self.ws.closed and self.reader is not None and self.reader.is_alive()

    def check_clean(self):
        check(not self.violations, "%s saw protocol violations: %s" % (self.name,
                                                                      self.violations[:5]))

    def shutdown(self):
        self.stop_reading.set()
        self.paused.set()
        self.ws.close()
        if self.reader:
            self.reader.join(2)


# ---- local targets ----

class TcpServer:
    """A TCP server on 127.0.0.1 (the host's local authserver/worldserver):
    each accepted connection runs handler(conn, record) in a thread;
    record is a dict the handler fills (kept in .conns)."""

    def __init__(self, env, handler, ip="127.0.0.1"):
        self.handler = handler
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((ip, 0))
        self.sock.listen(64)
        self.addr = self.sock.getsockname()
        self.conns = []
        self.lock = threading.Lock()
        self.stopped = False
        self.t = threading.Thread(target=self._accept, daemon=True)
        self.t.start()
        env.cleanups.append(self.close)

    def _accept(self):
        while not self.stopped:
            try:
                c, src = self.sock.accept()
            except OSError:
                return
            rec = {"src": src, "done": threading.Event(), "sock": c}
            with self.lock:
                self.conns.append(rec)
            threading.Thread(target=self._run, args=(c, rec), daemon=True).start()

    def _run(self, c, rec):
        try:
            self.handler(c, rec)
        except Exception as e:
            rec["error"] = repr(e)
        finally:
            rec["done"].set()
            try:
                c.close()
            except OSError:
                pass

    def wait_conns(self, n, timeout=5):
        return wait_for(lambda: len(self.conns) >= n and self.conns, timeout,
                        "%d connection(s) to the local server" % n)

    def close(self):
        self.stopped = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def echo_handler(c, rec):
    """Echoes until EOF, then half-closes."""
    n = 0
    while True:
        d = c.recv(65536)
        if not d:
            break
        c.sendall(d)
        n += len(d)
    rec["echoed"] = n
    c.shutdown(socket.SHUT_WR)


def blast(sock, nbytes, block=1 << 20):
    """Sends nbytes of random data; its sha256."""
    h = hashlib.sha256()
    left = nbytes
    while left > 0:
        d = os.urandom(min(block, left))
        h.update(d)
        sock.sendall(d)
        left -= len(d)
    return h.hexdigest()


def sink(sock, limit=None):
    """Reads to EOF: (bytes, sha256)."""
    h = hashlib.sha256()
    n = 0
    while True:
        d = sock.recv(262144)
        if not d:
            break
        h.update(d)
        n += len(d)
    return n, h.hexdigest()


def duplex(sock, nbytes, rec, half_close=True):
    """Blasts nbytes and sinks everything at once (two threads); fills rec
    with sent_sha, recv_bytes, recv_sha; half-closes after sending."""
    def tx():
        try:
            rec["sent_sha"] = blast(sock, nbytes)
            if half_close:
                sock.shutdown(socket.SHUT_WR)
        except OSError as e:
            rec["tx_error"] = repr(e)
    t = threading.Thread(target=tx, daemon=True)
    t.start()
    try:
        rec["recv_bytes"], rec["recv_sha"] = sink(sock)
    except OSError as e:
        rec["rx_error"] = repr(e)
    t.join()


def connect_client(addr, source=None, timeout=5):
    s = socket.socket()
    if source:
        s.bind((source, 0))
    s.settimeout(timeout)
    s.connect(addr)
    return s


def recv_exact(sock, n, timeout=5):
    sock.settimeout(timeout)
    out = bytearray()
    while len(out) < n:
        d = sock.recv(n - len(out))
        if not d:
            raise Failure("EOF after %d of %d bytes" % (len(out), n))
        out += d
    return bytes(out)


def recv_all(sock, timeout=5):
    """Everything until EOF (a reset counts as the end)."""
    sock.settimeout(timeout)
    out = bytearray()
    while True:
        try:
            d = sock.recv(65536)
        except ConnectionResetError:
            break
        if not d:
            break
        out += d
    return bytes(out)


# ---- WoW 3.3.5 auth messages ----

AUTH_LOGON_CHALLENGE, AUTH_LOGON_PROOF, REALM_LIST = 0x00, 0x01, 0x10


def logon_challenge_client(account="PLAYER"):
    body = (b"WoW\0" + bytes([3, 3, 5]) + struct.pack("<H", 12340) + b"68x\0" + b"niW\0" +
            b"SUne" + struct.pack("<I", 60) + socket.inet_aton("127.0.0.1") +
            bytes([len(account)]) + account.encode())
    return bytes([AUTH_LOGON_CHALLENGE, 8]) + struct.pack("<H", len(body)) + body


def logon_proof_client():
    return bytes([AUTH_LOGON_PROOF]) + os.urandom(32) + os.urandom(20) + os.urandom(20) + b"\0\0"


def realm_list_request():
    return bytes([REALM_LIST]) + b"\0\0\0\0"


def logon_challenge_server():
    m = (bytes([AUTH_LOGON_CHALLENGE, 0, 0]) + os.urandom(32) + bytes([1, 7, 32]) +
         os.urandom(32) + os.urandom(32) + os.urandom(16) + b"\0")
    assert len(m) == 119
    return m


def logon_proof_server():
    m = bytes([AUTH_LOGON_PROOF, 0]) + os.urandom(20) + struct.pack("<IIH", 0x00800000, 0, 0)
    assert len(m) == 32
    return m


def realm(name="Rally", address="127.0.0.1:8085", type_=1, lock=0, flags=0, pop=0.0,
          chars=1, tz=1, rid=1, build=(3, 3, 5, 12340)):
    return {"type": type_, "lock": lock, "flags": flags, "name": name, "address": address,
            "pop": pop, "chars": chars, "tz": tz, "id": rid, "build": build}


def realm_list(realms, count=None, footer=b"\x10\x00"):
    """A server CMD_REALM_LIST (3.3.5) with these realms; count overrides
    the realm count field (a malformed message)."""
    body = struct.pack("<IH", 0, len(realms) if count is None else count)
    for r in realms:
        body += bytes([r["type"], r["lock"], r["flags"]]) + r["name"].encode() + b"\0"
        body += r["address"].encode() + b"\0" + struct.pack("<f", r["pop"])
        body += bytes([r["chars"], r["tz"], r["id"]])
        if r["flags"] & 0x04:
            b = r["build"]
            body += bytes(b[:3]) + struct.pack("<H", b[3])
    body += footer
    return bytes([REALM_LIST]) + struct.pack("<H", len(body)) + body


def rewritten(realms, address, **kw):
    """realm_list(realms) as the relay must send it: the first realm's
    address replaced."""
    rs = [dict(r) for r in realms]
    rs[0]["address"] = address
    return realm_list(rs, **kw)


def fake_authserver(realms_fn, refresh=0):
    """A handler: reads the client's AUTH_LOGON_CHALLENGE, answers the
    server's; its AUTH_LOGON_PROOF, answers; each REALM_LIST request (1 +
    refresh of them), answers realms_fn(); then to EOF. rec["sent"] holds
    every byte it sent."""
    def handler(c, rec):
        sent = bytearray()
        hdr = recv_exact(c, 4, 10)
        check(hdr[0] == AUTH_LOGON_CHALLENGE, "authserver: first byte %r" % hdr[:1])
        recv_exact(c, struct.unpack_from("<H", hdr, 2)[0], 10)
        for m in (logon_challenge_server(),):
            c.sendall(m)
            sent += m
        proof = recv_exact(c, 75, 10)
        check(proof[0] == AUTH_LOGON_PROOF, "authserver: proof byte %r" % proof[:1])
        m = logon_proof_server()
        c.sendall(m)
        sent += m
        for _ in range(1 + refresh):
            req = recv_exact(c, 5, 10)
            check(req[0] == REALM_LIST, "authserver: realm list request %r" % req)
            m = realms_fn()
            c.sendall(m)
            sent += m
        rec["sent"] = bytes(sent)
        rec["tail"] = recv_all(c, 30)
    return handler


def auth_client_session(addr, refresh=0, source=None, timeout=10):
    """A WoW client's auth exchange through the relay: sends challenge,
    reads 119; sends proof, reads 32; asks for the realm list (1 + refresh
    times), reads each (its length from its header). Returns
    (socket, [challenge, proof, realmlist...])."""
    s = connect_client(addr, source, timeout)
    got = []
    s.sendall(logon_challenge_client())
    got.append(recv_exact(s, 119, timeout))
    s.sendall(logon_proof_client())
    got.append(recv_exact(s, 32, timeout))
    for _ in range(1 + refresh):
        s.sendall(realm_list_request())
        hdr = recv_exact(s, 3, timeout)
        got.append(hdr + recv_exact(s, struct.unpack_from("<H", hdr, 1)[0], timeout))
    return s, got
