#!/usr/bin/env python3
"""relay_keys against a real PostgreSQL of the test's own, built as coa's
registry is: database coa_registry, table realms, role coa_relay allowed
only the four columns coa's relay reads (SELECT name is refused to it).
Through tools/relay-keys-probe: a published v2 realm is found with its key
(by PGPASSFILE and by a URI with the password, neither ever printed), an
unpublished, a v1 and a 31-byte-key realm are unknown, a non-UUID id is
unknown at once and never reaches the server (its statement log), the
queue holds 256 and refuses the rest at once, a cancelled lookup never
answers; a table locked by another session ends a lookup by
statement_timeout (ERROR after 3 s) and the one queued behind it by its
own 5 s deadline, the connection kept; a backend that stops answering
(SIGSTOP) ends its lookup at the deadline and the connection 5 s later
(keys-db-down reason=stuck), then a new one serves; the server stopped makes lookups
fail at once (one keys-db-down line), restarted brings the connection back
(keys-db-up) and lookups with it.

The server runs as the postgres user (it refuses root), in a temporary
directory it owns, on 127.0.0.1 and a unix socket there; it is stopped and
the directory removed at the end whatever happened. PostgreSQL cannot bind
port 0, so its port is one the kernel just handed out to a socket of ours
(bound to 0, then closed); a lost race is retried with another. Skipped
(77) only when no PostgreSQL server binaries are installed."""

import glob
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from harness import BUILD, Proc, check, run, wait_for

PROBE = os.path.join(BUILD, "tools", "relay-keys-probe")
PASSWORD = "coa-relay-integ-Pw-6f1d2c"  # must never show up in the probe's output

PUB = "3f2b8c1e-5d4a-4e6f-9a7b-0c1d2e3f4a5b"       # published, v2: found
HIDDEN = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"    # not published
OLD = "11111111-2222-4333-8444-555555555555"       # advert_version 1
SHORT = "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee"     # a 31-byte key
MISSING = "00000000-1111-4222-8333-444444444444"   # no row at all
# The published realm's key pair: the tunnel section signs with it.
PUB_SEED = bytes(range(0x40, 0x60))
try:
    import nacl.signing
    PUB_KEY = bytes(nacl.signing.SigningKey(PUB_SEED).verify_key)
except ImportError:  # the probe sections need no signature
    nacl = None
    PUB_KEY = bytes(range(0x40, 0x60))
NOT_UUID = "realm-by-name"


def pg_bindir():
    """The newest PostgreSQL server binaries: Debian's versioned dirs, then PATH."""
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                  key=lambda d: int(re.sub(r"\D", "", d.split("/")[-2]) or 0), reverse=True)
    which = shutil.which("postgres")
    if which:
        dirs.append(os.path.dirname(which))
    for d in dirs:
        if all(os.access(os.path.join(d, b), os.X_OK) for b in ("initdb", "postgres", "psql")):
            return d
    return None


BIN = pg_bindir()


def kernel_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Pg:
    """A throwaway cluster in its own directory, run as the postgres user."""

    def __init__(self, env):
        self.env = env
        self.proc = None
        self.port = None
        self.dir = tempfile.mkdtemp(prefix="rally-pg-")
        env.cleanups.append(self.cleanup)  # after stop(): registered first, runs last
        self.as_user = []
        if os.geteuid() == 0:
            try:
                pw = pwd.getpwnam("postgres")
            except KeyError:
                pw = pwd.getpwnam("nobody")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
            self.as_user = ["setpriv", "--reuid", str(pw.pw_uid), "--regid", str(pw.pw_gid),
                            "--clear-groups", "--"]
        self.data = os.path.join(self.dir, "data")
        t0 = time.monotonic()
        r = subprocess.run(self.as_user + [os.path.join(BIN, "initdb"), "-D", self.data, "-U",
                                           "postgres", "--auth-local=trust",
                                           "--auth-host=scram-sha-256", "-E", "UTF8",
                                           "--locale=C", "--no-sync", "--no-instructions"],
                           cwd=self.dir, capture_output=True, text=True)
        check(r.returncode == 0, "initdb failed: %s%s" % (r.stdout, r.stderr))
        env.log("initdb %.1fs" % (time.monotonic() - t0))
        env.cleanups.append(self.stop)

    def start(self):
        """Starts the server (on the same port as before when restarted)."""
        for attempt in range(3):
            if self.port is None or attempt > 0:
                self.port = kernel_port()
            self.proc = Proc(self.env, "postgres", self.as_user + [
                os.path.join(BIN, "postgres"), "-D", self.data,
                "-c", "listen_addresses=127.0.0.1", "-c", "port=%d" % self.port,
                "-c", "unix_socket_directories=%s" % self.dir,
                "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
                "-c", "max_connections=20", "-c", "shared_buffers=16MB",
                "-c", "log_statement=all", "-c", "log_connections=on",
                "-c", "log_disconnections=on", "-c", "log_line_prefix=%m [%p] %a "],
                cwd=self.dir)
            try:
                self.proc.wait_line(r"database system is ready to accept connections", 20)
                return
            except Exception:
                if any("could not bind" in ln or "Address already in use" in ln
                       for ln in self.proc.output()) and attempt < 2:
                    self.proc.stop()
                    continue
                raise

    def stop(self):
        """Fast shutdown (SIGINT): clients are disconnected, not waited for
        as SIGTERM's smart shutdown would."""
        p = self.proc
        if p is None or not p.alive():
            return
        p.signal(signal.SIGINT)
        try:
            p.p.wait(15)
        except subprocess.TimeoutExpired:
            p.signal(signal.SIGKILL)
            p.p.wait(5)
        p.reader.join(2)

    def cleanup(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def log(self):
        out = []
        for p in self.env.procs:
            if p.name == "postgres":
                out += p.output()
        return out

    def psql(self, sql, db="coa_registry", user=None, password=None, ok=True):
        """(returncode, stdout, stderr) of psql -c sql: as the superuser over
        the socket, or as user with password over TCP."""
        argv = [os.path.join(BIN, "psql"), "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1",
                "-p", str(self.port), "-d", db]
        env = dict(os.environ)
        if user is None:
            argv = self.as_user + argv + ["-h", self.dir, "-U", "postgres"]
        else:
            argv += ["-h", "127.0.0.1", "-U", user]
            env["PGPASSWORD"] = password
        r = subprocess.run(argv + ["-c", sql], cwd=self.dir, capture_output=True, text=True,
                           env=env, timeout=30)
        if ok:
            check(r.returncode == 0, "psql %r failed: %s" % (sql, r.stderr.strip()))
        return r.returncode, r.stdout, r.stderr


def setup_registry(pg):
    pg.psql("CREATE DATABASE coa_registry", db="postgres")
    pg.psql("""
        CREATE TABLE realms (realm_id uuid PRIMARY KEY, public_key bytea NOT NULL,
                             published boolean NOT NULL, advert_version int NOT NULL, name text);
        CREATE ROLE coa_relay LOGIN PASSWORD '%s';
        GRANT USAGE ON SCHEMA public TO coa_relay;
        GRANT SELECT (realm_id, public_key, published, advert_version) ON realms TO coa_relay;
        INSERT INTO realms VALUES
          ('%s', '\\x%s', true, 2, 'Published realm'),
          ('%s', '\\x%s', false, 2, 'Unpublished realm'),
          ('%s', '\\x%s', true, 1, 'Old advert'),
          ('%s', '\\x%s', true, 2, 'Short key');
    """ % (PASSWORD, PUB, PUB_KEY.hex(), HIDDEN, bytes(32).hex(), OLD, bytes([7] * 32).hex(),
           SHORT, bytes([9] * 31).hex()))
    # The role sees exactly the granted columns.
    rc, out, err = pg.psql("SELECT name FROM realms", user="coa_relay", password=PASSWORD,
                           ok=False)
    check(rc != 0 and "permission denied" in err, "coa_relay may read name: rc=%d %s" % (rc, err))
    rc, out, err = pg.psql("SELECT count(*) FROM realms WHERE published AND advert_version = 2",
                           user="coa_relay", password=PASSWORD)
    check(out.strip() == "2", "coa_relay's own view: %r" % out)


class Probe(Proc):
    def __init__(self, env, conninfo, extra_env, name="probe"):
        super().__init__(env, name, [PROBE, "--pg", conninfo, "--stdin", "--debug"],
                         stdin=subprocess.PIPE, extra_env=extra_env)
        self.wait_line(r"^ready mode=pg", 10)

    def send(self, *lines):
        self.p.stdin.write(("\n".join(lines) + "\n").encode())
        self.p.stdin.flush()

    def lookup(self, realm, timeout=10):
        """(result, ms, pk or None) of one lookup."""
        mark = len(self.output())
        self.send(realm)
        m = self.wait_line(r"^result id=%s res=(\w+) ms=(\d+)(?: pk=([0-9a-f]+))?$"
                           % re.escape(realm), timeout, start=mark)
        return m.group(1), int(m.group(2)), m.group(3)

    def results(self, start=0):
        return [re.match(r"^result id=(\S+) res=(\w+) ms=(\d+)", ln).groups()
                for ln in self.output()[start:] if ln.startswith("result ")]

    def metrics(self):
        mark = len(self.output())
        self.send("metrics")
        self.wait_line(r"^metrics-end$", 5, start=mark)
        out = {}
        lines = self.output()[mark:]
        for ln in lines[lines.index("metrics-begin") + 1:lines.index("metrics-end")]:
            if not ln.startswith("#"):
                k, v = ln.rsplit(" ", 1)
                out[k] = int(v)
        return out


def resume(pid):
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass


def check_found(probe, realm):
    res, ms, pk = probe.lookup(realm)
    check(res == "found" and pk == PUB_KEY.hex(), "%s: %s pk=%s" % (realm, res, pk))
    return ms


def tunnel_handshakes(env, conninfo, passfile):
    """rally-relay --tunnel-pg: coa's handshake answered from this
    database, as coa's relay does it."""
    if nacl is None:
        env.log("tunnel section skipped: python3-nacl is not installed")
        return
    from coapeer import HostPeer, Realm
    relay = Proc(env, "relay-pg", [
        os.path.join(BUILD, "relay", "rally-relay"), "--tunnel-listen", "127.0.0.1:0",
        "--tunnel-pg", conninfo, "--tunnel-relay-host", "127.0.0.1", "--tunnel-bind",
        "127.0.0.1", "--state-dir", os.path.join(env.dir, "relay-state"), "--log", "plain",
        "--debug"], extra_env={"PGPASSFILE": passfile})
    m = relay.wait_line(r"^(?:<\d>)?ready tunnel=(\S+)", 10)
    host, port = m.group(1).rsplit(":", 1)
    relay.tunnel = (host, int(port))
    relay.wait_line(r"keys-db-up", 10)
    good = HostPeer(env, relay, Realm(PUB, PUB_SEED), name="pg-host")
    for rid, why in ((HIDDEN, "unpublished"), (OLD, "advert_version 1"), (MISSING, "unknown")):
        peer = HostPeer(env, relay, Realm(rid), hello=False, start=False, name="pg-" + why)
        ans = peer.hello()
        check(ans == {"ok": False, "message": "unauthorized"}, "%s realm: %r" % (why, ans))
    # the right realm id with another key's signature
    bad = HostPeer(env, relay, Realm(PUB), hello=False, start=False, name="pg-wrongkey")
    ans = bad.hello()
    check(ans == {"ok": False, "message": "invalid signature"}, "wrong key: %r" % ans)
    check(good.alive(), "the welcomed host was dropped")
    env.daemons_alive(relay)
    env.log("tunnel handshakes answered from PostgreSQL: welcome, 3 x unauthorized, "
            "invalid signature")


def scenario(env):
    t_start = time.monotonic()
    check(os.access(PROBE, os.X_OK), "%s is not built" % PROBE)
    pg = Pg(env)
    pg.start()
    setup_registry(pg)
    env.log("server up and registry ready in %.1fs" % (time.monotonic() - t_start))

    # ---- a URI with the password in it: one-shot lookups, then exit ----
    # Two hosts: 127.0.0.2 refuses (the server is on 127.0.0.1 only), so
    # libpq moves on to localhost on a new socket (the probe must follow
    # PQsocket), a name resolved off the loop.
    uri = "postgresql://coa_relay:%s@127.0.0.2:%d,localhost:%d/coa_registry?sslmode=disable" % (
        PASSWORD, pg.port, pg.port)
    once = Proc(env, "probe-uri", [PROBE, "--pg", uri, PUB, PUB.upper(), MISSING])
    check(once.wait_exit(15) == 0, "probe-uri failed: %s" % once.output()[-5:])
    got = sorted(r[1] for r in [re.match(r"^result id=(\S+) res=(\w+)", ln).groups()
                                for ln in once.output() if ln.startswith("result ")])
    check(got == ["found", "found", "unknown"], "URI lookups: %r" % once.output())
    check(not any(PASSWORD in ln for ln in once.output()), "the password was printed")

    # ---- PGPASSFILE, the interactive probe ----
    passfile = os.path.join(env.dir, "pgpass")
    with open(passfile, "w") as f:
        f.write("127.0.0.1:%d:coa_registry:coa_relay:%s\n" % (pg.port, PASSWORD))
    os.chmod(passfile, 0o600)
    conninfo = "host=127.0.0.1 port=%d dbname=coa_registry user=coa_relay sslmode=disable" % pg.port
    probe = Probe(env, conninfo, {"PGPASSFILE": passfile})
    probe.wait_line(r"keys-db-up", 10)

    check_found(probe, PUB)
    check_found(probe, PUB.upper())
    for realm in (HIDDEN, OLD, SHORT, MISSING):
        res, ms, pk = probe.lookup(realm)
        check(res == "unknown" and pk is None, "%s: %s" % (realm, res))
    probe.wait_line(r"keys-db-bad-row realm=%s rows=1 bytes=31" % SHORT, 5)
    for bad in (NOT_UUID, "x'OR'1'='1", PUB + "0", "{%s}" % PUB):
        res, ms, pk = probe.lookup(bad)
        check(res == "unknown" and ms < 50, "%s: %s after %d ms" % (bad, res, ms))
    # The server saw the canonical id as a parameter, never the others.
    log = pg.log()
    check(any("parameters: $1 = '%s'" % PUB in ln for ln in log), "no lookup in the server log")
    check(not any(NOT_UUID in ln or "OR'1'" in ln for ln in log),
          "a non-UUID id reached the server")
    rc, out, _ = pg.psql("SELECT application_name FROM pg_stat_activity WHERE usename = 'coa_relay'")
    check(out.split() == ["rally-relay"], "application_name: %r" % out)

    # ---- the queue: 256 held, the rest refused at once ----
    mark = len(probe.output())
    probe.send("burst 300 %s" % PUB)
    wait_for(lambda: len(probe.results(mark)) >= 300, 20, "300 burst answers")
    res = [r[1] for r in probe.results(mark)]
    check(res.count("found") == 256 and res.count("error") == 44, "burst: %d found, %d error" % (
        res.count("found"), res.count("error")))
    check(all(int(r[2]) < 50 for r in probe.results(mark) if r[1] == "error"),
          "queue-full lookups were not refused at once")

    # ---- cancel: the cancelled lookup never answers, the next is fine ----
    mark = len(probe.output())
    probe.send("cancel %s" % PUB)
    probe.wait_line(r"^cancelled id=%s$" % PUB, 5, start=mark)
    check_found(probe, PUB)
    check(len(probe.results(mark)) == 1, "a cancelled lookup answered: %r" % probe.results(mark))

    # ---- a locked table: statement_timeout, then the queued one's deadline ----
    locker = Proc(env, "locker", pg.as_user + [
        os.path.join(BIN, "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", pg.dir,
        "-p", str(pg.port), "-U", "postgres", "-d", "coa_registry"],
        stdin=subprocess.PIPE, cwd=pg.dir)
    locker.p.stdin.write(b"BEGIN;\nLOCK TABLE realms IN ACCESS EXCLUSIVE MODE;\n")
    locker.p.stdin.flush()
    wait_for(lambda: pg.psql("SELECT count(*) FROM pg_locks WHERE relation = 'realms'::regclass "
                             "AND mode = 'AccessExclusiveLock' AND granted")[1].strip() == "1",
             10, "the lock to be held")
    mark = len(probe.output())
    probe.send(PUB, HIDDEN)
    wait_for(lambda: len(probe.results(mark)) >= 2, 12, "both locked lookups to end")
    (id1, r1, ms1), (id2, r2, ms2) = probe.results(mark)[:2]
    ms1, ms2 = int(ms1), int(ms2)
    env.log("locked: first error after %d ms (statement_timeout), second after %d ms "
            "(its deadline)" % (ms1, ms2))
    check(id1 == PUB and r1 == "error" and 2900 <= ms1 <= 4500, "first locked: %s %s %d ms" % (
        id1, r1, ms1))
    check(id2 == HIDDEN and r2 == "error" and 4900 <= ms2 <= 5800, "second locked: %s %s %d ms" % (
        id2, r2, ms2))
    probe.wait_line(r"keys-db-query-fail .*sqlstate=57014", 2, start=mark)
    locker.p.stdin.write(b"ROLLBACK;\n")
    locker.p.stdin.close()
    check(locker.wait_exit(10) == 0, "the locker failed: %s" % locker.output()[-5:])
    check_found(probe, PUB)
    check(not probe.grep(r"keys-db-down"), "a slow query took the connection down")

    # ---- a backend that stops answering (SIGSTOP): deadline, then stuck ----
    rc, out, _ = pg.psql("SELECT pid FROM pg_stat_activity WHERE application_name = 'rally-relay'")
    backend = int(out.split()[0])
    with open("/proc/%d/stat" % backend) as f:
        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
    check(ppid == pg.proc.pid, "backend %d is not a child of our server" % backend)
    os.kill(backend, signal.SIGSTOP)
    env.cleanups.append(lambda: resume(backend))
    res, ms, _pk = probe.lookup(PUB, timeout=8)
    check(res == "error" and 4900 <= ms <= 5800, "unanswered: %s after %d ms" % (res, ms))
    t_stuck = time.monotonic()
    probe.wait_line(r"keys-db-down reason=stuck", 8)
    env.log("stuck connection dropped %.1fs after the deadline" % (time.monotonic() - t_stuck))
    resume(backend)
    wait_for(lambda: len(probe.grep(r"keys-db-up")) >= 2, 10, "keys-db-up after stuck")
    check_found(probe, PUB)

    # ---- the server stops: fail fast, one keys-db-down ----
    pg.stop()
    probe.wait_line(r"keys-db-down", 5)
    t_down = time.monotonic()
    for _ in range(3):
        res, ms, _pk = probe.lookup(PUB, timeout=3)
        check(res == "error" and ms < 100, "with the server down: %s after %d ms" % (res, ms))
    check(probe.metrics().get("rally_relay_tunnel_keys_db_up") == 0, "db_up while down")

    # ---- restarted: the connection comes back on its own ----
    pg.start()
    wait_for(lambda: len(probe.grep(r"keys-db-up")) >= 3, 40, "keys-db-up after the restart")
    env.log("reconnected %.1fs after the server went down" % (time.monotonic() - t_down))
    check_found(probe, PUB)
    # Two outages (stuck, stopped), one line each: the failed reconnects
    # while stopped are debug lines.
    check(len(probe.grep(r"keys-db-down")) == 2, "keys-db-down not once per outage: %r"
          % probe.grep(r"keys-db-down"))
    m = probe.metrics()
    check(m.get("rally_relay_tunnel_keys_db_up") == 1, "db_up: %r" % m)
    check(m.get("rally_relay_tunnel_keys_db_disconnects_total") == 2, "disconnects: %r" % m)
    check(m.get("rally_relay_tunnel_keys_db_connects_total") == 3, "connects: %r" % m)
    check(m.get('rally_relay_tunnel_keys_errors_total{reason="queue_full"}') == 44, "%r" % m)
    check(m.get('rally_relay_tunnel_keys_errors_total{reason="timeout"}') == 2, "%r" % m)
    check(m.get('rally_relay_tunnel_keys_db_bad_rows_total') == 1, "%r" % m)

    check(not any(PASSWORD in ln for ln in probe.output()), "the password was printed")
    env.daemons_alive(probe)
    tunnel_handshakes(env, conninfo, passfile)
    probe.send("quit")
    check(probe.wait_exit(10) == 0, "the probe did not exit cleanly")
    env.log("total %.1fs" % (time.monotonic() - t_start))


if BIN is None:
    print("SKIP relay_keys_pg: no PostgreSQL server binaries (initdb, postgres, psql) in "
          "/usr/lib/postgresql/*/bin or on PATH")
    sys.exit(77)
run(scenario)
