#!/usr/bin/env python3
"""The relay's admin page in a real browser (Debian's chromium headless,
driven by python3-selenium through chromium-driver), in front of a real
OpenArena server, heartbeating a real rally-master, with a live session from
a UDP client on 127.0.0.3.

Over plain HTTP first: /, /admin, /admin.js and /admin.css come without a
token, with the strict CSP, nosniff, Referrer-Policy no-referrer and
frame-ancestors 'none', no inline script or style, no other origin; every
data endpoint still wants the token; /status says what the page shows.

Then in the browser: the page loads with no SEVERE console entry and shows
only the token form; a wrong token gets the 401 message and the form back;
the right token shows the live session with its real client address and
upstream port, traffic both ways, the master's heartbeats and queries and
whether it lists the server (the listing check), and
the filtered drops this test causes (rcon through the relay). A ban added in
the page (reason, 10 minutes) cuts the live session: /sessions no longer
lists it, the relay drops its datagrams, the page shows the ban. A hostile
reason stays text. A duration the relay refuses shows the relay's message.
Removing the ban in the page lets the client back in. "Forget token" clears
every table. The layout holds at 360 and 1920 px (screenshots in the test's
log dir, copied to <build>/screenshots/). The token never appears in a URL
the browser requested (its performance log), in storage, a cookie, the DOM
or the relay's log, and every data request carried it as a Bearer header.

Last, a relay whose server is at home behind `rally-relay agent`: the page
marks that session "tunnelled"."""

import json
import os
import re
import shutil
import subprocess
import threading
import time

from harness import (OOB, RELAY_BIN, TOKEN, Master, OAServer, Relay, check, chromium,
                     first_token, http_raw, parse_addr, run, udp_socket_ports, wait_for)

HOSTILE = "<img src=x onerror=alert(1)>"
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
       "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
DATA = ("/status", "/sessions", "/bans", "/metrics")


class Player:
    """A client that keeps a session: getchallenge every 2 s, the engine
    answers each. The pace is this scenario's traffic, not a wait: with the
    relay's probe and the master's getinfo it stays under the engine's own
    limit of one query a second per source address (every packet the relay
    forwards comes from 127.0.0.1), so the server keeps answering the
    heartbeat cycle too. The pause is a wait on the stop event."""

    def __init__(self, env, relay_addr, ip):
        self.sock = env.udp(ip)
        self.addr = relay_addr
        self.answers = []
        self.stopped = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stopped.is_set():
            try:
                self.sock.sendto(OOB + b"getchallenge", self.addr)
                self.sock.settimeout(1.0)
                data, src = self.sock.recvfrom(65535)
                self.answers.append((time.monotonic(), first_token(data)))
            except OSError:
                pass
            self.stopped.wait(2.0)

    def answered_since(self, t):
        return [a for a in self.answers if a[0] > t]

    def close(self):
        self.stopped.set()
        self.t.join(3)


def http_checks(relay):
    for path in ("/", "/admin"):
        st, data, h = http_raw("GET", relay.url(path))
        check(st == 200 and b"id=\"login-form\"" in data, "%s -> %s" % (path, st))
        check(h.get("Content-Type") == "text/html; charset=utf-8", "%s type %r" % (path, h))
        check(h.get("Content-Security-Policy") == CSP, "%s CSP %r" % (path, h.get(
            "Content-Security-Policy")))
        check(h.get("X-Content-Type-Options") == "nosniff", "%s nosniff %r" % (path, h))
        check(h.get("Referrer-Policy") == "no-referrer", "%s referrer" % path)
        check(h.get("X-Frame-Options") == "DENY", "%s X-Frame-Options" % path)
        check(h.get("Cache-Control") == "no-store", "%s Cache-Control" % path)
        check(b"<script>" not in data and b"style=" not in data and b"<style" not in data,
              "%s has inline script or style" % path)
        check(not re.search(rb"<[^>]+\son[a-z]+=", data), "%s has an inline handler" % path)
        check(b"http://" not in data and b"https://" not in data, "%s names another origin" % path)
    for path, typ in (("/admin.js", "text/javascript; charset=utf-8"),
                      ("/admin.css", "text/css; charset=utf-8")):
        st, data, h = http_raw("GET", relay.url(path))
        check(st == 200 and h.get("Content-Type") == typ and
              h.get("X-Content-Type-Options") == "nosniff" and
              h.get("Content-Security-Policy") == CSP, "%s -> %s %r" % (path, st, h))
    js = http_raw("GET", relay.url("/admin.js"))[1]
    for bad in (b"innerHTML", b"outerHTML", b"insertAdjacentHTML", b"document.write", b"eval(",
                b"localStorage", b"sessionStorage", b"document.cookie", b"?token", b"&token"):
        check(bad not in js, "admin.js uses %r" % bad)
    st, _, h = http_raw("POST", relay.url("/admin"), body=b"x")
    check(st == 405 and h.get("Allow") == "GET, HEAD", "POST /admin -> %s %r" % (st, h))
    # The page holds no data; the data still wants the token.
    for path in DATA:
        st, _, h = http_raw("GET", relay.url(path))
        check(st == 401 and "Bearer" in h.get("WWW-Authenticate", ""), "%s without token -> %s" % (
            path, st))


def scenario(env):
    try:
        from selenium.common.exceptions import (NoAlertPresentException,
                                                StaleElementReferenceException)
        from selenium.webdriver.common.by import By
    except ImportError:
        check(False, "python3-selenium is missing: apt-get install python3-selenium "
              "chromium chromium-driver (tools/dev.sh installs them)")

    # A master's name is a metrics label and shown on the page: only host
    # names and IPs are taken.
    bad = subprocess.run([RELAY_BIN, "--server", "127.0.0.1:1", "--master", "<b>x</b>:27950",
                          "--check-config"], capture_output=True, text=True, timeout=10)
    check(bad.returncode == 2 and "not a host name or an IP address" in bad.stderr,
          "--master <b>x</b>: %s %r" % (bad.returncode, bad.stderr))

    m = Master(env, args=["--q3-challenge", "1500"])
    oa = OAServer(env)
    relay = Relay(env, oa.addr, args=[
        "--master", "127.0.0.1:%d" % m.udp_addr[1], "--heartbeat-tag", "QuakeArena-1",
        "--heartbeat-interval", "10", "--probe-timeout", "1000", "--listing-delay", "500"])
    master_name = "127.0.0.1:%d" % m.udp_addr[1]
    m.wait_line(r"q3-listed server=127\.0\.0\.1:%d " % relay.addr[1], 20)
    player = Player(env, relay.addr, "127.0.0.3")
    env.cleanups.append(player.close)
    wait_for(lambda: len(player.answers) >= 2, 10, "the player's first two answers")
    st, sessions, _ = relay.api("GET", "/sessions")
    mine = [s for s in sessions if s["client_ip"] == "127.0.0.3"]
    check(st == 200 and len(mine) == 1 and mine[0]["confirmed"] and not mine[0]["tunnelled"],
          "/sessions: %r" % sessions)
    client, upstream = mine[0]["client"], mine[0]["upstream_port"]
    check(upstream in udp_socket_ports(relay.pid), "the session's upstream socket is missing")
    st, status, _ = relay.api("GET", "/status")
    check(st == 200 and status["server"] == "%s:%d" % oa.addr and status["server_up"] is True and
          status["listen"] == "%s:%d" % relay.addr and status["heartbeat"]["tag"] == "QuakeArena-1"
          and status["heartbeat"]["interval_s"] == 10, "/status: %r" % status)
    ms = status["heartbeat"]["masters"]
    check(len(ms) == 1 and ms[0]["master"] == master_name and ms[0]["heartbeats"] >= 1 and
          ms[0]["last_outcome"] == "heartbeat" and ms[0]["queries"] >= 1 and
          abs(ms[0]["last_attempt"] - status["now"]) <= 15, "/status masters: %r" % ms)
    http_checks(relay)
    # Some filtered drops to show: rcon never passes the relay.
    rc = env.udp("127.0.0.7")
    for _ in range(3):
        rc.sendto(OOB + b"rcon integ-rcon status", relay.addr)
    wait_for(lambda: relay.drops("filtered") >= 3, 5, "three rcon dropped as filtered")

    # ---- the browser ----
    drv = chromium(env, performance_log=True)
    perf = []  # every performance log entry, kept: get_log drains the buffer

    def perf_log():
        perf.extend(json.loads(e["message"])["message"] for e in drv.get_log("performance"))
        return perf

    def severe(allowed=()):
        """SEVERE console entries, minus the expected ones (regexes)."""
        return [e for e in drv.get_log("browser") if e.get("level") == "SEVERE" and
                not any(re.search(a, e.get("message", "")) for a in allowed)]

    def js(expr):
        return drv.execute_script("return " + expr)

    def text(sel):
        return js("Array.from(document.querySelectorAll(%s)).map(e => e.textContent).join('\\n')"
                  % json.dumps(sel))

    def visible(id_):
        return js("!document.getElementById(%s).hidden" % json.dumps(id_))

    def click(sel):
        """Clicks the element; the page redraws its tables on every poll,
        so an element found a moment ago may be gone: find it again."""
        def go():
            try:
                drv.find_element(By.CSS_SELECTOR, sel).click()
                return True
            except StaleElementReferenceException:
                return False
        wait_for(go, 5, "a click on %s" % sel)

    def no_alert():
        try:
            a = drv.switch_to.alert.text
        except NoAlertPresentException:
            return True
        check(False, "an alert opened: %r" % a)

    def polls():
        return int(js("document.body.dataset.polls || '0'"))

    drv.get(relay.url("/admin"))
    wait_for(lambda: js("document.readyState") == "complete", 10, "the page to load")
    check(visible("login") and not visible("dash"), "not only the token form at first")
    check(severe() == [], "console errors on load")
    check(js("document.getElementById('conn').textContent") == "not connected", "conn line")

    # A wrong token: the 401 message, the form back, nothing shown.
    unauth0 = relay.metrics()["rally_relay_control_unauthorized_total"]
    drv.find_element(By.ID, "token").send_keys("wrong-token-0123456789abcdef0123456789")
    click("#connect")
    wait_for(lambda: visible("login-msg") and "401" in text("#login-msg"), 10, "the 401 message")
    check("refused" in text("#login-msg"), "401 message: %r" % text("#login-msg"))
    check(visible("login") and not visible("dash"), "the dashboard showed for a wrong token")
    check(js("document.getElementById('token').value") == "", "the token field kept its value")
    check(js("document.getElementById('sessions-body').children.length") == 0, "rows shown")
    check(relay.metrics()["rally_relay_control_unauthorized_total"] >= unauth0 + 1,
          "the relay did not count the wrong token")
    check(severe([r"/(status|sessions|bans|metrics) - Failed to load resource: the server "
                  r"responded with a status of 401"]) == [], "console errors after the 401")

    # The right token: the live session with its real client address.
    drv.find_element(By.ID, "token").send_keys(TOKEN)
    click("#connect")
    wait_for(lambda: visible("dash") and not visible("login"), 10, "the dashboard")
    row = "#sessions-body tr[data-ip='127.0.0.3']"
    wait_for(lambda: drv.find_elements(By.CSS_SELECTOR, row), 10, "the live session's row")
    r = text(row)
    check(client in r and str(upstream) in r, "session row %r (want %s, %d)" % (r, client, upstream))
    check("confirmed" in text(row + " td.state") and "tunnelled" not in r, "state %r" % r)
    check(re.search(r"[1-9]\d* B · [1-9]\d* pkts? · ", text(row + " td.traffic-in")) and
          re.search(r"[1-9]\d* B · [1-9]\d* pkts? · ", text(row + " td.traffic-out")), "traffic %r" % r)
    check("connected" in text("#conn"), "conn line %r" % text("#conn"))
    check(text("#f-server") == "%s:%d" % oa.addr and text("#f-up") == "yes" and
          text("#f-listen") == "%s:%d" % relay.addr, "facts %r" % text("#overview dd"))
    # The master's heartbeats and queries, from /status and /metrics.
    mrow = "#masters-body tr[data-master='%s']" % master_name
    wait_for(lambda: drv.find_elements(By.CSS_SELECTOR, mrow), 10, "the master's row")
    hb = int(text(mrow + " td.heartbeats"))
    check(hb >= 1 and int(text(mrow + " td.queries")) >= 1 and "heartbeat" in text(mrow),
          "master row %r" % text(mrow))
    # The listing check's verdict (its first check 0.5 s after a heartbeat).
    wait_for(lambda: text(mrow + " td.listed").startswith("yes · "), 15,
             lambda: "the master's listing in the page: %r" % text(mrow))
    # A heartbeat during the page's window shows in it (every 10 s here).
    wait_for(lambda: int(text(mrow + " td.window") or 0) >= 1, 30,
             lambda: "a heartbeat in the page's window: %r" % text(mrow))
    check(js("document.querySelectorAll(%s).length" % json.dumps(mrow + " svg.spark rect")) >= 1,
          "no bar in the master's sparkline")
    m.wait_line(r"q3-listed server=127\.0\.0\.1:%d " % relay.addr[1], 5)
    # The filtered drops: the total, and rcon sent now lands in the window.
    frow = "#drops-body tr[data-reason='filtered']"
    wait_for(lambda: text(frow + " td.total") == "%d" % relay.drops("filtered"), 10,
             lambda: "the filtered total: %r, the relay's %r" % (text(frow), relay.drops("filtered")))
    for reason in ("malformed", "rate_limited", "query_budget", "banned", "queue_full",
                   "session_cap", "send_error"):
        check(drv.find_elements(By.CSS_SELECTOR, "#drops-body tr[data-reason='%s']" % reason),
              "no row for drops of %s" % reason)
    n0 = polls()
    for _ in range(4):
        rc.sendto(OOB + b"rcon integ-rcon status", relay.addr)
    wait_for(lambda: relay.drops("filtered") >= 7, 5, "four more rcon dropped")
    wait_for(lambda: polls() >= n0 + 2 and int(text(frow + " td.window")) >= 4, 15,
             lambda: "the filtered drops in the window: %r" % text(frow))
    check(float(js("document.querySelector(%s).dataset.peak" % json.dumps(frow + " svg.spark"))) > 0,
          "the filtered sparkline stayed flat")
    check(severe() == [], "console errors while connected")

    # A ban added in the page (reason, 10 minutes) cuts the live session.
    click(row + " button.ban")
    check(js("document.getElementById('ban-ip').value") == "127.0.0.3", "Ban… did not fill the IP")
    drv.find_element(By.ID, "ban-reason").send_keys("aimbot")
    dur = drv.find_element(By.ID, "ban-duration")
    dur.clear()
    dur.send_keys("10")
    drv.execute_script("const s = document.getElementById('ban-unit'); s.value = '60';"
                       "s.dispatchEvent(new Event('change'));")
    banned0 = relay.drops("banned")
    click("#ban-add")
    t_ban = time.monotonic()
    wait_for(lambda: "Banned 127.0.0.3" in text("#ban-msg"), 10,
             lambda: "the ban message: %r" % text("#ban-msg"))
    check("1 session closed" in text("#ban-msg"), "ban message %r" % text("#ban-msg"))
    st, bans, _ = relay.api("GET", "/bans")
    b = [x for x in bans if x["ip"] == "127.0.0.3"]
    check(st == 200 and len(b) == 1 and b[0]["reason"] == "aimbot" and
          b[0]["expires"] - b[0]["created"] == 600, "/bans after the page's ban: %r" % bans)
    relay.wait_line(r"ban-added ip=127\.0\.0\.3 duration=600 sessions-closed=1")
    check(upstream not in udp_socket_ports(relay.pid), "the banned session's socket is open")
    st, sessions, _ = relay.api("GET", "/sessions")
    check(not [s for s in sessions if s["client_ip"] == "127.0.0.3"], "banned session listed")
    wait_for(lambda: relay.drops("banned") >= banned0 + 2, 10,
             "two of the player's datagrams dropped as banned")
    check(not player.answered_since(t_ban + 0.1), "the banned player is still answered")
    brow = "#bans-body tr[data-ip='127.0.0.3']"
    wait_for(lambda: drv.find_elements(By.CSS_SELECTOR, brow) and
             not drv.find_elements(By.CSS_SELECTOR, row), 10, "the page to show the ban, not the session")
    check(text(brow + " td.reason") == "aimbot" and re.search(r"in (9|10) min", text(brow + " td.expires")),
          "ban row %r" % text(brow))

    # A hostile reason stays text; permanent.
    drv.find_element(By.ID, "ban-ip").send_keys("127.0.0.9")
    drv.find_element(By.ID, "ban-reason").send_keys(HOSTILE)
    drv.execute_script("const s = document.getElementById('ban-unit'); s.value = '0';"
                       "s.dispatchEvent(new Event('change'));")
    click("#ban-add")
    hrow = "#bans-body tr[data-ip='127.0.0.9']"
    wait_for(lambda: drv.find_elements(By.CSS_SELECTOR, hrow), 10, "the hostile ban's row")
    check(text(hrow + " td.reason") == HOSTILE, "hostile reason %r" % text(hrow + " td.reason"))
    check("never" in text(hrow + " td.expires"), "permanent ban row %r" % text(hrow))
    check(drv.find_elements(By.CSS_SELECTOR, "main img, main script, #bans-body td.reason *") == [],
          "an element was made from a reason")
    check(len(drv.find_elements(By.TAG_NAME, "script")) == 1, "a script element was added")
    no_alert()
    st, bans, _ = relay.api("GET", "/bans")
    check([x["reason"] for x in bans if x["ip"] == "127.0.0.9"] == [HOSTILE], "/bans %r" % bans)

    # Refusals: one the page catches, one the relay answers (its message shown).
    drv.find_element(By.ID, "ban-ip").send_keys("not-an-ip")
    click("#ban-add")
    wait_for(lambda: "Not an IP address" in text("#ban-msg"), 5, "the page's refusal")
    ip = drv.find_element(By.ID, "ban-ip")
    ip.clear()
    ip.send_keys("127.0.0.10")
    drv.execute_script("const s = document.getElementById('ban-unit'); s.value = '86400';"
                       "s.dispatchEvent(new Event('change'));")
    dur.clear()
    dur.send_keys("4000")
    click("#ban-add")
    wait_for(lambda: "HTTP 400" in text("#ban-msg"), 5, lambda: "the relay's refusal: %r" % text("#ban-msg"))
    check("duration: must be 1..315360000 seconds" in text("#ban-msg"), "message %r" % text("#ban-msg"))
    check(not drv.find_elements(By.CSS_SELECTOR, "#bans-body tr[data-ip='127.0.0.10']"), "refused ban shown")
    check(severe([r"/bans/127\.0\.0\.10 - Failed to load resource: the server responded with a "
                  r"status of 400"]) == [], "console errors while banning")

    # Remove the ban in the page: the player is back.
    click(brow + " button.remove")
    wait_for(lambda: "lifted" in text("#ban-msg") and not drv.find_elements(By.CSS_SELECTOR, brow),
             10, "the ban lifted in the page")
    st, bans, _ = relay.api("GET", "/bans")
    check(st == 200 and not [x for x in bans if x["ip"] == "127.0.0.3"], "/bans: %r" % bans)
    relay.wait_line(r"ban-removed ip=127\.0\.0\.3")
    t = time.monotonic()
    wait_for(lambda: player.answered_since(t), 10, "the player answered again")
    wait_for(lambda: drv.find_elements(By.CSS_SELECTOR, row), 15, "the new session in the page")

    # Layouts, with data on the page.
    for w, h in ((1920, 1080), (360, 800)):
        drv.set_window_size(w, h)
        wait_for(lambda: js("window.innerWidth") <= w, 5, "resize")
        sw, iw = js("[document.documentElement.scrollWidth, window.innerWidth]")
        check(sw <= iw + 2, "%dpx: the page scrolls sideways (%d > %d)" % (w, sw, iw))
        for sel in (row, hrow, frow, mrow, "#ban-add", "#forget"):
            vis = js("(() => { const r = document.querySelector(%s).getBoundingClientRect();"
                     "return [r.left, r.right, window.innerWidth, r.width]; })()" % json.dumps(sel))
            check(vis[0] >= -1 and vis[1] <= vis[2] + 1 and vis[3] > 0,
                  "%dpx: %s is off screen %r" % (w, sel, vis))
        # The whole page in one picture: a taller window, the same width.
        full = js("document.documentElement.scrollHeight")
        drv.set_window_size(w, min(full + 200, 8000))
        wait_for(lambda: js("window.innerHeight") >= min(full, 7000), 5, "the tall window")
        shot = os.path.join(env.dir, "relay_admin_page_%d.png" % w)
        check(drv.save_screenshot(shot), "screenshot %s" % shot)
        keep = os.path.join(os.environ.get("RALLY_BUILD_DIR", env.dir), "screenshots")
        os.makedirs(keep, exist_ok=True)
        shutil.copy(shot, keep)
        env.log("screenshot %s (copy in %s)" % (shot, keep))
    drv.set_window_size(1920, 1080)

    # The token: only in Authorization headers, nowhere else.
    check(js("localStorage.length") == 0 and js("sessionStorage.length") == 0 and
          js("document.cookie") == "" and drv.get_cookies() == [], "something was stored")
    check(TOKEN not in drv.page_source and TOKEN not in js("document.documentElement.outerHTML"),
          "the token is in the DOM")
    reqs = [e["params"] for e in perf_log() if e["method"] == "Network.requestWillBeSent"]
    # Network requests only (chromium's own chrome:// new tab page and data:
    # URLs are no traffic): all to the relay.
    reqs = [p for p in reqs if re.match(r"(https?|wss?)://", p["request"]["url"])]
    urls = [p["request"]["url"] for p in reqs]
    check(urls and all(u.startswith(relay.url("/")) for u in urls),
          "a request left the relay's origin: %r" % urls)
    check(not [u for u in urls if TOKEN in u or "token" in u.lower()], "a token in a URL: %r" % urls)
    extra = {e["params"]["requestId"]: e["params"]["headers"] for e in perf
             if e["method"] == "Network.requestWillBeSentExtraInfo"}
    bearer = 0
    for p in reqs:
        path = p["request"]["url"][len(relay.url("")):]
        hdrs = dict(p["request"].get("headers", {}))
        hdrs.update(extra.get(p["requestId"], {}))
        auth = {k.lower(): v for k, v in hdrs.items()}.get("authorization")
        if path in DATA or path.startswith("/bans/"):
            check(auth and auth.startswith("Bearer "), "%s without a bearer header" % path)
            bearer += auth == "Bearer " + TOKEN
        else:
            check(auth is None, "%s sent a token" % path)
    check(bearer >= 8, "only %d requests carried the token" % bearer)
    check(not [ln for ln in relay.output() if TOKEN in ln], "the token is in the relay's log")

    # Forget: the tables empty, the form back, no more requests.
    click("#forget")
    wait_for(lambda: visible("login") and not visible("dash"), 5, "the form after forget")
    check(js("document.querySelectorAll('#dash tbody tr').length") == 0, "rows kept after forget")
    check("forgotten" in text("#login-msg"), "forget message %r" % text("#login-msg"))
    check(text("#conn") == "not connected", "conn line after forget %r" % text("#conn"))
    n_forgot = len(perf_log())
    check(severe() == [], "console errors at the end")
    env.daemons_alive(relay, m, oa)
    player.close()
    relay.stop()

    # ---- a tunnelled session: the server at home behind the agent ----
    from coapeer import AgentProc, Realm, TunnelRelay, skip_unless_ready
    skip_unless_ready("relay_admin_page")
    realm = Realm()
    trelay = TunnelRelay(env, [realm], pool_size=2, name="trelay", args=[
        "--listen", "127.0.0.1:0", "--server", "tunnel:" + realm.id])
    ln = trelay.wait_line(r"^(?:<\d>)?ready listen=(\S+) tunnel=", 5)
    front = parse_addr(ln.group(1))
    ag = AgentProc(env, "ws://%s:%d/relay/v1/host" % trelay.tunnel, realm,
                   ["--server", "%s:%d" % oa.addr], "agent")
    ag.wait_line(r"tunnel-udp-up", 10)
    tp = Player(env, front, "127.0.0.5")
    env.cleanups.append(tp.close)
    wait_for(lambda: len(tp.answers) >= 2, 15, "answers through the tunnel")
    turl = "http://%s:%d" % trelay.control
    drv.get(turl + "/")
    wait_for(lambda: js("document.readyState") == "complete", 10, "the tunnel relay's page")
    drv.find_element(By.ID, "token").send_keys(TOKEN)
    click("#connect")
    trow = "#sessions-body tr[data-ip='127.0.0.5']"
    wait_for(lambda: drv.find_elements(By.CSS_SELECTOR, trow), 15, "the tunnelled session's row")
    check("tunnelled" in text(trow + " td.state"), "tunnelled row %r" % text(trow))
    check(text("#f-server") == "tunnel:" + realm.id, "server fact %r" % text("#f-server"))
    check(severe() == [], "console errors on the tunnel relay's page")
    # Nothing went to the first relay after "Forget token" (its polls stopped).
    late = [e["params"]["request"]["url"] for e in perf_log()[n_forgot:]
            if e["method"] == "Network.requestWillBeSent" and
            e["params"]["request"]["url"].startswith(relay.url("/"))]
    check(late == [], "requests after forget: %r" % late)
    env.daemons_alive(trelay, ag, oa)


run(scenario)
