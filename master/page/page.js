// rally-master's server browser. Served as /page.js (CSP: script-src 'self').
// Every piece of data reaches the page through textContent or a property,
// never parsed as markup: a lobby named "<script>" is shown as that text.
'use strict';

const REFRESH_MS = 10000;
const state = { lobbies: null, q3: null, fug: null, updated: 0 };

function $(id) { return document.getElementById(id); }

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function ago(s) {
  s = Math.max(0, Math.floor(Number(s) || 0));
  if (s < 60) return s + ' s';
  if (s < 3600) return Math.floor(s / 60) + ' min';
  return Math.floor(s / 3600) + ' h';
}

function str(v) { return typeof v === 'string' ? v : (v === undefined || v === null ? '' : String(v)); }
function num(v) { const n = Number(v); return Number.isFinite(n) ? n : 0; }

// The text the search box matches against: every shown column.
function matches(q, fields) {
  if (!q) return true;
  return fields.some((f) => str(f).toLowerCase().includes(q));
}

function fillSelect(sel, values) {
  const keep = sel.value;
  const want = [''].concat(Array.from(new Set(values)).sort());
  const have = Array.from(sel.options).map((o) => o.value);
  if (want.length === have.length && want.every((v, i) => v === have[i])) return;
  while (sel.options.length > 1) sel.remove(1);
  for (const v of want.slice(1)) {
    const o = document.createElement('option');
    o.value = v;
    o.textContent = v;
    sel.appendChild(o);
  }
  sel.value = want.includes(keep) ? keep : '';
}

// rows: [{cells: [[label, text, cls]], cls}]; replaces the tbody's rows.
function render(prefix, rows, total, error) {
  const body = $(prefix + '-body');
  const frag = document.createDocumentFragment();
  for (const r of rows) {
    const tr = el('tr', null, 'row' + (r.cls ? ' ' + r.cls : ''));
    for (const [label, text, cls] of r.cells) {
      const td = el('td', text, cls);
      td.dataset.label = label;
      tr.appendChild(td);
    }
    frag.appendChild(tr);
  }
  body.replaceChildren(frag);
  const err = $(prefix + '-error');
  err.hidden = !error;
  err.textContent = error || '';
  $(prefix + '-count').textContent = total === null ? '' :
    (rows.length === total ? '(' + total + ')' : '(' + rows.length + ' of ' + total + ')');
  $(prefix + '-empty').hidden = error !== null || rows.length > 0;
  $(prefix + '-empty').textContent = total > 0 ? 'Nothing matches the filters.' :
    $(prefix + '-empty').dataset.none;
}

function drawLobbies(q) {
  const d = state.lobbies;
  if (!d.ok) { render('lobbies', [], null, d.error); return; }
  const list = d.rows;
  fillSelect($('lobbies-game'), list.map((l) => str(l.game)));
  const game = $('lobbies-game').value, hideFull = $('lobbies-hide-full').checked,
    hideLocked = $('lobbies-hide-locked').checked;
  const rows = [];
  for (const l of list) {
    const players = num(l.players), max = num(l.max), full = max > 0 && players >= max;
    if (game && str(l.game) !== game) continue;
    if (hideFull && full) continue;
    if (hideLocked && l.locked) continue;
    if (!matches(q, [l.name, l.game, l.type, l.code, l.version])) continue;
    rows.push({
      cls: full ? 'full' : '',
      cells: [['Name', str(l.name), 'name'], ['Game', str(l.game)],
        ['Players', players + ' / ' + max, 'num players'], ['Code', str(l.code), 'code'],
        ['Version', str(l.version)], ['Locked', l.locked ? 'yes' : 'no'], ['Age', ago(l.age), 'num']],
    });
  }
  render('lobbies', rows, list.length, null);
}

function drawQ3(q) {
  const d = state.q3;
  if (!d.ok) { render('q3', [], null, d.error); return; }
  const list = d.rows;
  fillSelect($('q3-game'), list.map((s) => str(s.game)));
  const game = $('q3-game').value, hideEmpty = $('q3-hide-empty').checked,
    hideFull = $('q3-hide-full').checked;
  const rows = [];
  for (const s of list) {
    const c = num(s.clients), max = num(s.maxclients), full = max > 0 && c >= max;
    if (game && str(s.game) !== game) continue;
    if (hideEmpty && c === 0) continue;
    if (hideFull && full) continue;
    if (!matches(q, [s.hostname, s.address, s.game, s.map, s.gametype])) continue;
    rows.push({
      cls: full ? 'full' : '',
      cells: [['Name', str(s.hostname) || '(unnamed)', 'name'], ['Address', str(s.address)],
        ['Game', str(s.game)], ['Map', str(s.map)], ['Players', c + ' / ' + max, 'num players'],
        ['Gametype', str(s.gametype)], ['Protocol', str(s.protocol), 'num'], ['Age', ago(s.age), 'num']],
    });
  }
  render('q3', rows, list.length, null);
}

function drawFug(q) {
  const d = state.fug;
  if (!d.ok) { render('fug', [], null, d.error); return; }
  const list = d.rows;
  const hideEmpty = $('fug-hide-empty').checked, joinable = $('fug-joinable').checked;
  const now = Date.now();
  const rows = [];
  for (const s of list) {
    const c = num(s.current_players), max = num(s.max_players), full = max > 0 && c >= max;
    const addr = str(s.ip) + ':' + str(s.port);
    if (hideEmpty && c === 0) continue;
    if (joinable && !s.is_joinable) continue;
    if (!matches(q, [s.name, addr, s.game_version])) continue;
    const seen = Date.parse(str(s.last_seen));
    rows.push({
      cls: full ? 'full' : '',
      cells: [['Name', str(s.name), 'name'], ['Address', addr], ['Players', c + ' / ' + max, 'num players'],
        ['Version', str(s.game_version), 'num'], ['Joinable', s.is_joinable ? 'yes' : 'no'],
        ['Last seen', Number.isFinite(seen) ? ago((now - seen) / 1000) + ' ago' : str(s.last_seen), 'num']],
    });
  }
  render('fug', rows, list.length, null);
}

function draw() {
  const q = $('filter').value.trim().toLowerCase();
  if (state.lobbies) drawLobbies(q);
  if (state.q3) drawQ3(q);
  if (state.fug) drawFug(q);
}

async function getJSON(path, pick) {
  try {
    const r = await fetch(path, { headers: { Accept: 'application/json' }, cache: 'no-store' });
    if (!r.ok) return { ok: false, error: path + ': HTTP ' + r.status };
    const rows = pick(await r.json());
    if (!Array.isArray(rows)) return { ok: false, error: path + ': unexpected answer' };
    return { ok: true, rows: rows.filter((x) => x !== null && typeof x === 'object') };
  } catch (e) {
    return { ok: false, error: path + ': ' + (e && e.message ? e.message : 'unreachable') };
  }
}

let busy = false;
async function refresh() {
  if (busy) return;
  busy = true;
  try {
    const [l, q, f] = await Promise.all([
      getJSON('/list', (j) => j && j.servers),
      getJSON('/q3/servers', (j) => j && j.servers),
      getJSON('/servers', (j) => j),
    ]);
    state.lobbies = l;
    state.q3 = q;
    state.fug = f;
    state.updated = Date.now();
    document.body.dataset.refreshes = String(num(document.body.dataset.refreshes) + 1);
    draw();
    tick();
  } finally {
    busy = false;
  }
}

function tick() {
  const u = $('updated');
  if (!state.updated) { u.textContent = 'loading…'; return; }
  u.textContent = 'updated ' + ago((Date.now() - state.updated) / 1000) + ' ago';
}

document.addEventListener('DOMContentLoaded', () => {
  for (const p of ['lobbies', 'q3', 'fug']) $(p + '-empty').dataset.none = $(p + '-empty').textContent;
  $('filter').addEventListener('input', draw);
  for (const id of ['lobbies-game', 'lobbies-hide-full', 'lobbies-hide-locked', 'q3-game',
    'q3-hide-empty', 'q3-hide-full', 'fug-hide-empty', 'fug-joinable']) {
    $(id).addEventListener('change', draw);
  }
  refresh();
  setInterval(refresh, REFRESH_MS);
  setInterval(tick, 1000);
});
