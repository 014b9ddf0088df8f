#!/usr/bin/env python3
"""The server-browser page in a real browser (Debian's chromium headless,
driven by python3-selenium through chromium-driver). First over urllib: GET /
with Accept: text/html and /index.html give the page with its CSP and
headers, /page.js and /page.css their types, a GET / without text/html is
still the netpunch list, /q3/servers the Q3 servers as JSON. Then in the
browser: a lobby named with markup, a normal one, a Q3 server (hostname and
map from its infoResponse) and a Fugitive server are shown; the hostile name
is literal text and no element came from it; no alert; no SEVERE console
entry; the filters hide and show rows; a lobby announced after load appears
on the page's own refresh; the layout holds at 360 and 1920 px (screenshots
in the test's log dir, copied to <build>/screenshots/)."""

import json
import os
import shutil
import time

from harness import FakeQ3Server, Master, check, chromium, http, http_raw, run, wait_for

HOSTILE = "<script>alert(1)</script><img src=x onerror=alert(2)>"
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
       "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


def announce(m, sid, name, players=1, mx=8):
    st, _, _ = m.call("POST", "/announce", body={
        "id": sid, "name": name, "code": "CODE" + sid.upper(), "players": players, "max": mx,
        "type": "host", "version": "0.6.1", "locked": False})
    check(st == 200, "announce %s -> %s" % (sid, st))


def http_checks(m):
    for path, hdrs in (("/", {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}),
                       ("/index.html", None)):
        st, data, h = http_raw("GET", m.url(path), headers=hdrs)
        check(st == 200 and b"<table" in data, "%s -> %s" % (path, st))
        check(h.get("Content-Type") == "text/html; charset=utf-8", "%s type %r" % (path, h))
        check(h.get("Content-Security-Policy") == CSP, "%s CSP %r" % (path, h.get(
            "Content-Security-Policy")))
        check(h.get("X-Content-Type-Options") == "nosniff", "%s nosniff" % path)
        check(h.get("Referrer-Policy") == "no-referrer", "%s referrer" % path)
        check(h.get("Cache-Control"), "%s no Cache-Control" % path)
        check(b"<script>" not in data and b"style=" not in data and b"<style" not in data,
              "%s has inline script or style" % path)
        check(b"http://" not in data and b"https://" not in data, "%s names another origin" % path)
    for path, typ in (("/page.js", "text/javascript; charset=utf-8"),
                      ("/page.css", "text/css; charset=utf-8")):
        st, data, h = http_raw("GET", m.url(path))
        check(st == 200 and h.get("Content-Type") == typ and
              h.get("X-Content-Type-Options") == "nosniff", "%s -> %s %r" % (path, st, h))
    check(b"innerHTML" not in http_raw("GET", m.url("/page.js"))[1], "page.js uses innerHTML")
    st, data, _ = http_raw("GET", m.url("/"))
    check(st == 200 and "servers" in json.loads(data), "GET / without text/html: %r" % data[:80])


def scenario(env):
    try:
        from selenium.webdriver.common.by import By
    except ImportError:
        check(False, "python3-selenium is missing: apt-get install python3-selenium "
              "chromium chromium-driver (tools/dev.sh installs them)")

    m = Master(env)
    announce(m, "evil", HOSTILE, 2, 8)
    announce(m, "good", "Friendly lobby", 8, 8)
    gs = FakeQ3Server(env, info={"protocol": "71", "sv_maxclients": "12", "clients": "3",
                                 "gamename": "Quake3Arena", "hostname": "^1Red ^7Arena",
                                 "mapname": "oa_dm1", "gametype": "0"})
    gs.heartbeat(m.udp_addr)
    m.wait_line(r"q3-listed server=127\.0\.0\.1:%d" % gs.addr[1], 5)
    st, q3, _ = m.call("GET", "/q3/servers")
    check(st == 200 and len(q3["servers"]) == 1, "/q3/servers: %s %r" % (st, q3))
    r = q3["servers"][0]
    check(r["address"] == "127.0.0.1:%d" % gs.addr[1] and r["hostname"] == "Red Arena" and
          r["map"] == "oa_dm1" and r["clients"] == 3 and r["maxclients"] == 12 and
          r["game"] == "Quake3Arena" and r["protocol"] == 71 and r["gametype"] == "0" and
          r["age"] >= 0, "/q3/servers row %r" % r)
    st, _, _ = http_raw("PUT", m.url("/servers/127.0.0.1:27999"), body=json.dumps({
        "name": "Fugitive night", "game_version": 3, "current_players": 0, "max_players": 8,
        "is_joinable": True}).encode(), headers={"Content-Type": "application/json"})
    check(st in (201, 202), "fugitive PUT -> %s" % st)
    http_checks(m)

    drv = chromium(env)
    drv.get(m.url("/"))
    rows = lambda tb: drv.find_elements(By.CSS_SELECTOR, "#%s tr.row" % tb)
    wait_for(lambda: len(rows("lobbies-body")) == 2 and len(rows("q3-body")) == 1 and
             len(rows("fug-body")) == 1, 15, "the rows")

    # The hostile name: literal text, no element made of it, no alert.
    # The list cuts names as the netpunch reference does: the page shows its value.
    listed = [x["name"] for x in m.call("GET", "/list")[1]["servers"] if x["code"] == "CODEEVIL"]
    check(listed and listed[0].startswith("<script>alert(1)</script><img"), "listed %r" % listed)
    names = [e.text for e in drv.find_elements(By.CSS_SELECTOR, "#lobbies-body td.name")]
    check(listed[0] in names, "hostile name not shown as text: %r" % names)
    check(drv.find_elements(By.CSS_SELECTOR, "main img, main script, #lobbies-body *:not(tr):not(td)")
          == [], "an element was made from data")
    check(len(drv.find_elements(By.TAG_NAME, "script")) == 1, "a script element was added")
    try:
        alert = drv.switch_to.alert.text
    except Exception:
        alert = None
    check(alert is None, "an alert opened: %r" % alert)
    q3row = rows("q3-body")[0].text
    check("Red Arena" in q3row and "oa_dm1" in q3row and "3 / 12" in q3row, "q3 row %r" % q3row)
    check("Fugitive night" in rows("fug-body")[0].text, "fugitive row")
    check("updated" in drv.find_element(By.ID, "updated").text, "no 'updated' line")

    # Filters.
    drv.find_element(By.ID, "lobbies-hide-full").click()
    wait_for(lambda: len(rows("lobbies-body")) == 1, 3, "hide full to hide the full lobby")
    drv.find_element(By.ID, "lobbies-hide-full").click()
    wait_for(lambda: len(rows("lobbies-body")) == 2, 3, "the full lobby back")
    drv.find_element(By.ID, "fug-hide-empty").click()
    wait_for(lambda: len(rows("fug-body")) == 0, 3, "hide empty (fugitive)")
    drv.find_element(By.ID, "fug-hide-empty").click()
    f = drv.find_element(By.ID, "filter")
    f.send_keys("oa_dm1")
    wait_for(lambda: len(rows("lobbies-body")) == 0 and len(rows("q3-body")) == 1, 3,
             "the search to keep only the map's server")
    f.clear()
    f.send_keys(" ")
    f.clear()
    drv.execute_script("document.getElementById('filter').dispatchEvent(new Event('input'))")
    wait_for(lambda: len(rows("lobbies-body")) == 2, 3, "the search cleared")

    # A lobby announced after load: the page's own refresh shows it.
    announce(m, "late", "Late lobby")
    wait_for(lambda: "Late lobby" in drv.execute_script(
        "return document.getElementById('lobbies-body').textContent"), 15,
             "the refresh to show the late lobby")

    # Layouts.
    for w, h in ((1920, 1080), (360, 800)):
        drv.set_window_size(w, h)
        wait_for(lambda: drv.execute_script("return window.innerWidth") <= w, 5, "resize")
        sw, iw = drv.execute_script("return [document.documentElement.scrollWidth, window.innerWidth]")
        check(sw <= iw + 2, "%dpx: the page scrolls sideways (%d > %d)" % (w, sw, iw))
        vis = drv.execute_script(
            "const r = document.querySelector('#lobbies-body tr.row').getBoundingClientRect();"
            "return [r.left, r.right, window.innerWidth];")
        check(vis[0] >= -1 and vis[1] <= vis[2] + 1, "%dpx: a lobby row is off screen %r" % (w, vis))
        shot = os.path.join(env.dir, "master_page_%d.png" % w)
        check(drv.save_screenshot(shot), "screenshot %s" % shot)
        keep = os.path.join(os.environ.get("RALLY_BUILD_DIR", env.dir), "screenshots")
        os.makedirs(keep, exist_ok=True)
        shutil.copy(shot, keep)
        env.log("screenshot %s (copy in %s)" % (shot, keep))

    sev = [e for e in drv.get_log("browser") if e.get("level") == "SEVERE"]
    check(sev == [], "console errors: %r" % sev)
    env.daemons_alive(m)


run(scenario)
