#!/usr/bin/env python3
"""The .deb, as an operator installs it (docs/install.md): built by CPack from
this build tree, checked by lintian, installed on this machine with dpkg -i,
its units checked by systemd-analyze verify and its man pages by man, each
daemon started with its unit's own ExecStart= line and environment file up
to its ready line (and READY=1), upgraded, removed, purged; afterwards
nothing of it is left but what Debian keeps on purpose (the system users,
which the test then deletes itself).

No systemd runs as PID 1 here, so the test does for each unit what systemd
would: the environment (Environment=, then the EnvironmentFile=, then
STATE_DIRECTORY, NOTIFY_SOCKET, WATCHDOG_USEC, USER, HOME...), the state
directory (StateDirectory=, StateDirectoryMode=, owned by User=), User= and
Group=, UMask= and LimitNOFILE=, then ExecStart= expanded by systemd's rules
($VAR as a word splits into words, ${VAR} inside a word does not). The
sandboxing lines (ProtectSystem=, SystemCallFilter=, ...) are checked by
systemd-analyze verify only; nothing here can enforce them. The loopback
addresses and ports 0 go through the environment files, the way an operator
sets flags, never by editing a command line. Every daemon runs in a network
namespace of the test's own with only a loopback interface: the relay lobby
binds 0.0.0.0 and STUN defaults to public servers, and neither may reach
this machine's interfaces or the internet.

Needs root (dpkg, users, namespaces) and Debian's dpkg-dev (dpkg-shlibdeps
for CPack), lintian, man-db and systemd (systemd-analyze; tools/dev.sh
installs them). Refuses to run when a rallypoint package is installed."""

import grp
import json
import os
import pwd
import re
import resource
import secrets
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import threading
import time

from harness import BUILD, Failure, Netns, Proc, check, ns_http, run, wait_for

PKG = "rallypoint"
UNITDIR = "/lib/systemd/system"
UNITS = ["rally-relay.service", "rally-master.service", "rally-lobby-relay.service",
         "rally-relay-agent.service"]
USERS = ["_rally-relay", "_rally-master", "_rally-lobby"]
STATE_DIRS = ["/var/lib/rally-relay", "/var/lib/rally-master", "/var/lib/rally-lobby-relay"]
TOKEN = "/etc/rallypoint/rally-relay.token"
AGENT_KEY = "/etc/rallypoint/rally-relay-agent.key"
# Where a package's files or the services' state could be left behind.
TREES = ["/etc", "/var/lib", "/lib/systemd", "/usr/lib/sysusers.d", "/usr/lib/sysctl.d",
         "/usr/sbin", "/usr/bin", "/usr/share/man", "/usr/share/doc"]
SYSCTLS = ["/proc/sys/net/core/rmem_max", "/proc/sys/net/core/wmem_max"]


def sh(argv, timeout=120, ok=True, **kw):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    if ok:
        check(r.returncode == 0, "%s exited %d:\n%s%s" % (
            " ".join(argv), r.returncode, r.stdout[-3000:], r.stderr[-3000:]))
    return r


def dpkg(args, timeout=300):
    """dpkg with the given arguments, waiting while another dpkg or apt
    holds the lock (other work on this machine) rather than failing."""
    def attempt():
        r = subprocess.run(["dpkg"] + args, capture_output=True, text=True, timeout=timeout,
                           env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
        if r.returncode != 0 and re.search(r"lock|locked", r.stderr):
            return None
        return r
    r = wait_for(attempt, 180, "the dpkg lock", interval=1)
    check(r.returncode == 0, "dpkg %s exited %d:\n%s%s" % (
        " ".join(args), r.returncode, r.stdout[-3000:], r.stderr[-3000:]))
    return r


def installed():
    r = subprocess.run(["dpkg-query", "-W", "-f=${db:Status-Abbrev}", PKG],
                       capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else ""


def leftovers():
    """Paths under TREES whose name mentions rally (the package's and its
    services'), and the rally accounts: what a purge must take back."""
    out = set()
    for top in TREES:
        for root, dirs, files in os.walk(top):
            for n in dirs + files:
                if "rally" in n:
                    out.add(os.path.join(root, n))
    for db in ("/etc/passwd", "/etc/group", "/etc/shadow", "/etc/gshadow"):
        with open(db) as f:
            for ln in f:
                if "rally" in ln.split(":", 1)[0]:
                    out.add("%s:%s" % (db, ln.split(":", 1)[0]))
    return out


# ---- systemd's syntax, the parts the units use ----

def parse_unit(path):
    """{section: [(key, value)]}: keys repeat (SystemCallFilter=)."""
    out, sect = {}, None
    with open(path) as f:
        for n, ln in enumerate(f, 1):
            ln = ln.strip()
            if not ln or ln[0] in "#;":
                continue
            m = re.match(r"^\[(\w+)\]$", ln)
            if m:
                sect = out.setdefault(m.group(1), [])
                continue
            check(sect is not None and "=" in ln and not ln.endswith("\\"),
                  "%s:%d: a line this test cannot read: %r" % (path, n, ln))
            k, v = ln.split("=", 1)
            sect.append((k.strip(), v.strip()))
    return out


def one(unit, sect, key, default=None):
    vals = [v for k, v in unit.get(sect, []) if k == key]
    check(len(vals) <= 1, "%s= set %d times" % (key, len(vals)))
    return vals[0] if vals else default


def parse_env_file(text, path):
    """VAR=value lines as systemd reads them (systemd.exec(5),
    EnvironmentFile=): # and ; comments, a value in double quotes (with
    backslash escapes) or single quotes (literal), or bare (trailing
    blanks dropped). Anything else fails instead of being guessed at."""
    out = {}
    for n, raw in enumerate(text.splitlines(), 1):
        ln = raw.strip()
        if not ln or ln[0] in "#;":
            continue
        m = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$", ln)
        check(m, "%s:%d: not VAR=value: %r" % (path, n, raw))
        name, v = m.group(1), m.group(2)
        if v.startswith('"'):
            m2 = re.match(r'^"((?:[^"\\]|\\.)*)"$', v)
            check(m2, "%s:%d: a double-quoted value this test cannot read" % (path, n))
            v = re.sub(r'\\(.)', r"\1", m2.group(1))
        elif v.startswith("'"):
            m2 = re.match(r"^'([^']*)'$", v)
            check(m2, "%s:%d: a single-quoted value this test cannot read" % (path, n))
            v = m2.group(1)
        else:
            check("\\" not in v and '"' not in v and "'" not in v,
                  "%s:%d: a bare value with quotes or escapes" % (path, n))
        out[name] = v
    return out


def parse_environment_line(v):
    """Environment=A=1 B=2 ("A=x y" quoted as a whole)."""
    out = {}
    for w in shlex.split(v):
        k, _, val = w.partition("=")
        out[k] = val
    return out


def expand_exec(line, env):
    """ExecStart= as systemd expands it: the line split into words (quotes
    honoured), then a word that is exactly $VAR replaced by the variable
    split at whitespace (quotes honoured: EXTRACT_UNQUOTE), and ${VAR}
    inside any word replaced as it is; unset variables are empty."""
    check(line[:1] not in "@-:+!", "ExecStart= prefixes are not handled: %r" % line)
    check("%" not in line, "ExecStart= specifiers are not handled: %r" % line)
    argv = []
    for w in shlex.split(line):
        m = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", w)
        if m:
            argv += shlex.split(env.get(m.group(1), ""))
            continue
        check(not re.search(r"\$(?![{$])", w), "a braceless $ inside %r" % w)
        w = re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda x: env.get(x.group(1), ""), w)
        argv.append(w.replace("$$", "$"))
    return argv


def seconds(v):
    m = re.fullmatch(r"(\d+)(s|min)?", v)
    check(m, "a time span this test cannot read: %r" % v)
    return int(m.group(1)) * (60 if m.group(2) == "min" else 1)


def set_env_vars(path, values):
    """What an operator does: the active VAR= line replaced (or added) in
    the environment file, comments left alone."""
    with open(path) as f:
        lines = f.read().splitlines()
    for k, v in values.items():
        lines = [ln for ln in lines if not re.match(r"^\s*%s\s*=" % k, ln)]
        lines.append('%s="%s"' % (k, v.replace("\\", "\\\\").replace('"', '\\"')))
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


class Notify:
    """An sd_notify socket such as systemd's: datagrams collected."""

    def __init__(self, env, name):
        d = os.path.join(env.dir, "notify")
        os.makedirs(d, exist_ok=True)
        os.chmod(env.dir, 0o755)
        os.chmod(d, 0o755)
        self.path = os.path.join(d, name)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        os.chmod(self.path, 0o777)
        self.sock.settimeout(0.05)
        env.socks.append(self.sock)
        self.got = []

    def messages(self):
        try:
            while True:
                self.got += self.sock.recv(4096).decode().split("\n")
        except (socket.timeout, BlockingIOError):
            pass
        return self.got


class Service(Proc):
    """A unit's main process, started as systemd would start it (see the
    module's docstring), inside the test's namespace."""

    def __init__(self, env, ns, unit_name, overrides):
        self.unit_name = unit_name
        path = os.path.join(UNITDIR, unit_name)
        unit = parse_unit(path)
        svc = unit["Service"]
        check(one(unit, "Service", "Type") == "notify", "%s: Type= is not notify" % unit_name)
        user = one(unit, "Service", "User")
        group = one(unit, "Service", "Group", user)
        pw, gr = pwd.getpwnam(user), grp.getgrnam(group)
        self.uid, self.gid = pw.pw_uid, gr.gr_gid
        # The environment file, edited the way an operator would.
        envfile = one(unit, "Service", "EnvironmentFile")
        check(envfile and envfile.startswith("-/etc/default/"),
              "%s: EnvironmentFile=%s" % (unit_name, envfile))
        envfile = envfile[1:]
        set_env_vars(envfile, overrides)
        e = {}
        for k, v in svc:
            if k == "Environment":
                e.update(parse_environment_line(v))
        with open(envfile) as f:
            e.update(parse_env_file(f.read(), envfile))
        e.update({"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                  "USER": user, "LOGNAME": user, "HOME": pw.pw_dir, "SHELL": pw.pw_shell,
                  "INVOCATION_ID": secrets.token_hex(16)})
        state = one(unit, "Service", "StateDirectory")
        self.state_dir = None
        if state:
            self.state_dir = "/var/lib/" + state
            mode = int(one(unit, "Service", "StateDirectoryMode", "0755"), 8)
            os.makedirs(self.state_dir, exist_ok=True)
            os.chown(self.state_dir, self.uid, self.gid)
            os.chmod(self.state_dir, mode)
            e["STATE_DIRECTORY"] = self.state_dir
        self.notify = Notify(env, unit_name)
        e["NOTIFY_SOCKET"] = self.notify.path
        wd = one(unit, "Service", "WatchdogSec")
        if wd:
            e["WATCHDOG_USEC"] = str(seconds(wd) * 1000000)
        self.stop_timeout = seconds(one(unit, "Service", "TimeoutStopSec", "90"))
        nofile = int(one(unit, "Service", "LimitNOFILE", "1024"))
        # Raising the hard limit takes CAP_SYS_RESOURCE, which systemd has
        # and root on some test machines has not: capped there, and said.
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        self.nofile_capped = hard != resource.RLIM_INFINITY and nofile > hard
        if self.nofile_capped:
            env.log("%s: LimitNOFILE=%d capped at this process's hard limit %d" % (
                unit_name, nofile, hard))
            nofile = hard
        umask = int(one(unit, "Service", "UMask", "0022"), 8)
        self.exec_argv = expand_exec(one(unit, "Service", "ExecStart"), e)
        self.environ = e

        def preexec():
            os.umask(umask)
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        argv = ns.argv("/usr/bin/setpriv", "--reuid=%d" % self.uid, "--regid=%d" % self.gid,
                       "--clear-groups", "--") + self.exec_argv
        # Proc, with systemd's clean environment instead of ours.
        self.env = env
        self.name = unit_name
        self.argv = argv
        self.lines = []
        self.lock = threading.Lock()
        self.log_path = os.path.join(env.dir, "%s.%d.log" % (unit_name, len(env.procs)))
        self.log = open(self.log_path, "w")
        self.p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, env=e, preexec_fn=preexec)
        self.pid = self.p.pid
        self.reader = threading.Thread(target=self._read, args=(self.p.stdout,), daemon=True)
        self.reader.start()
        env.procs.append(self)

    def ready(self, pattern, timeout=20):
        m = self.wait_line(r"^(?:<\d>)?ready " + pattern, timeout)
        wait_for(lambda: "READY=1" in self.notify.messages(), 5, "%s: READY=1" % self.name)
        # The process runs as the unit's user, not root.
        with open("/proc/%d/status" % self.pid) as f:
            uids = re.search(r"^Uid:\s+(\d+)", f.read(), re.M)
        check(uids and int(uids.group(1)) == self.uid,
              "%s runs as uid %s, not %d" % (self.name, uids and uids.group(1), self.uid))
        return m

    def stop_clean(self):
        """SIGTERM as systemctl stop sends it: exit 0 within TimeoutStopSec=,
        STOPPING=1 first; no warning about the unit's limits on the way."""
        check(self.alive(), "%s died:\n%s" % (self.name, "\n".join(self.output()[-20:])))
        os.kill(self.pid, signal.SIGTERM)
        try:
            rc = self.p.wait(self.stop_timeout)
        except subprocess.TimeoutExpired:
            raise Failure("%s did not stop within TimeoutStopSec=%ds" % (
                self.name, self.stop_timeout))
        self.reader.join(2)
        check(rc == 0, "%s exited %d on SIGTERM:\n%s" % (self.name, rc,
                                                         "\n".join(self.output()[-20:])))
        wait_for(lambda: "STOPPING=1" in self.notify.messages(), 3, "%s: STOPPING=1" % self.name)
        bad = [ln for ln in self.output() if re.search(
            r"socket-buffer-small" if self.nofile_capped else r"nofile-low|socket-buffer-small",
            ln)]
        check(not bad, "%s complained about the unit's limits: %s" % (self.name, bad))


def owner(path):
    st = os.stat(path)
    return pwd.getpwuid(st.st_uid).pw_name, grp.getgrgid(st.st_gid).gr_name, \
        stat.S_IMODE(st.st_mode)


def check_deb(env, deb):
    """The package's metadata: its files, conffiles, maintainer scripts, and
    dependencies covering every shared library the daemons load."""
    info = sh(["dpkg-deb", "-f", deb]).stdout
    fields = dict(re.findall(r"^(\S+): (.*)$", info, re.M))
    check(fields.get("Package") == PKG, "Package: %s" % fields.get("Package"))
    depends = fields.get("Depends", "")
    for want in ("systemd | systemd-standalone-sysusers", "init-system-helpers"):
        check(want in depends, "Depends lacks %s: %s" % (want, depends))
    files = sh(["dpkg-deb", "-c", deb]).stdout
    for want in ["./usr/sbin/rally-relay", "./usr/sbin/rally-master", "./usr/bin/rally-lobby",
                 "./usr/lib/sysusers.d/rallypoint.conf", "./usr/lib/sysctl.d/50-rally-relay.conf",
                 "./usr/share/doc/rallypoint/copyright",
                 "./usr/share/doc/rallypoint/changelog.Debian.gz",
                 "./usr/share/doc/rallypoint/install.md",
                 "./usr/share/man/man8/rally-relay.8.gz", "./usr/share/man/man8/rally-master.8.gz",
                 "./usr/share/man/man8/rally-relay-agent.8.gz",
                 "./usr/sbin/rally-relay-transparent-setup",
                 "./usr/share/man/man8/rally-relay-transparent-setup.8.gz",
                 "./usr/share/man/man1/rally-lobby.1.gz"] + \
            ["./lib/systemd/system/" + u for u in UNITS] + \
            ["./etc/default/" + u[:-len(".service")] for u in UNITS]:
        check(re.search(r"\s%s$" % re.escape(want), files, re.M), "the .deb lacks %s" % want)
    check("/usr/local" not in files, "the .deb holds /usr/local paths")
    ctl = os.path.join(env.dir, "control")
    sh(["dpkg-deb", "-e", deb, ctl])
    with open(os.path.join(ctl, "conffiles")) as f:
        conffiles = sorted(f.read().split())
    check(conffiles == sorted("/etc/default/" + u[:-len(".service")] for u in UNITS),
          "conffiles: %s" % conffiles)
    for s in ("postinst", "prerm", "postrm"):
        check(os.access(os.path.join(ctl, s), os.X_OK), "no executable %s" % s)
    # Every library the binaries need, found through the package that ships
    # it, is named in Depends (what dpkg-shlibdeps was asked to do).
    root = os.path.join(env.dir, "root")
    sh(["dpkg-deb", "-x", deb, root])
    pkgs = set()
    for b in ("usr/sbin/rally-relay", "usr/sbin/rally-master", "usr/bin/rally-lobby"):
        path = os.path.join(root, b)
        needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(\S+)\]",
                            sh(["readelf", "-d", path]).stdout)
        check(needed, "readelf -d %s: no NEEDED entries" % b)
        where = dict(re.findall(r"^\s*(\S+) => (/\S+)", sh(["ldd", path]).stdout, re.M))
        for soname in needed:
            check(soname in where, "ldd %s does not resolve %s" % (b, soname))
            lib = where[soname]
            # dpkg knows a file by the path its package ships (/lib or /usr/lib).
            for candidate in (lib, os.path.realpath(lib)):
                r = subprocess.run(["dpkg", "-S", candidate], capture_output=True, text=True)
                if r.returncode == 0:
                    break
            check(r.returncode == 0, "no package ships %s" % lib)
            pkgs.add(r.stdout.split(":")[0])
    names = set(re.findall(r"([a-z0-9][a-z0-9+.-]+)", depends))
    missing = sorted(p for p in pkgs if p not in names)
    check(not missing, "Depends lacks the packages of linked libraries: %s (Depends: %s)" % (
        missing, depends))
    env.log("package %s %s: %d files, Depends: %s" % (
        fields["Package"], fields["Version"], len(files.splitlines()), depends))
    env.log("the libraries the daemons link come from %d packages, all in Depends: %s" % (
        len(pkgs), " ".join(sorted(pkgs))))
    return fields["Version"]


def lintian(env, deb):
    """Debian's own checks: no error and no warning, but the one about an
    archive upload's ITP bug (this package goes to no archive)."""
    r = sh(["lintian", "--tag-display-limit", "0", "--suppress-tags",
            "initial-upload-closes-no-bugs", deb], timeout=600, ok=False)
    tags = [ln for ln in (r.stdout + r.stderr).splitlines() if re.match(r"^[EW]: ", ln)]
    check(not tags and r.returncode == 0, "lintian:\n%s" % (r.stdout + r.stderr))
    env.log("lintian: no errors, no warnings")


def check_installed(env):
    for u in USERS:
        pw = pwd.getpwnam(u)
        check(pw.pw_uid < 1000 and pw.pw_shell == "/usr/sbin/nologin",
              "%s: uid %d shell %s" % (u, pw.pw_uid, pw.pw_shell))
        grp.getgrnam(u)
    check(owner(TOKEN) == ("root", "_rally-relay", 0o640), "token: %s" % (owner(TOKEN),))
    with open(TOKEN) as f:
        check(re.fullmatch(r"[0-9a-f]{48}\n", f.read()), "the token is not 48 hex digits")
    for s in SYSCTLS:
        with open(s) as f:
            check(int(f.read()) >= 4194304, "%s below 4 MiB after install" % s)
    # Installed, enabled nowhere, running nowhere.
    for u in UNITS:
        r = sh(["systemctl", "is-enabled", u], ok=False)
        check(r.stdout.strip() == "disabled", "%s: is-enabled says %r" % (u, r.stdout.strip()))
    links = [os.path.join(r, n) for r, _, fs in os.walk("/etc/systemd/system") for n in fs
             if "rally" in n]
    check(not links, "enablement links after install: %s" % links)
    running = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                exe = os.readlink("/proc/%s/exe" % p)
            except OSError:
                continue
            if exe in ("/usr/sbin/rally-relay", "/usr/sbin/rally-master", "/usr/bin/rally-lobby"):
                running.append((p, exe))
    check(not running, "the install started daemons: %s" % running)


def verify_units(env):
    for u in UNITS:
        r = sh(["systemd-analyze", "verify", os.path.join(UNITDIR, u)], ok=False)
        out = (r.stdout + r.stderr).strip()
        check(r.returncode == 0 and not out, "systemd-analyze verify %s: %s" % (u, out))
    env.log("systemd-analyze verify: %d units, no complaint (ExecStart= binaries and "
            "Documentation=man: pages found)" % len(UNITS))


def check_man(env):
    pages = [ln for ln in sh(["dpkg", "-L", PKG]).stdout.splitlines()
             if ln.startswith("/usr/share/man/") and ln.endswith(".gz")]
    check(len(pages) == 5, "man pages: %s" % pages)
    for page in pages:
        name = os.path.basename(page).split(".")[0]
        r = sh(["man", "--warnings", "-l", page], ok=False,
               env=dict(os.environ, MANWIDTH="80", MAN_KEEP_FORMATTING="0"))
        check(r.returncode == 0 and not r.stderr.strip(), "man -l %s: %s" % (page, r.stderr))
        text = re.sub(r".\x08", "", r.stdout)
        for want in ("NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "EXIT STATUS|Exit status"):
            check(re.search(r"^\s*(%s)" % want, text, re.M), "%s: no %s" % (page, want))
        check(re.search(r"^\s+%s - \S" % re.escape(name), text, re.M),
              "%s: the NAME line is not '%s - ...'" % (page, name))
        check("manual page for" not in text, "%s: help2man's placeholder NAME" % page)
        w = sh(["man", "-w", name]).stdout.strip()
        check(w == page, "man -w %s: %s" % (name, w))
    env.log("man: %d pages render without warnings: %s" % (
        len(pages), ", ".join(os.path.basename(p) for p in pages)))


def run_services(env, ns):
    """Each unit's daemon to its ready line and back, its state written
    where the unit says, as its user."""
    # rally-relay: a game server address nobody answers (the relay is ready
    # without one), no heartbeats, the control API with the package's token.
    relay = Service(env, ns, "rally-relay.service", {
        "RALLY_RELAY_LISTEN": "127.0.0.1:0",
        "RALLY_RELAY_ARGS": "--server 127.0.0.1:9 --no-heartbeat --control 127.0.0.1:0 "
                            "--token-file %s" % TOKEN})
    m = relay.ready(r"listen=127\.0\.0\.1:\d+ control=(127\.0\.0\.1:\d+)$")
    env.log("rally-relay: %s" % " ".join(relay.exec_argv))
    ctl = "http://%s" % m.group(1)
    with open(TOKEN) as f:
        token = f.read().strip()
    st, body = ns_http(ns, ctl + "/metrics", token)
    check(st == 200 and "rally_relay_" in body, "relay /metrics with the package's token: %s" % st)
    st, _ = ns_http(ns, ctl + "/metrics", "x" * 48)
    check(st == 401, "relay /metrics with a wrong token: %s" % st)
    code = ("import urllib.request\n"
            "r=urllib.request.Request(%r,data=b'{\"reason\":\"install test\",\"duration\":600}',"
            "method='PUT')\nr.add_header('Authorization','Bearer %s')\n"
            "print(urllib.request.urlopen(r,timeout=3).status)\n" % (
                ctl + "/bans/192.0.2.7", token))
    check(ns.py(code).strip() in ("200", "201"), "PUT /bans failed")
    bans = os.path.join(relay.state_dir, "bans.json")
    wait_for(lambda: os.path.exists(bans), 5, "bans.json in the state directory")
    check(owner(bans)[0] == "_rally-relay", "bans.json: %s" % (owner(bans),))
    check(owner(relay.state_dir) == ("_rally-relay", "_rally-relay", 0o750),
          "%s: %s" % (relay.state_dir, owner(relay.state_dir)))
    relay.stop_clean()

    master = Service(env, ns, "rally-master.service", {
        "RALLY_MASTER_HTTP": "127.0.0.1:0", "RALLY_MASTER_UDP": "127.0.0.1:0",
        "RALLY_MASTER_ARGS": "--relay-ip 127.0.0.1 --relay-bind 127.0.0.1"})
    m = master.ready(r"http=(127\.0\.0\.1:\d+) udp=127\.0\.0\.1:\d+$")
    env.log("rally-master: %s" % " ".join(master.exec_argv))
    st, body = ns_http(ns, "http://%s/healthz" % m.group(1))
    check(st == 200, "master /healthz: %s %s" % (st, body))
    st, body = ns_http(ns, "http://%s/metrics" % m.group(1))
    check(st == 200 and "rally_master_" in body, "master /metrics: %s" % st)
    master.stop_clean()
    snap = os.path.join(master.state_dir, "registry.json")
    check(os.path.exists(snap), "no registry.json in %s after the stop" % master.state_dir)
    # UMask=0027: nothing the service writes is world-readable.
    check(owner(snap)[0] == "_rally-master" and not owner(snap)[2] & 0o007,
          "registry.json: %s" % (owner(snap),))

    # The dedicated relay lobby: its port 0, no STUN and no master (the
    # namespace has no way out anyway), loopback candidates only.
    lobby = Service(env, ns, "rally-lobby-relay.service", {
        "RALLY_LOBBY_PORT": "0",
        "RALLY_LOBBY_ARGS": "--stun off --rendezvous off --lan-ip 127.0.0.1 --ipv6 off "
                            "--lobby-name 'install test' --metrics 127.0.0.1:0"})
    lobby.ready(r"udp=\S+:\d+ game=\S+$")
    # /metrics as the env file's example has it, under the unit's sandbox.
    mm = lobby.wait_line(r"metrics-listening metrics=(127\.0\.0\.1:\d+) ", 5)
    st, body = ns_http(ns, "http://%s/metrics" % mm.group(1))
    check(st == 200 and 'rally_lobby_info{' in body and 'role="relay"' in body,
          "relay lobby /metrics: %s %s" % (st, body[:200]))
    env.log("rally-lobby-relay: %s" % " ".join(shlex.quote(a) for a in lobby.exec_argv))
    check("install test" in lobby.exec_argv, "the quoted lobby name was split: %s" % lobby.exec_argv)
    wait_for(lambda: [ln for ln in lobby.output() if ln.startswith("CODE=")], 10, "CODE=")
    secret = os.path.join(lobby.state_dir, "relay_secret.bin")
    wait_for(lambda: os.path.exists(secret), 5, "relay_secret.bin")
    check(owner(secret) == ("_rally-lobby", "_rally-lobby", 0o600), "relay_secret.bin: %s" % (
        owner(secret),))
    lobby.stop_clean()

    # The agent, with a key made the way the unit's comment says.
    sh(["/usr/sbin/rally-relay", "agent", "keygen", AGENT_KEY])
    shutil.chown(AGENT_KEY, group="_rally-relay")
    os.chmod(AGENT_KEY, 0o640)
    agent = Service(env, ns, "rally-relay-agent.service", {
        "RALLY_AGENT_ARGS": "--relay ws://127.0.0.1:9/relay/v1/host "
                            "--realm-id 6f9619ff-8b86-4011-b42d-00cf4fc964ff "
                            "--server 127.0.0.1:27960"})
    agent.ready(r"relay=ws://127\.0\.0\.1:9/relay/v1/host$")
    env.log("rally-relay-agent: %s" % " ".join(agent.exec_argv))
    agent.stop_clean()
    return token


def rebuild_as(env, deb, version):
    """The same package under another version: an upgrade for dpkg."""
    tree = os.path.join(env.dir, "deb-" + version)
    sh(["dpkg-deb", "-R", deb, tree])
    ctl = os.path.join(tree, "DEBIAN", "control")
    with open(ctl) as f:
        text = f.read()
    with open(ctl, "w") as f:
        f.write(re.sub(r"^Version: .*$", "Version: " + version, text, flags=re.M))
    out = os.path.join(env.dir, "%s_%s.deb" % (PKG, version))
    sh(["dpkg-deb", "--root-owner-group", "-b", tree, out])
    return out


def scenario(env):
    check(os.geteuid() == 0, "installing a package needs root")
    for tool in ("cpack", "dpkg-shlibdeps", "lintian", "systemd-analyze", "man", "setpriv",
                 "dpkg-deb", "readelf"):
        check(shutil.which(tool), "%s is missing (tools/dev.sh test installs it)" % tool)
    check(os.path.exists(os.path.join(BUILD, "CPackConfig.cmake")),
          "no CPackConfig.cmake in %s" % BUILD)
    state = installed()
    check(not state, "refusing to run: the %s package is on this machine (dpkg status %s); "
          "this test installs and purges it" % (PKG, state))
    before = leftovers()
    check(not before, "refusing to run: rallypoint files or users are on this machine "
          "already: %s" % sorted(before))
    sysctl_before = {}
    for s in SYSCTLS:
        with open(s) as f:
            sysctl_before[s] = f.read()

    def restore():
        # Before the purge (the harness stops processes after its cleanups).
        for p in env.procs:
            try:
                p.stop()
            except Exception:
                pass
        if installed():
            subprocess.run(["dpkg", "--purge", PKG], capture_output=True, timeout=300)
        for u in USERS:
            subprocess.run(["userdel", u], capture_output=True)
            subprocess.run(["groupdel", u], capture_output=True)
        for d in STATE_DIRS:
            shutil.rmtree(d, ignore_errors=True)
        for s, v in sysctl_before.items():
            try:
                with open(s, "w") as f:
                    f.write(v)
            except OSError:
                pass
    env.cleanups.append(restore)

    # The .deb, built from this tree.
    out = os.path.join(env.dir, "pkg")
    t0 = time.monotonic()
    sh(["cpack", "-G", "DEB", "-B", out, "--config", os.path.join(BUILD, "CPackConfig.cmake")],
       timeout=900, cwd=BUILD)
    debs = [f for f in os.listdir(out) if f.endswith(".deb")]
    check(len(debs) == 1, "cpack made %s" % debs)
    deb = os.path.join(out, debs[0])
    env.log("cpack: %s in %.0f s" % (debs[0], time.monotonic() - t0))
    version = check_deb(env, deb)
    lintian(env, deb)

    # Installed as an operator does.
    dpkg(["-i", deb])
    check(installed() == "ii", "dpkg status after -i: %s" % installed())
    check_installed(env)
    verify_units(env)
    check_man(env)

    ns = Netns(env, "pkg")
    token = run_services(env, ns)

    # An upgrade keeps the operator's edits (conffiles), the token, the
    # users and the state, and runs the maintainer scripts' upgrade path.
    # The operator enabled one service (systemctl works on the files
    # without a running systemd): it stays enabled, and purge takes the link.
    sh(["systemctl", "enable", "rally-master.service"])
    uids = {u: pwd.getpwnam(u).pw_uid for u in USERS}
    with open("/etc/default/rally-relay") as f:
        edited = f.read()
    newer = rebuild_as(env, deb, version.rsplit("-", 1)[0] + "-%d" % (
        int(version.rsplit("-", 1)[1]) + 1))
    dpkg(["-i", newer])
    check(sh(["dpkg-query", "-W", "-f=${Version}", PKG]).stdout != version, "not upgraded")
    with open("/etc/default/rally-relay") as f:
        check(f.read() == edited, "the upgrade replaced the operator's /etc/default/rally-relay")
    with open(TOKEN) as f:
        check(f.read().strip() == token, "the upgrade changed the relay's token")
    check({u: pwd.getpwnam(u).pw_uid for u in USERS} == uids, "the upgrade changed the users")
    check(os.path.exists("/var/lib/rally-relay/bans.json"), "the upgrade lost bans.json")
    for u in UNITS:
        want = "enabled" if u == "rally-master.service" else "disabled"
        got = sh(["systemctl", "is-enabled", u], ok=False).stdout.strip()
        check(got == want, "%s after the upgrade: %s, not %s" % (u, got, want))
    env.log("upgrade to %s: conffile edits, token, users and state kept" % sh(
        ["dpkg-query", "-W", "-f=${Version}", PKG]).stdout)

    # remove: the programs go, the configuration and the state stay.
    dpkg(["-r", PKG])
    check(installed().startswith("rc"), "dpkg status after -r: %s" % installed())
    for gone in ["/usr/sbin/rally-relay", "/usr/bin/rally-lobby", UNITDIR + "/rally-relay.service"]:
        check(not os.path.exists(gone), "%s is left after remove" % gone)
    for kept in ["/etc/default/rally-relay", TOKEN, "/var/lib/rally-relay/bans.json"]:
        check(os.path.exists(kept), "remove deleted %s (purge's job)" % kept)

    # purge: nothing left but the users, which Debian keeps on purpose.
    dpkg(["--purge", PKG])
    check(not installed() or installed().startswith("un"), "dpkg status after --purge: %s" %
          installed())
    left = leftovers()
    kept_users = {p for p in left if re.match(r"^/etc/(passwd|group|shadow|gshadow):", p)}
    check(left == kept_users, "left after purge: %s" % sorted(left - kept_users))
    check(len(kept_users) == 4 * len(USERS), "the system users after purge: %s" %
          sorted(kept_users))
    for s in os.listdir("/var/lib/systemd/deb-systemd-helper-enabled"):
        check("rally" not in s, "deb-systemd-helper state left: %s" % s)
    env.log("purge: no file left; the %d system users stay (Debian keeps package users), "
            "deleted by the test" % len(USERS))
    for u in USERS:
        sh(["userdel", u])
        subprocess.run(["groupdel", u], capture_output=True)
    check(not leftovers(), "left after deleting the users: %s" % sorted(leftovers()))


run(scenario)
