// cordon's dashboard. Everything shown comes from sessions' logs, written about (and partly
// by) an untrusted sandbox: it is only ever set as text (textContent, text nodes, attribute
// values), never parsed as markup.
'use strict';

const TOKEN = document.documentElement.dataset.token;
const MAX_EVENTS = 2000;
const SETUP = new Set(['apply', 'start', 'stop', 'exit', 'log']);
// Layers whose events describe how the sandbox was built (masks, variables), not what it did.
const SETUP_LAYERS = new Set(['filesystem', 'env']);
const LAYERS = ['session', 'filesystem', 'process', 'landlock', 'env', 'limits', 'terminal',
  'network', 'dns', 'http', 'syscall', 'exec', 'credentials', 'state'];
const ACTIONS = ['allow', 'deny', 'ask', 'error', 'degraded', 'apply', 'start', 'exit', 'stop', 'log'];
const SUBJECT = ['url', 'command', 'cmdline', 'program', 'name', 'host', 'path', 'var', 'syscall',
  'limit', 'what'];

const $ = (id) => document.getElementById(id);
const sessions = new Map(); // id -> summary from the server
let events = []; // newest last
let seen = new Set(); // session#seq already shown

function el(tag, cls, ...kids) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return e;
}

function api(path, params) {
  const q = new URLSearchParams(params || {});
  q.set('token', TOKEN);
  return path + '?' + q.toString();
}

function note(text) {
  $('note').textContent = text;
}

async function post(path, body) {
  const r = await fetch(api(path), {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
    credentials: 'omit',
  });
  let data = {};
  try { data = await r.json(); } catch (_) { /* not JSON: report the status */ }
  if (!r.ok || data.ok === false) throw new Error(data.error || ('HTTP ' + r.status));
  return data;
}

function short(id) {
  return id.length > 17 ? id.slice(9, 15) + '…' + id.slice(-4) : id;
}

function subject(ev) {
  const d = ev.detail || {};
  for (const k of SUBJECT) {
    if (d[k] !== undefined) {
      const v = Array.isArray(d[k]) ? d[k].join(' ') : String(d[k]);
      return (d.method && k === 'url' ? d.method + ' ' : '') + v +
        (k === 'host' && d.port !== undefined ? ':' + d.port : '');
    }
  }
  return '';
}

// ---- events ------------------------------------------------------------------------------

function passes(ev) {
  const s = $('f-session').value, l = $('f-layer').value, a = $('f-action').value;
  const t = $('f-text').value.trim().toLowerCase();
  if (s && ev.session !== s) return false;
  if (l && ev.layer !== l) return false;
  if (a && ev.action !== a) return false;
  if (!a && !l && !$('f-noise').checked && ev.layer !== 'session' &&
      (SETUP.has(ev.action) || SETUP_LAYERS.has(ev.layer))) return false;
  if (t) {
    const hay = [ev.reason, ev.rule || '', JSON.stringify(ev.detail || {})].join(' ').toLowerCase();
    if (!hay.includes(t)) return false;
  }
  return true;
}

function row(ev) {
  const tr = el('tr', 'event a-' + ev.action);
  tr.dataset.session = ev.session;
  tr.dataset.layer = ev.layer;
  tr.dataset.action = ev.action;
  const what = subject(ev);
  tr.append(
    el('td', '', (ev.time || '').slice(11, 23)),
    el('td', '', short(ev.session)),
    el('td', '', ev.layer),
    el('td', 'a-' + ev.action, ev.action),
    el('td', 'what', what && !ev.reason.includes(what) ? what + ' — ' + ev.reason : ev.reason),
    el('td', '', ev.rule || ''),
  );
  tr.title = ev.session + ' #' + ev.seq;
  return tr;
}

function renderEvents() {
  const body = $('events');
  const rows = [];
  for (let i = events.length - 1; i >= 0 && rows.length < 500; i--) {
    if (passes(events[i])) rows.push(row(events[i]));
  }
  body.replaceChildren(...rows);
}

function addEvent(ev, live) {
  const key = ev.session + '#' + ev.seq;
  if (seen.has(key)) return;
  seen.add(key);
  events.push(ev);
  if (events.length > MAX_EVENTS) {
    const gone = events.splice(0, events.length - MAX_EVENTS);
    for (const g of gone) seen.delete(g.session + '#' + g.seq);
  }
  if (live && passes(ev)) {
    const body = $('events');
    body.prepend(row(ev));
    while (body.childElementCount > 500) body.lastElementChild.remove();
  }
}

// ---- sessions ----------------------------------------------------------------------------

const SVG = 'http://www.w3.org/2000/svg';

function svg(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  return e;
}

// Stacked bars per bucket: allow (bottom), deny, ask.
function timeline(stats) {
  const W = 600, H = 70;
  const root = svg('svg', { class: 'timeline', viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: 'none' });
  const tl = stats.timeline || [];
  const title = svg('title', {});
  title.textContent = 'decisions per ' + stats.bucket_secs + ' s: allow, deny, ask';
  root.append(title);
  if (!tl.length) return root;
  const span = Math.max(tl[tl.length - 1][0] + stats.bucket_secs, 60);
  const top = Math.max(1, ...tl.map((b) => b[1] + b[2] + b[3]));
  const bw = Math.max(2, (W * stats.bucket_secs) / span - 1);
  for (const [t, a, d, q] of tl) {
    const x = (W * t) / span;
    let y = H;
    for (const [n, cls] of [[a, 'allow'], [d, 'deny'], [q, 'ask']]) {
      if (!n) continue;
      const h = ((H - 4) * n) / top;
      y -= h;
      const r = svg('rect', { x, y, width: bw, height: h, class: 'bar-' + cls });
      const tip = svg('title', {});
      tip.textContent = `${t}s: ${n} ${cls}`;
      r.append(tip);
      root.append(r);
    }
  }
  return root;
}

function bytes(n) {
  if (n < 1024) return n + ' B';
  if (n < 1 << 20) return (n / 1024).toFixed(1) + ' KiB';
  return (n / (1 << 20)).toFixed(1) + ' MiB';
}

function card(s) {
  const st = s.stats;
  const c = el('div', 'session');
  c.dataset.session = s.id;
  c.dataset.ended = String(s.ended);
  c.dataset.up = String(st.bytes_up);
  c.dataset.down = String(st.bytes_down);
  c.append(el('div', 'title', s.id, ' ', el('span', s.ended ? 'ended' : 'a-allow', s.ended ? 'ended' : 'running')));
  const num = (label, v) => el('span', '', label + ' ', el('b', '', v));
  const judge = st.judge_calls
    ? `${st.judge_calls} (mean ${st.judge_ms_mean ?? '?'} ms, max ${st.judge_ms_max ?? '?'} ms)`
    : '0';
  c.append(el('div', 'nums',
    num('up', bytes(st.bytes_up)), num('down', bytes(st.bytes_down)),
    num('judge calls', judge),
    num('exec', `${st.exec_allow} allowed / ${st.exec_deny} denied`),
    num('dns', `${st.dns_allow} answered / ${st.dns_deny} refused`)));
  c.append(timeline(st));
  const last = st.timeline.length ? st.timeline[st.timeline.length - 1][0] + st.bucket_secs : 0;
  c.append(el('div', 'meta', `decisions per ${st.bucket_secs} s since the session started ` +
    `(${Math.max(last, 60)} s shown): allow green, deny red, ask amber`));
  const t = el('table', 'hosts');
  t.append(el('thead', '', el('tr', '', el('th', '', 'host'), el('th', 'a-allow', 'allow'),
    el('th', 'a-deny', 'deny'), el('th', 'a-ask', 'ask'), el('th', 'bytes', 'up'),
    el('th', 'bytes', 'down'))));
  const tb = el('tbody');
  for (const h of st.hosts.slice(0, 20)) {
    const tr = el('tr', 'host-row', el('td', '', h.host), el('td', 'a-allow', h.allow),
      el('td', 'a-deny', h.deny), el('td', 'a-ask', h.ask),
      el('td', 'bytes up', bytes(h.bytes_up || 0)), el('td', 'bytes down', bytes(h.bytes_down || 0)));
    tr.dataset.host = h.host;
    tr.dataset.up = String(h.bytes_up || 0);
    tr.dataset.down = String(h.bytes_down || 0);
    tb.append(tr);
  }
  t.append(tb);
  c.append(t);
  return c;
}

function renderSessions() {
  const list = [...sessions.values()].sort((a, b) => (b.start || '').localeCompare(a.start || ''));
  $('sessions').replaceChildren(...list.map(card));
  $('sessions-empty').hidden = list.length > 0;
  const sel = $('f-session'), keep = sel.value;
  const opts = [new Option('all', '')];
  for (const s of list) opts.push(new Option(s.id + (s.ended ? ' (ended)' : ''), s.id));
  sel.replaceChildren(...opts);
  sel.value = list.some((s) => s.id === keep) ? keep : '';
}

// ---- approvals ---------------------------------------------------------------------------

function renderApprovals(list) {
  $('approvals-count').textContent = String(list.length);
  $('approvals-empty').hidden = list.length > 0;
  $('approvals').replaceChildren(...list.map((q) => {
    const li = el('li', 'approval');
    // Counted down here: the list is only resent when questions come or go.
    const left = el('span', 'left', `${q.seconds_left} s left`);
    left.dataset.deadline = String(Date.now() + q.seconds_left * 1000);
    li.dataset.session = q.session;
    li.dataset.id = String(q.id);
    li.append(
      el('div', 'what', q.what),
      el('div', 'meta', `[${q.layer}] rule ${q.rule} · ${q.session}#${q.id} · `,
        left),
    );
    const answer = (allow, remember) => async (e) => {
      for (const b of li.querySelectorAll('button')) b.disabled = true;
      try {
        await post('/api/answer', { session: q.session, id: q.id, allow, remember });
        note(`${allow ? 'allowed' : 'denied'}${remember ? ' for the session' : ''}: ${q.what}`);
        li.remove();
      } catch (err) {
        note('not answered: ' + err.message);
        for (const b of li.querySelectorAll('button')) b.disabled = false;
      }
      e.preventDefault();
    };
    const btn = (cls, label, allow, remember) => {
      const b = el('button', cls, label);
      b.type = 'button';
      b.addEventListener('click', answer(allow, remember));
      return b;
    };
    li.append(btn('allow-once', 'Allow once', true, false),
      btn('allow-always', 'Allow always (this session)', true, true));
    // A rule in the user's policy: its diff is shown first, and written only once confirmed.
    if (q.rememberable) {
      const rule = (cls, label, forWhat) => {
        const b = el('button', cls, label);
        b.type = 'button';
        b.addEventListener('click', () => previewRule(q, forWhat, li));
        return b;
      };
      li.append(rule('allow-policy', 'Allow always (add to policy)', null),
        rule('allow-hour', 'Allow for 1 h (add to policy)', '1h'));
    }
    li.append(btn('deny', 'Deny', false, false));
    return li;
  }));
}

// The rule shown, waiting for "Write and allow": what the server said it would write.
let remembering = null;

async function previewRule(q, forWhat, li) {
  try {
    const d = await post('/api/remember', { session: q.session, id: q.id, for: forWhat });
    remembering = { q, li, until: d.until, digest: d.digest };
    const how = forWhat ? `Allow for ${forWhat}` : 'Allow always';
    $('remember-title').textContent = `${how}: add this to ${d.file}`;
    $('remember-diff').textContent = d.diff;
    $('remember').hidden = false;
  } catch (err) {
    note('no rule to write: ' + err.message);
  }
}

async function writeRule() {
  const r = remembering;
  if (!r) return;
  $('remember-write').disabled = true;
  try {
    const d = await post('/api/answer', {
      session: r.q.session, id: r.q.id, allow: true, remember: false,
      write: { until: r.until, digest: r.digest },
    });
    note(`allowed, and the rule is in ${d.written}: ${r.q.what}`);
    r.li.remove();
  } catch (err) {
    note(err.message);
  }
  $('remember-write').disabled = false;
  $('remember').hidden = true;
  remembering = null;
}

// ---- state reviews -----------------------------------------------------------------------

let reviewing = null;
// Whether the session under review is still running: null until the server said.
let reviewingRuns = null;

// Accept and Discard only for a session that ended: until then its changes are not complete,
// and `cordon run`'s own exit review may still decide them (the server refuses them too).
function offerDecision() {
  const ended = reviewingRuns === false;
  $('diff-accept').hidden = !ended;
  $('diff-discard').hidden = !ended;
  $('diff-running').hidden = reviewingRuns !== true;
}

function renderState(list) {
  $('state-empty').hidden = list.length > 0;
  const now = list.find((s) => s.session === reviewing);
  if (now) {
    reviewingRuns = now.running;
    offerDecision();
  }
  $('state').replaceChildren(...list.map((s) => {
    const li = el('li', 'state-row');
    li.dataset.session = s.session;
    li.dataset.running = String(s.running);
    li.append(el('div', 'what', s.session),
      el('div', 'meta', `${s.changed ?? '?'} changed${s.running ? ' · still running: review once it ends' : ''} · ${s.protected.join(' ')}`));
    const b = el('button', 'review', 'Review');
    b.type = 'button';
    b.addEventListener('click', () => openDiff(s.session));
    li.append(b);
    return li;
  }));
}

async function openDiff(session) {
  reviewing = session;
  reviewingRuns = null;
  offerDecision();
  $('diff').hidden = false;
  $('diff-title').textContent = session;
  $('diff-text').textContent = 'loading…';
  try {
    const r = await fetch(api('/api/state', { session }), { credentials: 'omit' });
    const d = await r.json();
    if (!r.ok) throw new Error(d.error || ('HTTP ' + r.status));
    if (reviewing !== session) return;
    $('diff-text').textContent = d.summary + (d.running ? '\n(still running: changes may grow)' : '');
    reviewingRuns = d.running;
    offerDecision();
  } catch (err) {
    $('diff-text').textContent = 'cannot read the review: ' + err.message;
  }
}

async function decide(accept) {
  if (!reviewing) return;
  try {
    const d = await post(accept ? '/api/state/accept' : '/api/state/discard', { session: reviewing });
    const what = accept ? `applied ${(d.applied || []).length}` : 'discarded';
    const conflicts = (d.conflicts || []).length ? '; conflicts: ' + d.conflicts.join('; ') : '';
    note(`${reviewing}: ${what}${conflicts}`);
    $('diff').hidden = true;
    reviewing = null;
  } catch (err) {
    note('not done: ' + err.message);
  }
}

// ---- the stream --------------------------------------------------------------------------

function snapshot(data) {
  sessions.clear();
  events = [];
  seen = new Set();
  const all = [];
  for (const s of data.sessions) {
    for (const ev of s.events || []) all.push(ev);
    delete s.events;
    sessions.set(s.id, s);
  }
  all.sort((a, b) => (a.time || '').localeCompare(b.time || '') || a.seq - b.seq);
  for (const ev of all) addEvent(ev, false);
  renderSessions();
  renderEvents();
  renderApprovals(data.approvals || []);
  renderState(data.state || []);
}

function connect() {
  const es = new EventSource(api('/events'));
  es.addEventListener('open', () => {
    $('conn').textContent = 'live';
    $('conn').className = 'conn live';
  });
  es.addEventListener('error', () => {
    $('conn').textContent = 'disconnected — retrying';
    $('conn').className = 'conn down';
  });
  es.addEventListener('snapshot', (m) => snapshot(JSON.parse(m.data)));
  es.addEventListener('event', (m) => addEvent(JSON.parse(m.data), true));
  es.addEventListener('session', (m) => {
    const s = JSON.parse(m.data);
    sessions.set(s.id, s);
    renderSessions();
  });
  es.addEventListener('approvals', (m) => renderApprovals(JSON.parse(m.data)));
  es.addEventListener('state', (m) => renderState(JSON.parse(m.data)));
}

function tick() {
  for (const e of document.querySelectorAll('#approvals .left')) {
    const s = Math.max(0, Math.round((Number(e.dataset.deadline) - Date.now()) / 1000));
    e.textContent = s > 0 ? `${s} s left, then denied` : 'timed out: denied';
  }
}

function init() {
  setInterval(tick, 1000);
  $('f-layer').append(...LAYERS.map((l) => new Option(l, l)));
  $('f-action').append(...ACTIONS.map((a) => new Option(a, a)));
  for (const id of ['f-session', 'f-layer', 'f-action', 'f-text', 'f-noise']) {
    $(id).addEventListener('input', renderEvents);
  }
  $('diff-accept').addEventListener('click', () => decide(true));
  $('diff-discard').addEventListener('click', () => decide(false));
  $('diff-close').addEventListener('click', () => { $('diff').hidden = true; reviewing = null; });
  $('remember-write').addEventListener('click', writeRule);
  $('remember-cancel').addEventListener('click', () => { $('remember').hidden = true; remembering = null; });
  offerDecision();
  connect();
}

init();
