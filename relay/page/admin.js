// rally-relay's admin page. Served as /admin.js (CSP: script-src 'self').
//
// The bearer token lives in one variable of this closure and nowhere else:
// not in a URL, not in the browser's web storage or a cookie, not in the
// DOM (the field is emptied on submit). Every request sends it as an
// "Authorization: Bearer" header; "Forget token" or a 401 drops it, stops
// the polling and clears every table. Every piece of data reaches the page
// through textContent or an attribute, never parsed as markup: a ban reason
// "<img src=x onerror=alert(1)>" is shown as that text.
'use strict';

(() => {
  const POLL_MS = 5000;
  const BANS_MS = 30000; // /bans again at least this often; sooner when /status counts a change
  const WINDOW_MS = 10 * 60 * 1000; // the history kept for rates and sparklines
  const MAX_ROWS = 500;              // rows drawn per table; the filter narrows the rest
  const SVGNS = 'http://www.w3.org/2000/svg';
  const DROP_TEXT = {
    filtered: 'commands the filter refuses (rcon, unknown)',
    malformed: 'shorter than the out-of-band prefix',
    rate_limited: 'queries over the per-IP limit',
    query_budget: 'queries over the budget of all sources',
    banned: 'from a banned address',
    queue_full: 'session queue full',
    session_cap: 'no free session',
    send_error: 'send failed',
    kernel: 'dropped by the kernel (receive buffer full)',
  };

  let token = null;  // the bearer token: only here
  let gen = 0;       // bumped when the token changes: answers for an older one are dropped
  let busy = null;   // the gen of the poll in flight
  let again = false; // a poll was asked for while one was in flight
  let bansAt = -Infinity; // when /bans was last read (performance.now())
  let timer = null;
  let connected = false;
  let hist = [];     // [{t, v: Map(metric key -> value)}], the last WINDOW_MS of /metrics
  let status = null; // the last /status and when it came (performance.now())
  let statusAt = 0;
  let updatedAt = 0;
  let sessions = [];
  let bans = [];
  let prevTraffic = new Map(); // client -> {t, in, out}: per-session rates
  const rates = new Map();     // client -> {in, out} bytes/s

  class Unauthorized extends Error {}
  class Stale extends Error {}
  class ApiError extends Error {
    constructor(status, msg) {
      super(msg);
      this.status = status;
    }
  }

  function $(id) { return document.getElementById(id); }

  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }

  function str(v) { return typeof v === 'string' ? v : (v === undefined || v === null ? '' : String(v)); }
  function num(v) { const n = Number(v); return Number.isFinite(n) ? n : 0; }

  function dur(s) {
    s = Math.max(0, Math.floor(num(s)));
    if (s < 60) return s + ' s';
    if (s < 3600) return Math.floor(s / 60) + ' min ' + (s % 60) + ' s';
    if (s < 86400) return Math.floor(s / 3600) + ' h ' + Math.floor((s % 3600) / 60) + ' min';
    return Math.floor(s / 86400) + ' d ' + Math.floor((s % 86400) / 3600) + ' h';
  }

  function bytes(n) {
    n = num(n);
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i === 0 ? String(Math.round(n)) : n.toFixed(n < 10 ? 1 : 0)) + ' ' + units[i];
  }

  function pkts(n) { n = num(n); return n + (n === 1 ? ' pkt' : ' pkts'); }

  function rate(n, unit) {
    n = num(n);
    if (unit === 'B') return bytes(n) + '/s';
    if (n === 0) return '0/s';
    return (n < 10 ? n.toFixed(2) : n.toFixed(0)) + '/s';
  }

  // The relay's clock now, in s (ban times are the relay's wall clock).
  function serverNow() {
    if (!status) return Date.now() / 1000;
    return num(status.now) + (performance.now() - statusAt) / 1000;
  }

  function when(unix) {
    const d = new Date(num(unix) * 1000);
    const p = (x) => String(x).padStart(2, '0');
    return d.getFullYear() + '-' + p(d.getMonth() + 1) + '-' + p(d.getDate()) + ' ' +
      p(d.getHours()) + ':' + p(d.getMinutes());
  }

  // ---- the API ----

  async function api(method, path, body) {
    const g = gen;
    const headers = { Authorization: 'Bearer ' + token };
    headers.Accept = path === '/metrics' ? 'text/plain' : 'application/json';
    const init = {
      method, headers, cache: 'no-store', credentials: 'omit', redirect: 'error',
      referrerPolicy: 'no-referrer',
    };
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    const r = await fetch(path, init);
    const text = await r.text();
    if (g !== gen) throw new Stale('stale');
    if (r.status === 401) throw new Unauthorized('401');
    if (!r.ok) {
      let msg = '';
      try { msg = str(JSON.parse(text).error); } catch (e) { msg = ''; }
      throw new ApiError(r.status, msg || r.statusText || 'HTTP ' + r.status);
    }
    return { status: r.status, text };
  }

  async function getJSON(path) {
    const r = await api('GET', path);
    try {
      return JSON.parse(r.text);
    } catch (e) {
      throw new ApiError(r.status, path + ': not JSON');
    }
  }

  // ---- Prometheus text: name{label="value",...} value ----

  function metricKey(name, labels) {
    const ks = Object.keys(labels || {}).sort();
    return name + '{' + ks.map((k) => k + '=' + JSON.stringify(labels[k])).join(',') + '}';
  }

  function parseMetrics(text) {
    const values = new Map(), series = [];
    for (const line of text.split('\n')) {
      if (line === '' || line[0] === '#') continue;
      const m = /^[a-zA-Z_:][a-zA-Z0-9_:]*/.exec(line);
      if (!m) continue;
      const name = m[0], labels = {};
      let i = name.length, ok = true;
      if (line[i] === '{') {
        i++;
        while (ok && i < line.length && line[i] !== '}') {
          const lm = /^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"/.exec(line.slice(i));
          if (!lm) { ok = false; break; }
          i += lm[0].length;
          let v = '';
          while (i < line.length && line[i] !== '"') {
            if (line[i] === '\\' && i + 1 < line.length) {
              v += line[i + 1] === 'n' ? '\n' : line[i + 1];
              i += 2;
            } else {
              v += line[i++];
            }
          }
          if (line[i] !== '"') { ok = false; break; }
          i++;
          labels[lm[1]] = v;
          while (line[i] === ',' || line[i] === ' ') i++;
        }
        if (!ok || line[i] !== '}') continue;
        i++;
      }
      const v = Number(line.slice(i).trim().split(/\s+/)[0]);
      if (Number.isNaN(v) && !/^\s*NaN/.test(line.slice(i))) continue;
      const key = metricKey(name, labels);
      values.set(key, v);
      series.push({ name, labels, key });
    }
    return { values, series };
  }

  // Per-sample increments of a counter over the history: [{t, d, dt}]. A
  // value lower than the one before is a restart: the new value counts.
  function increments(key) {
    const out = [];
    for (let i = 1; i < hist.length; i++) {
      const a = hist[i - 1].v.get(key), b = hist[i].v.get(key);
      if (b === undefined) continue;
      const d = a === undefined ? 0 : (b >= a ? b - a : b);
      out.push({ t: hist[i].t, d, dt: (hist[i].t - hist[i - 1].t) / 1000 });
    }
    return out;
  }

  function sumIncrements(keys) {
    let total = 0;
    for (const k of keys) for (const x of increments(k)) total += x.d;
    return total;
  }

  // Points [{t, y}] for a sparkline: rates (per s) of counters, or gauges.
  function ratePoints(keys) {
    const by = new Map();
    for (const k of keys) {
      for (const x of increments(k)) {
        const p = by.get(x.t) || { t: x.t, y: 0 };
        p.y += x.dt > 0 ? x.d / x.dt : 0;
        by.set(x.t, p);
      }
    }
    return Array.from(by.values()).sort((a, b) => a.t - b.t);
  }

  function countPoints(keys) {
    const by = new Map();
    for (const k of keys) {
      for (const x of increments(k)) {
        const p = by.get(x.t) || { t: x.t, y: 0 };
        p.y += x.d;
        by.set(x.t, p);
      }
    }
    return Array.from(by.values()).sort((a, b) => a.t - b.t);
  }

  function gaugePoints(key) {
    return hist.filter((h) => h.v.has(key)).map((h) => ({ t: h.t, y: h.v.get(key) }));
  }

  // An SVG sparkline over the history kept (at most WINDOW_MS): a line
  // (rates, gauges) or bars (events such as heartbeats). Attributes only:
  // no inline style.
  function spark(points, bars, what) {
    const W = 120, H = 28;
    const t1 = hist.length ? hist[hist.length - 1].t : performance.now();
    const t0 = hist.length > 1 ? hist[0].t : t1 - POLL_MS;
    const svg = document.createElementNS(SVGNS, 'svg');
    svg.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
    svg.setAttribute('preserveAspectRatio', 'none');
    svg.setAttribute('class', 'spark' + (bars ? ' bars' : ''));
    svg.setAttribute('role', 'img');
    const max = points.reduce((m, p) => Math.max(m, p.y), 0);
    const label = what + (max > 0 ? ', peak ' + (bars ? String(max) : rate(max, what.startsWith('bytes') ? 'B' : '')) : ', none') +
      ' in the last ' + dur((t1 - t0) / 1000);
    svg.setAttribute('aria-label', label);
    const title = document.createElementNS(SVGNS, 'title');
    title.textContent = label;
    svg.appendChild(title);
    const base = document.createElementNS(SVGNS, 'line');
    base.setAttribute('x1', '0');
    base.setAttribute('x2', String(W));
    base.setAttribute('y1', String(H - 0.5));
    base.setAttribute('y2', String(H - 0.5));
    base.setAttribute('class', 'base');
    svg.appendChild(base);
    const x = (t) => Math.max(0, Math.min(W, ((t - t0) / (t1 - t0)) * W));
    const y = (v) => (max > 0 ? H - 1 - (v / max) * (H - 3) : H - 1);
    if (bars) {
      for (const p of points) {
        if (p.y <= 0) continue;
        const r = document.createElementNS(SVGNS, 'rect');
        r.setAttribute('x', (x(p.t) - 1.5).toFixed(1));
        r.setAttribute('width', '3');
        r.setAttribute('y', y(p.y).toFixed(1));
        r.setAttribute('height', (H - y(p.y)).toFixed(1));
        svg.appendChild(r);
      }
    } else if (points.length > 0) {
      const pl = document.createElementNS(SVGNS, 'polyline');
      pl.setAttribute('points', points.map((p) => x(p.t).toFixed(1) + ',' + y(p.y).toFixed(1)).join(' '));
      svg.appendChild(pl);
    }
    svg.dataset.peak = String(max);
    return svg;
  }

  // ---- drawing ----

  function cell(tr, label, content, cls) {
    const td = el('td', null, cls);
    td.dataset.label = label;
    if (content instanceof Node) td.appendChild(content);
    else td.textContent = str(content);
    tr.appendChild(td);
    return td;
  }

  function tag(text, cls) { return el('span', text, 'tag ' + cls); }

  function drawFacts() {
    if (!status) return;
    $('f-listen').textContent = str(status.listen) || '(no game port)';
    $('f-server').textContent = str(status.server) || '(none)';
    const up = status.server_up;
    $('f-up').textContent = up === true ? 'yes' : up === false ? 'no' : 'not probed (no heartbeats)';
    $('f-up').className = up === false ? 'bad' : '';
    $('f-version').textContent = str(status.version);
    $('f-uptime').textContent = dur(num(status.uptime_s) + (performance.now() - statusAt) / 1000);
  }

  function tile(label, value, svg) {
    const d = el('div', null, 'tile');
    d.appendChild(el('span', label, 'label'));
    d.appendChild(el('span', value, 'value'));
    if (svg) d.appendChild(svg);
    return d;
  }

  function drawTiles() {
    const last = hist.length ? hist[hist.length - 1].v : new Map();
    const k = (n, l) => metricKey(n, l);
    const sess = k('rally_relay_sessions', {});
    const bIn = k('rally_relay_bytes_total', { direction: 'to_server' });
    const bOut = k('rally_relay_bytes_total', { direction: 'to_client' });
    const unauth = k('rally_relay_control_unauthorized_total', {});
    const rIn = ratePoints([bIn]), rOut = ratePoints([bOut]);
    const cur = (p) => (p.length ? p[p.length - 1].y : 0);
    const frag = document.createDocumentFragment();
    frag.appendChild(tile('Sessions', num(last.get(sess)) + ' / ' + num(status && status.max_sessions),
      spark(gaugePoints(sess), false, 'sessions')));
    frag.appendChild(tile('To server', rate(cur(rIn), 'B'), spark(rIn, false, 'bytes to server')));
    frag.appendChild(tile('To client', rate(cur(rOut), 'B'), spark(rOut, false, 'bytes to client')));
    frag.appendChild(tile('Bans', num(status && status.bans) + ' / ' + num(status && status.max_bans), null));
    frag.appendChild(tile('Refused tokens', String(num(last.get(unauth))) + ' total',
      spark(countPoints([unauth]), true, 'refused control requests')));
    // The query cache's attack mode (relay_qcache.c), when the relay has one.
    const atk = k('rally_relay_attack_mode', {});
    const pps = k('rally_relay_unverified_pps', {});
    const known = k('rally_relay_known_players', {});
    if (last.has(atk)) {
      frag.appendChild(tile('Attack mode', (num(last.get(atk)) ? 'ON' : 'off') + ', ' +
        num(last.get(pps)) + ' unverified/s, ' + num(last.get(known)) + ' known players',
      spark(gaugePoints(pps), false, 'unverified datagrams per second')));
    }
    $('tiles').replaceChildren(frag);
  }

  // Puts the rows in place; matched counts the rows the filter kept, of
  // which at most MAX_ROWS were drawn.
  function render(prefix, rows, total, matched) {
    $(prefix + '-body').replaceChildren(rows);
    const shown = Math.min(matched, MAX_ROWS);
    $(prefix + '-count').textContent = shown === total ? '(' + total + ')' :
      '(' + shown + ' of ' + total + (matched > MAX_ROWS ? '; the filter narrows them' : '') + ')';
    const empty = $(prefix + '-empty');
    empty.hidden = shown > 0;
    empty.textContent = total > 0 ? 'Nothing matches the filter.' : empty.dataset.none;
  }

  function drawSessions() {
    const q = $('sessions-filter').value.trim().toLowerCase();
    const frag = document.createDocumentFragment();
    let matched = 0;
    for (const s of sessions) {
      const client = str(s.client), up = num(s.upstream_port);
      if (q && !(client.toLowerCase().includes(q) || String(up).includes(q))) continue;
      if (++matched > MAX_ROWS) continue;
      const ts = s.to_server || {}, tc = s.to_client || {}, r = rates.get(client) || { in: 0, out: 0 };
      const tr = el('tr', null, 'row');
      tr.dataset.client = client;
      tr.dataset.ip = str(s.client_ip);
      cell(tr, 'Client', client, 'addr');
      cell(tr, 'Upstream port', s.tunnelled && !up ? '–' : up, 'num');
      cell(tr, 'To server', bytes(ts.bytes) + ' · ' + pkts(ts.packets) + ' · ' + rate(r.in, 'B'), 'num traffic-in');
      cell(tr, 'To client', bytes(tc.bytes) + ' · ' + pkts(tc.packets) + ' · ' + rate(r.out, 'B'), 'num traffic-out');
      cell(tr, 'Age', dur(num(s.age_ms) / 1000), 'num');
      cell(tr, 'Idle', dur(num(s.idle_ms) / 1000), 'num');
      const st = el('span', null, 'tags');
      if (s.tunnelled) st.appendChild(tag('tunnelled', 'tunnel'));
      if (s.transparent) st.appendChild(tag('transparent', 'ok'));
      st.appendChild(s.confirmed ? tag('confirmed', 'ok') : tag('unconfirmed', 'warn'));
      if (num(s.queued) > 0) st.appendChild(tag('queued ' + num(s.queued), 'warn'));
      cell(tr, 'State', st, 'state');
      const b = el('button', 'Ban…', 'ban');
      b.type = 'button';
      b.dataset.ip = str(s.client_ip);
      b.setAttribute('aria-label', 'Ban ' + str(s.client_ip));
      cell(tr, '', b, 'act');
      frag.appendChild(tr);
    }
    render('sessions', frag, sessions.length, matched);
  }

  function drawBans() {
    const q = $('bans-filter').value.trim().toLowerCase();
    const now = serverNow();
    const frag = document.createDocumentFragment();
    let matched = 0;
    for (const b of bans) {
      const ip = str(b.ip), reason = str(b.reason);
      if (q && !(ip.toLowerCase().includes(q) || reason.toLowerCase().includes(q))) continue;
      if (++matched > MAX_ROWS) continue;
      const tr = el('tr', null, 'row');
      tr.dataset.ip = ip;
      cell(tr, 'IP address', ip, 'addr');
      cell(tr, 'Reason', reason, 'reason');
      cell(tr, 'Since', when(b.created), 'num');
      cell(tr, 'Expires', b.expires === null || b.expires === undefined ? 'never' :
        'in ' + dur(num(b.expires) - now) + ' (' + when(b.expires) + ')', 'num expires');
      const btn = el('button', 'Remove', 'remove');
      btn.type = 'button';
      btn.dataset.ip = ip;
      btn.setAttribute('aria-label', 'Remove the ban on ' + ip);
      cell(tr, '', btn, 'act');
      frag.appendChild(tr);
    }
    render('bans', frag, bans.length, matched);
  }

  function windowText() {
    if (hist.length < 2) return '(collecting: rates need two samples)';
    const span = (hist[hist.length - 1].t - hist[0].t) / 1000;
    return '(last ' + dur(span) + ', every ' + POLL_MS / 1000 + ' s)';
  }

  function drawDrops() {
    if (!hist.length) return;
    const last = hist[hist.length - 1];
    const keys = [];
    for (const [k] of last.v) {
      const m = /^rally_relay_drops_total\{reason="([^"]*)"\}$/.exec(k);
      if (m) keys.push([m[1], k]);
    }
    const kern = metricKey('rally_relay_kernel_drops_total', {});
    if (last.v.has(kern)) keys.push(['kernel', kern]);
    const frag = document.createDocumentFragment();
    for (const [reason, k] of keys) {
      const pts = ratePoints([k]);
      const inWin = sumIncrements([k]);
      const tr = el('tr', null, 'row' + (inWin > 0 ? ' active' : ''));
      tr.dataset.reason = reason;
      const name = el('span', null, 'reason-name');
      name.appendChild(el('span', reason, 'code'));
      name.appendChild(el('span', DROP_TEXT[reason] || '', 'desc'));
      cell(tr, 'Reason', name, 'reason');
      cell(tr, 'Total', num(last.v.get(k)), 'num total');
      cell(tr, 'In window', inWin, 'num window');
      cell(tr, 'Now', rate(pts.length ? pts[pts.length - 1].y : 0, ''), 'num');
      cell(tr, 'History', spark(pts, false, 'drops ' + reason), 'chart');
      frag.appendChild(tr);
    }
    $('drops-body').replaceChildren(frag);
    $('drops-window').textContent = windowText();
  }

  /* The listing check's row for a master (GET /status "listing"). */
  /* A master's rows of the listing check, one per address family. */
  function listingOf(name) {
    const ms = status && status.listing && Array.isArray(status.listing.masters) ? status.listing.masters : [];
    return ms.filter((x) => x && typeof x === 'object' && str(x.master) === name);
  }

  function drawMasters() {
    const list = status && status.heartbeat && Array.isArray(status.heartbeat.masters) ? status.heartbeat.masters : [];
    const now = serverNow();
    const frag = document.createDocumentFragment();
    for (const m of list) {
      if (!m || typeof m !== 'object') continue;
      const name = str(m.master);
      const ks = ['heartbeat', 'flatline', 'resolve_error', 'send_error'].map((o) =>
        metricKey('rally_relay_heartbeats_total', { master: name, outcome: o }));
      const tr = el('tr', null, 'row');
      tr.dataset.master = name;
      const who = el('span', null, 'master-name');
      who.appendChild(el('span', name, 'code'));
      if (m.address && str(m.address) !== name) who.appendChild(el('span', str(m.address), 'desc'));
      cell(tr, 'Master', who, 'addr');
      const lastCell = m.last_attempt ? dur(now - num(m.last_attempt)) + ' ago · ' + str(m.last_outcome) : 'not yet';
      cell(tr, 'Last', lastCell, 'num' + (m.last_outcome && m.last_outcome !== 'heartbeat' ? ' bad' : ''));
      cell(tr, 'Heartbeats', num(m.heartbeats), 'num heartbeats');
      cell(tr, 'Flatlines', num(m.flatlines), 'num');
      cell(tr, 'Errors', num(m.resolve_errors) + num(m.send_errors), 'num');
      cell(tr, "Master's queries", num(m.queries), 'num queries');
      const rows = listingOf(name);
      let lcls = 'listed';
      const parts = rows.map((l) => {
        const fam = rows.length > 1 ? str(l.family) + ' ' : '';
        if (l.listed === true) return fam + 'yes' + (l.weak ? ' (port only)' : '') + ' · ' + dur(now - num(l.since));
        if (l.listed === false) {
          lcls = 'listed bad';
          return fam + 'no · ' + str(l.outcome) + ' · ' + dur(now - num(l.since));
        }
        return fam + 'not checked yet';
      });
      cell(tr, 'Listed', parts.length ? parts.join(' / ') : 'not checked yet', lcls);
      cell(tr, 'In window', sumIncrements(ks), 'num window');
      cell(tr, 'History', spark(countPoints(ks), true, 'heartbeats to ' + name), 'chart');
      frag.appendChild(tr);
    }
    $('masters-body').replaceChildren(frag);
    $('masters-empty').hidden = list.length > 0;
    const iv = status && status.heartbeat ? num(status.heartbeat.interval_s) : 0;
    $('masters-window').textContent = list.length ? '(every ' + dur(iv) + ', tag ' +
      str(status.heartbeat.tag) + ') ' + windowText() : '';
  }

  function draw() {
    drawFacts();
    drawTiles();
    drawSessions();
    drawBans();
    drawDrops();
    drawMasters();
    tick();
  }

  function tick() {
    const c = $('conn');
    if (!token) { c.textContent = 'not connected'; return; }
    if (!connected) { c.textContent = 'connecting…'; return; }
    c.textContent = 'connected · updated ' + dur((performance.now() - updatedAt) / 1000) + ' ago';
    drawFacts();
  }

  function showError(id, msg, cls) {
    const e = $(id);
    e.hidden = !msg;
    e.textContent = msg || '';
    if (cls !== undefined) e.className = cls;
  }

  // ---- polling ----

  // One refresh: /status, /sessions and /metrics, and /bans when /status
  // counts a different number of bans, after a change made here, or every
  // BANS_MS (16,384 bans are megabytes: not every 5 s).
  async function poll(forceBans) {
    if (forceBans) bansAt = -Infinity;
    if (!token) return;
    if (busy === gen) { again = true; return; }
    const g = gen;
    busy = g;
    try {
      const [st, se, me] = await Promise.all([
        getJSON('/status'), getJSON('/sessions'), api('GET', '/metrics')]);
      if (!Array.isArray(se) || !st || typeof st !== 'object') {
        throw new ApiError(200, 'unexpected answer');
      }
      let ba = null;
      if (performance.now() - bansAt >= BANS_MS || num(st.bans) !== bans.length) {
        ba = await getJSON('/bans');
        if (!Array.isArray(ba)) throw new ApiError(200, 'unexpected answer');
        bansAt = performance.now();
      }
      const now = performance.now();
      status = st;
      statusAt = now;
      sessions = se.filter((x) => x && typeof x === 'object');
      if (ba) bans = ba.filter((x) => x && typeof x === 'object');
      const next = new Map();
      for (const s of sessions) {
        const c = str(s.client), bin = num(s.to_server && s.to_server.bytes), bout = num(s.to_client && s.to_client.bytes);
        const p = prevTraffic.get(c);
        const dt = p ? (now - p.t) / 1000 : 0;
        rates.set(c, p && dt > 0 ? { in: Math.max(0, bin - p.in) / dt, out: Math.max(0, bout - p.out) / dt } : { in: 0, out: 0 });
        next.set(c, { t: now, in: bin, out: bout });
      }
      for (const c of rates.keys()) if (!next.has(c)) rates.delete(c);
      prevTraffic = next;
      hist.push({ t: now, v: parseMetrics(me.text).values });
      while (hist.length > 2 && now - hist[0].t > WINDOW_MS) hist.shift();
      updatedAt = now;
      if (!connected) {
        connected = true;
        $('login').hidden = true;
        $('dash').hidden = false;
        $('actions').hidden = false;
        showError('login-msg', '');
      }
      showError('dash-error', '');
      document.body.dataset.polls = String(num(document.body.dataset.polls) + 1);
      draw();
    } catch (e) {
      if (e instanceof Stale || g !== gen) return;
      if (e instanceof Unauthorized) {
        logout('The relay refused this token (HTTP 401). Enter the contents of its --token-file.', 'error');
        return;
      }
      const msg = e instanceof ApiError ? 'HTTP ' + e.status + ': ' + e.message :
        'the relay did not answer (' + (e && e.message ? e.message : 'network error') + ')';
      if (!connected) {
        logout('Could not connect: ' + msg, 'error');
      } else {
        showError('dash-error', 'Refresh failed: ' + msg + '. Trying again every ' + POLL_MS / 1000 + ' s.');
      }
    } finally {
      if (busy === g) {
        busy = null;
        if (again && token) {
          again = false;
          poll();
        }
      }
    }
  }

  function login(value) {
    token = value;
    gen++;
    connected = false;
    again = false;
    bansAt = -Infinity;
    bans = [];
    hist = [];
    prevTraffic = new Map();
    rates.clear();
    tick();
    clearInterval(timer);
    timer = setInterval(() => poll(false), POLL_MS);
    poll(true);
  }

  // Drops the token and everything it showed.
  function logout(msg, cls) {
    token = null;
    gen++;
    connected = false;
    clearInterval(timer);
    timer = null;
    status = null;
    sessions = [];
    bans = [];
    hist = [];
    prevTraffic = new Map();
    rates.clear();
    for (const id of ['sessions-body', 'bans-body', 'drops-body', 'masters-body', 'tiles']) $(id).replaceChildren();
    for (const id of ['f-listen', 'f-server', 'f-up', 'f-version', 'f-uptime']) $(id).textContent = '–';
    showError('ban-msg', '');
    showError('dash-error', '');
    $('dash').hidden = true;
    $('actions').hidden = true;
    $('login').hidden = false;
    showError('login-msg', msg, cls);
    tick();
    $('token').focus();
  }

  // ---- actions ----

  const IP_RE = /^[0-9A-Fa-f.:]{2,45}$/;

  async function addBan(ev) {
    ev.preventDefault();
    const ip = $('ban-ip').value.trim(), reason = $('ban-reason').value;
    const unit = num($('ban-unit').value), n = Number($('ban-duration').value);
    if (!IP_RE.test(ip)) {
      showError('ban-msg', 'Not an IP address: ' + ip, 'note error');
      return;
    }
    if (new TextEncoder().encode(reason).length > 256) {
      showError('ban-msg', 'The reason is longer than 256 bytes.', 'note error');
      return;
    }
    const body = { reason };
    if (unit > 0) {
      if (!Number.isInteger(n) || n < 1) {
        showError('ban-msg', 'The duration is a whole number, 1 or more.', 'note error');
        return;
      }
      body.duration = n * unit;
    }
    $('ban-add').disabled = true;
    try {
      const r = await api('PUT', '/bans/' + ip, body);
      let b = {};
      try { b = JSON.parse(r.text); } catch (e) { b = {}; }
      const closed = num(b.sessions_closed);
      showError('ban-msg', (r.status === 201 ? 'Banned ' : 'Ban updated: ') + str(b.ip || ip) +
        (unit > 0 ? ' for ' + dur(body.duration) : ', permanently') + '; ' + closed +
        (closed === 1 ? ' session' : ' sessions') + ' closed.', 'note ok');
      $('ban-ip').value = '';
      $('ban-reason').value = '';
      await poll(true);
    } catch (e) {
      if (e instanceof Stale) return;
      if (e instanceof Unauthorized) {
        logout('The relay refused this token (HTTP 401). Enter the contents of its --token-file.', 'error');
        return;
      }
      showError('ban-msg', 'Ban refused: ' + (e instanceof ApiError ? 'HTTP ' + e.status + ': ' + e.message :
        'the relay did not answer'), 'note error');
    } finally {
      $('ban-add').disabled = false;
    }
  }

  async function removeBan(ip, btn) {
    if (!IP_RE.test(ip)) return;
    btn.disabled = true;
    try {
      await api('DELETE', '/bans/' + ip);
      showError('ban-msg', 'Ban on ' + ip + ' lifted.', 'note ok');
      await poll(true);
    } catch (e) {
      if (e instanceof Stale) return;
      if (e instanceof Unauthorized) {
        logout('The relay refused this token (HTTP 401). Enter the contents of its --token-file.', 'error');
        return;
      }
      showError('ban-msg', 'Could not lift the ban on ' + ip + ': ' + (e instanceof ApiError ?
        'HTTP ' + e.status + ': ' + e.message : 'the relay did not answer'), 'note error');
      btn.disabled = false;
    }
  }

  document.addEventListener('DOMContentLoaded', () => {
    for (const p of ['sessions', 'bans']) $(p + '-empty').dataset.none = $(p + '-empty').textContent;
    $('login-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const input = $('token');
      const v = input.value.trim();
      input.value = '';
      // What the relay accepts (relay_token_load): printable ASCII, no spaces.
      if (!/^[\x21-\x7e]+$/.test(v)) {
        showError('login-msg', 'A token is printable ASCII without spaces.', 'error');
        return;
      }
      login(v);
    });
    $('forget').addEventListener('click', () => logout('Token forgotten.', 'note'));
    $('refresh').addEventListener('click', () => poll(true));
    $('ban-form').addEventListener('submit', addBan);
    $('ban-unit').addEventListener('change', () => { $('ban-duration').disabled = $('ban-unit').value === '0'; });
    $('sessions-filter').addEventListener('input', drawSessions);
    $('bans-filter').addEventListener('input', drawBans);
    $('sessions-body').addEventListener('click', (ev) => {
      const b = ev.target.closest('button.ban');
      if (!b) return;
      $('ban-ip').value = b.dataset.ip;
      $('ban-form').scrollIntoView({ block: 'nearest' });
      $('ban-reason').focus();
    });
    $('bans-body').addEventListener('click', (ev) => {
      const b = ev.target.closest('button.remove');
      if (b) removeBan(b.dataset.ip, b);
    });
    setInterval(tick, 1000);
    tick();
    $('token').focus();
  });
})();
