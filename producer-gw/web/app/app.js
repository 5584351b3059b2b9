// seqflow demo chat: a browser client of docs/protocol.md in plain
// JavaScript. It logs in (dev login or a pasted token), keeps one
// WebSocket, sends commands with a client_msg_id it reuses on every retry,
// shows each event with its seq and msg_id, and after every (re)connect
// catches up with changes + sync. Nothing here is trusted as HTML: every
// value reaches the page through textContent.
'use strict';

const ID_RE = /^[A-Za-z0-9._:@-]{1,64}$/;
const REQUEST_TIMEOUT_MS = 10000;
const SYNC_PAGE = 200;
const FIRST_LOAD = 200; // events of history loaded per session at first connect
const DELIVERED_FLUSH_MS = 100; // the protocol's receipt window
const DELIVERED_FLUSH_COUNT = 64;

const $ = (id) => document.getElementById(id);

// state is everything the page knows; render() draws it.
const state = {
  token: '', user: '', device: '',
  ws: null,
  conn: 'disconnected', // disconnected | connecting | connected | offline (the user's choice)
  hello: null,
  online: false, // the user wants a connection
  connects: 0, // hellos received
  retryMs: 500,
  retryTimer: 0,
  sessions: new Map(), // session_id → session
  current: '',
  outbox: new Map(), // client_msg_id → command waiting for its seq
  requests: new Map(), // req_id → {resolve, reject, timer}
  nextReq: 1,
  receiptTimer: 0,
  receiptDirty: new Set(),
  receiptCount: 0,
  failed: [], // sends refused for good, shown in their session
};

function session(id) {
  let s = state.sessions.get(id);
  if (!s) {
    s = {
      id, kind: id.startsWith('d-') ? 'direct' : 'group', title: '', members: new Set(),
      roles: new Map(), // user → owner/admin/member, from member sync and group events
      muted: new Map(), // user → muted until (ms), from member sync and group events
      memberVersion: 0, // the member sync holds everything up to here
      events: new Map(), // seq → event as the gateway sent it
      synced: 0, // the store was complete up to here when last synced
      maxSeq: 0, // highest seq the gateway reported or we hold
      unread: 0, delivered: 0, preview: '', removed: false, gapTimer: 0, gapTries: 0,
    };
    state.sessions.set(id, s);
  }
  return s;
}

// ---------------------------------------------------------------- ids

// uuidv7 is a client_msg_id: time-ordered, random, made once per command.
function uuidv7() {
  const b = crypto.getRandomValues(new Uint8Array(16));
  let ts = Date.now();
  for (let i = 5; i >= 0; i--) { b[i] = ts % 256; ts = Math.floor(ts / 256); }
  b[6] = (b[6] & 0x0f) | 0x70;
  b[8] = (b[8] & 0x3f) | 0x80;
  const h = Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

// directSessionID is the gateway's "d-" + 16 bytes of SHA-256 over the
// sorted pair; null where the browser has no WebCrypto (not a secure context).
async function directSessionID(a, b) {
  if (!crypto.subtle) return null;
  if (b < a) [a, b] = [b, a];
  const sum = await crypto.subtle.digest('SHA-256', new TextEncoder().encode(`direct\0${a}\0${b}`));
  return 'd-' + Array.from(new Uint8Array(sum).slice(0, 16), (x) => x.toString(16).padStart(2, '0')).join('');
}

// ---------------------------------------------------------------- login

async function login(user, device, pasted) {
  let token = pasted.trim();
  if (!token) {
    const resp = await fetch('/v1/dev/login', {
      method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ user_id: user, device_id: device }),
    });
    if (resp.status === 404) throw new Error('dev login is off on this gateway (GATEWAY_DEV_MODE): paste a token instead');
    const body = await resp.json().catch(() => ({}));
    if (!resp.ok) throw new Error(body.error ? `${body.error.name}: ${body.error.message}` : `login: HTTP ${resp.status}`);
    token = body.token;
  } else {
    const claims = tokenClaims(token);
    if (!claims) throw new Error('that is not a JWT');
    user = claims.sub || user;
    device = claims.device_id || device;
  }
  Object.assign(state, { token, user, device });
  sessionStorage.setItem('seqflow.login', JSON.stringify({ token, user, device, pasted: !!pasted.trim() }));
}

function tokenClaims(token) {
  try {
    const p = token.split('.')[1].replace(/-/g, '+').replace(/_/g, '/');
    return JSON.parse(atob(p));
  } catch {
    return null;
  }
}

function logout() {
  state.online = false;
  sessionStorage.removeItem('seqflow.login');
  if (state.ws) state.ws.close(1000, 'logout');
  location.reload();
}

// ---------------------------------------------------------------- connection

function connect() {
  clearTimeout(state.retryTimer);
  if (state.ws) return;
  state.online = true;
  setConn('connecting');
  const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
  const ws = new WebSocket(`${proto}//${location.host}/v1/ws?access_token=${encodeURIComponent(state.token)}`);
  let greeted = false;
  state.ws = ws;
  ws.onmessage = (e) => {
    let f;
    try {
      f = JSON.parse(e.data);
    } catch {
      note(`undecodable frame from the gateway: ${String(e.data).slice(0, 80)}`, 'error');
      return;
    }
    if (f.op === 'hello') greeted = true;
    onFrame(f);
  };
  ws.onclose = (e) => {
    if (state.ws !== ws) return;
    state.ws = null;
    state.hello = null;
    for (const [, r] of state.requests) { clearTimeout(r.timer); r.reject(new Error('connection closed')); }
    state.requests.clear();
    const why = e.code === 1000 || e.code === 1005 ? '' : ` (${e.code}${e.reason ? ' ' + e.reason : ''})`;
    if (!state.online) {
      setConn('offline');
      note(`disconnected${why}`);
      return;
    }
    setConn('disconnected');
    note(`connection lost${why}`, 'warn');
    if (e.code === 4001 || !greeted) {
      recheckToken();
      return;
    }
    scheduleReconnect();
  };
}

function scheduleReconnect() {
  const wait = state.retryMs;
  state.retryMs = Math.min(state.retryMs * 2, 8000);
  setConn('disconnected', `reconnecting in ${(wait / 1000).toFixed(1)} s`);
  state.retryTimer = setTimeout(connect, wait);
}

// recheckToken finds out why a connection failed: a WebSocket handshake
// refused with 401 only shows as a close. An expired dev token is renewed.
async function recheckToken() {
  let status = 0;
  try {
    status = (await fetch('/v1/changes', { headers: { Authorization: `Bearer ${state.token}` } })).status;
  } catch {
    scheduleReconnect();
    return;
  }
  if (status !== 401) {
    scheduleReconnect();
    return;
  }
  const saved = JSON.parse(sessionStorage.getItem('seqflow.login') || '{}');
  if (!saved.pasted) {
    try {
      await login(state.user, state.device, '');
      note('token renewed');
      scheduleReconnect();
      return;
    } catch (err) {
      note(`token renewal failed: ${err.message}`, 'error');
    }
  }
  state.online = false;
  setConn('offline', 'token refused: log in again');
}

function disconnect() {
  state.online = false;
  clearTimeout(state.retryTimer);
  if (state.ws) state.ws.close(1000, 'user');
  else setConn('offline');
}

function write(frame) {
  if (!state.ws || state.ws.readyState !== WebSocket.OPEN) return false;
  state.ws.send(JSON.stringify(frame));
  return true;
}

// request sends a sync/changes-style frame and resolves with its result.
function request(frame) {
  return new Promise((resolve, reject) => {
    const req_id = `q${state.nextReq++}`;
    const timer = setTimeout(() => {
      state.requests.delete(req_id);
      reject(new Error(`${frame.op}: no answer in ${REQUEST_TIMEOUT_MS / 1000} s`));
    }, REQUEST_TIMEOUT_MS);
    state.requests.set(req_id, { resolve, reject, timer });
    if (!write({ ...frame, req_id })) {
      clearTimeout(timer);
      state.requests.delete(req_id);
      reject(new Error('not connected'));
    }
  });
}

// ---------------------------------------------------------------- frames

function onFrame(f) {
  switch (f.op) {
    case 'hello':
      state.hello = f;
      state.retryMs = 500;
      state.connects++;
      setConn('connected');
      onConnected(state.connects === 1);
      break;
    case 'ack':
    case 'seq_notice':
      onAck(f);
      break;
    case 'event':
      addEvent(f.event, 'push');
      break;
    case 'result':
    case 'error': {
      const r = f.req_id && state.requests.get(f.req_id);
      if (r) {
        state.requests.delete(f.req_id);
        clearTimeout(r.timer);
        if (f.op === 'error') r.reject(Object.assign(new Error(`${f.error.name}: ${f.error.message}`), { body: f.error }));
        else r.resolve(f);
      } else if (f.op === 'error') {
        onCommandError(f);
      }
      break;
    }
    case 'pong':
      break;
    default:
      note(`unknown frame ${f.op}`, 'warn');
  }
}

async function onConnected(first) {
  // The protocol's rule: a command without its seq is resent, unchanged.
  for (const [, c] of state.outbox) {
    c.attempts++;
    write(c.frame);
  }
  const open = state.sessions.get(state.current);
  const before = open ? open.maxSeq : 0;
  try {
    const { total, moved } = await catchUp(first);
    if (first) {
      note(`loaded ${plural(total, 'event')} in ${plural(moved, 'session')}`);
    } else {
      const text = `caught up ${plural(total, 'message')} in ${plural(moved, 'session')}`;
      note(text, 'catchup');
      // Mark in the open conversation where the page came back.
      if (open && open.maxSeq > before) open.divider = { after: before, text };
    }
  } catch (err) {
    note(`catch-up: ${err.message}`, 'error');
  }
  render();
}

// catchUp is the reconnect path: one changes, then a sync of every session
// whose max_seq is above what the page was complete up to.
async function catchUp(first) {
  const res = await request({ op: 'changes' });
  let total = 0;
  let moved = 0;
  for (const c of res.sessions || []) {
    const s = session(c.session_id);
    s.maxSeq = Math.max(s.maxSeq, c.max_seq);
    if (c.member_version > s.memberVersion) await syncMembers(s);
    if (c.preview) s.preview = c.preview;
    if (first && c.max_seq - s.synced > FIRST_LOAD) {
      // Only recent history, plus the session's first event for its name.
      await syncSession(s, 1);
      s.synced = c.max_seq - FIRST_LOAD;
    }
    if (c.max_seq > s.synced) {
      const n = await syncSession(s);
      total += n;
      if (n > 0) moved++;
    }
  }
  return { total, moved };
}

// syncMembers brings s's members, roles and mutes up to the store's member
// version with member_changes (docs/protocol.md, "Member list and member
// sync"), page by page from the version the page holds.
async function syncMembers(s) {
  for (;;) {
    const r = await request({ op: 'member_changes', session_id: s.id, since_version: s.memberVersion, limit: SYNC_PAGE });
    for (const c of r.changes || []) {
      if (!c.member) {
        s.members.delete(c.user_id);
        s.roles.delete(c.user_id);
        s.muted.delete(c.user_id);
        continue;
      }
      s.members.add(c.user_id);
      if (c.role) s.roles.set(c.user_id, c.role);
      if (c.muted_until_ms !== undefined) s.muted.set(c.user_id, c.muted_until_ms);
    }
    s.memberVersion = Math.max(s.memberVersion, r.member_version || 0);
    if (!r.has_more) break;
  }
}

// syncSession fetches events after s.synced, page by page, and returns how
// many were new to the page. With limit it stops after that many events.
async function syncSession(s, limit) {
  let fresh = 0;
  for (;;) {
    const r = await request({ op: 'sync', session_id: s.id, after_seq: s.synced, limit: limit || SYNC_PAGE });
    const msgs = r.messages || [];
    for (const m of msgs) {
      if (addEvent(m, 'sync')) fresh++;
      s.synced = Math.max(s.synced, m.seq);
    }
    if (limit || !r.has_more || msgs.length === 0) break;
  }
  return fresh;
}

// addEvent keeps one event per (session, seq) and applies what it means.
// It returns whether the event was new to the page.
function addEvent(ev, via) {
  const s = session(ev.session_id);
  const had = s.events.get(ev.seq);
  // A sync result is the current state (edited, recalled): it wins.
  if (had && via !== 'sync') return false;
  s.events.set(ev.seq, ev);
  s.maxSeq = Math.max(s.maxSeq, ev.seq);
  switch (ev.kind) {
    case 'session_create':
      s.kind = ev.session_kind || s.kind;
      s.title = ev.title || s.title;
      for (const u of ev.user_ids || []) s.members.add(u);
      s.members.add(ev.sender_user_id);
      if (ev.session_kind !== 'direct' && !s.roles.has(ev.sender_user_id)) s.roles.set(ev.sender_user_id, 'owner');
      break;
    case 'group': {
      const g = ev.group || {};
      if (ev.action === 'join') s.members.add(ev.sender_user_id);
      if (ev.action === 'set_role') s.roles.set(g.user_id, g.role);
      if (ev.action === 'transfer_ownership') { s.roles.set(g.user_id, 'owner'); s.roles.set(ev.sender_user_id, 'admin'); }
      if (ev.action === 'mute') s.muted.set(g.user_id, g.muted_until_ms || 0);
      if (ev.action === 'edit' && g.settings && g.settings.title !== undefined) s.title = g.settings.title;
      break;
    }
    case 'membership':
      for (const u of ev.user_ids || []) {
        if (ev.action === 'remove') s.members.delete(u);
        else s.members.add(u);
      }
      if (ev.action === 'remove' && (ev.user_ids || []).includes(state.user)) s.removed = true;
      if (ev.action === 'add' && (ev.user_ids || []).includes(state.user)) s.removed = false;
      break;
    case 'edit': {
      const t = s.events.get(ev.target_seq);
      if (t && !had) s.events.set(t.seq, { ...t, body: ev.body, type: ev.type, edited: true });
      break;
    }
    case 'recall': {
      const t = s.events.get(ev.target_seq);
      if (t && !had) s.events.set(t.seq, { ...t, body: undefined, recalled: true });
      break;
    }
    case 'message':
      s.preview = bodyText(ev);
      break;
  }
  if (had) {
    scheduleRender();
    return false;
  }
  // Our own command, pushed before its ACK: the ACK still completes it.
  const mineCmd = ev.client_msg_id && ev.sender_user_id === state.user && state.outbox.get(ev.client_msg_id);
  if (mineCmd) mineCmd.seen = ev.seq;
  if (ev.kind === 'message' && ev.sender_user_id !== state.user && s.id !== state.current) s.unread++;
  if (via === 'push') watchGap(s, ev.seq);
  markDelivered(s);
  scheduleRender();
  return true;
}

// watchGap syncs a session when a pushed event leaves a hole behind it:
// the push path is best effort, sync is complete. A hole the store also
// has is a gap the sequencer left, and is passed once the store has
// events beyond it.
function watchGap(s, seq) {
  let hole = false;
  for (let q = s.synced + 1; q < seq; q++) {
    if (!s.events.has(q)) { hole = true; break; }
  }
  if (!hole || s.gapTimer) return;
  s.gapTimer = setTimeout(async () => {
    s.gapTimer = 0;
    try {
      await syncSession(s);
    } catch {
      return; // the next connect catches up
    }
    if (++s.gapTries < 3) watchGap(s, s.maxSeq);
    else s.gapTries = 0;
  }, 500);
}

// markDelivered moves the session's receipt cursor to the highest seq up to
// which the page holds everything (what the store had, then contiguous).
function markDelivered(s) {
  let c = s.synced;
  while (s.events.has(c + 1)) c++;
  if (c <= s.delivered) return;
  s.delivered = c;
  state.receiptDirty.add(s.id);
  if (++state.receiptCount >= DELIVERED_FLUSH_COUNT) flushReceipts();
  else if (!state.receiptTimer) state.receiptTimer = setTimeout(flushReceipts, DELIVERED_FLUSH_MS);
}

function flushReceipts() {
  clearTimeout(state.receiptTimer);
  state.receiptTimer = 0;
  state.receiptCount = 0;
  if (state.receiptDirty.size === 0) return;
  const cursors = [...state.receiptDirty].map((id) => ({ session_id: id, seq: state.sessions.get(id).delivered }));
  if (write({ op: 'delivered', cursors })) state.receiptDirty.clear();
}

// ---------------------------------------------------------------- commands

// command sends a frame with a fresh client_msg_id and keeps it in the
// outbox until it has its seq; then() runs on the ACK, fail() on an error
// that retrying cannot fix.
function command(frame, then, fail) {
  const id = uuidv7();
  const c = { frame: { ...frame, client_msg_id: id }, then, fail, status: 'sending', attempts: 1, error: null };
  state.outbox.set(id, c);
  if (!write(c.frame)) c.status = 'queued until reconnect';
  scheduleRender();
  return c;
}

function onAck(f) {
  const c = state.outbox.get(f.client_msg_id);
  if (!c) return;
  if (f.status === 'accepted') {
    c.status = 'accepted'; // durable in Kafka; the seq follows in a seq_notice
    scheduleRender();
    return;
  }
  state.outbox.delete(f.client_msg_id);
  if (c.then) c.then(f, c);
  scheduleRender();
}

function onCommandError(f) {
  const c = state.outbox.get(f.client_msg_id);
  if (!c) {
    note(`${f.error.name}: ${f.error.message}`, 'error');
    return;
  }
  if (f.error.retryable && c.attempts < 6) {
    c.status = `retrying (${f.error.name})`;
    const wait = 250 * 2 ** c.attempts;
    c.attempts++;
    setTimeout(() => { if (state.outbox.has(c.frame.client_msg_id)) write(c.frame); }, wait);
    scheduleRender();
    return;
  }
  state.outbox.delete(f.client_msg_id);
  if (c.fail && c.fail(f.error, c)) return;
  c.status = 'failed';
  c.error = f.error;
  note(`${c.frame.op} failed: ${f.error.name}: ${f.error.message}`, 'error');
  if (c.frame.op === 'send') state.failed.push(c);
  scheduleRender();
}

function sendText(text) {
  const s = state.sessions.get(state.current);
  if (!s) return;
  command({ op: 'send', session_id: s.id, type: 'text', body: text, client_ts: Date.now() }, (ack, c) => {
    // The ACK carries the seq; the pushed event may come before or after it.
    if (!s.events.has(ack.seq)) {
      addEvent({
        session_id: s.id, seq: ack.seq, msg_id: ack.msg_id, client_msg_id: c.frame.client_msg_id,
        sender_user_id: state.user, sender_device_id: state.device, server_ts: ack.server_ts,
        kind: 'message', type: 'text', body: text,
      }, 'ack');
    }
    if (ack.duplicate) note(`send retried: same seq ${ack.seq}, same msg_id (deduplicated)`);
  });
}

function createDirect(peer) {
  command({ op: 'create_session', kind: 'direct', peer_user_id: peer }, (ack) => {
    const s = session(ack.session_id);
    s.kind = 'direct';
    s.members = new Set([state.user, peer]);
    note(`direct session with ${peer} created at seq ${ack.seq}`);
    openSession(s.id);
  }, (err) => {
    if (err.name !== 'session_exists') return false;
    directSessionID(state.user, peer).then((id) => {
      if (!id) {
        note(`you already have a direct session with ${peer}: pick it from the list`);
        return;
      }
      const s = session(id);
      s.kind = 'direct';
      if (s.members.size === 0) s.members = new Set([state.user, peer]);
      note(`a direct session with ${peer} exists (session_exists): opened it`);
      openSession(id);
      syncSession(s).catch(() => {});
    });
    return true;
  });
}

function createGroup(title, members) {
  command({ op: 'create_session', kind: 'group', title, member_user_ids: members }, (ack) => {
    const s = session(ack.session_id);
    s.kind = 'group';
    s.title = title;
    s.members = new Set([state.user, ...members]);
    note(`group ${title || s.id} created at seq ${ack.seq}`);
    openSession(s.id);
  });
}

// ---------------------------------------------------------------- view

function plural(n, word) {
  return `${n} ${word}${n === 1 ? '' : 's'}`;
}

function bodyText(ev) {
  if (ev.recalled) return '';
  if (ev.body === undefined || ev.body === null) return '';
  return typeof ev.body === 'string' ? ev.body : JSON.stringify(ev.body);
}

function sessionName(s) {
  if (s.kind === 'direct') {
    const others = [...s.members].filter((u) => u !== state.user);
    return others.length ? others.join(', ') : `direct ${s.id.slice(2, 10)}`;
  }
  return s.title || `group ${s.id.slice(2, 10)}`;
}

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k.startsWith('data-')) e.setAttribute(k, String(v));
    else e[k] = v;
  }
  for (const k of kids) if (k !== null && k !== undefined) e.append(k);
  return e;
}

function setConn(conn, detail) {
  state.conn = conn;
  const c = $('conn');
  c.dataset.state = conn;
  let text = { connecting: 'connecting…', connected: 'connected', disconnected: 'disconnected', offline: 'offline' }[conn];
  if (conn === 'connected' && state.hello) text += ` · ${state.hello.gateway_id}`;
  if (detail) text += ` · ${detail}`;
  c.textContent = text;
  c.title = state.hello ? `conn ${state.hello.conn_id}, heartbeat ${state.hello.heartbeat_ms} ms` : '';
  const t = $('toggle');
  t.hidden = !state.token;
  t.textContent = state.online ? 'disconnect' : 'reconnect';
  renderComposer();
}

function note(text, kind) {
  const li = el('li', { class: kind || 'info', 'data-kind': kind || 'info' },
    el('time', {}, new Date().toLocaleTimeString()), ' ', text);
  $('log').prepend(li);
  while ($('log').children.length > 50) $('log').lastChild.remove();
}

let renderQueued = false;
function scheduleRender() {
  if (renderQueued) return;
  renderQueued = true;
  requestAnimationFrame(() => { renderQueued = false; render(); });
}

function openSession(id) {
  state.current = id;
  const s = session(id);
  s.unread = 0;
  render();
  $('send-text').focus();
}

function render() {
  renderSessions();
  renderConversation();
  renderComposer();
}

function renderSessions() {
  const list = [...state.sessions.values()].sort((a, b) => lastTs(b) - lastTs(a) || a.id.localeCompare(b.id));
  const ul = $('sessions');
  ul.replaceChildren(...list.map((s) => el('li', {
    'data-session': s.id, 'data-kind': s.kind, class: s.id === state.current ? 'active' : '', onclick: () => openSession(s.id),
  },
  el('span', { class: 'name' }, sessionName(s)),
  el('span', { class: `kind ${s.kind}` }, s.kind),
  s.unread ? el('span', { class: 'unread' }, String(s.unread)) : null,
  el('span', { class: 'preview' }, s.removed ? 'you were removed' : s.preview || ' '),
  el('span', { class: 'seqinfo' }, `seq ${s.maxSeq}`))));
  $('no-sessions').hidden = list.length > 0;
}

function lastTs(s) {
  let ts = 0;
  for (const ev of s.events.values()) ts = Math.max(ts, ev.server_ts || 0);
  return ts;
}

function renderConversation() {
  const s = state.sessions.get(state.current);
  const ol = $('messages');
  if (!s) {
    $('conv-title').textContent = 'Pick a session';
    $('conv-meta').textContent = state.sessions.size ? '' : 'or start one on the left';
    ol.replaceChildren();
    return;
  }
  $('conv-title').textContent = sessionName(s);
  $('conv-meta').dataset.memberVersion = String(s.memberVersion);
  $('conv-meta').replaceChildren(
    el('span', { class: `kind ${s.kind}` }, s.kind), ' ',
    el('span', { class: 'members' }, [...s.members].sort().map((u) => memberLabel(s, u)).join(', ')), ' ',
    el('code', { title: 'session_id' }, s.id));
  const stick = ol.scrollHeight - ol.scrollTop - ol.clientHeight < 40;
  const rows = [];
  let divided = !s.divider;
  for (const ev of [...s.events.values()].sort((a, b) => a.seq - b.seq)) {
    if (!divided && ev.seq > s.divider.after) {
      rows.push(el('li', { class: 'divider' }, s.divider.text));
      divided = true;
    }
    rows.push(eventRow(ev));
  }
  for (const c of state.outbox.values()) {
    if (c.frame.op === 'send' && c.frame.session_id === s.id && !c.seen) rows.push(pendingRow(c));
  }
  for (const c of state.failed) {
    if (c.frame.session_id === s.id) rows.push(pendingRow(c));
  }
  ol.replaceChildren(...rows);
  if (stick) ol.scrollTop = ol.scrollHeight;
}

function eventRow(ev) {
  const mine = ev.sender_user_id === state.user;
  const when = ev.server_ts ? new Date(ev.server_ts).toLocaleTimeString() : '';
  const attrs = { 'data-seq': ev.seq, 'data-msg-id': ev.msg_id, 'data-kind': ev.kind, 'data-sender': ev.sender_user_id };
  const seq = el('span', { class: 'seq', title: 'seq' }, `#${ev.seq}`);
  if (ev.kind !== 'message') {
    return el('li', { ...attrs, class: 'system' }, seq, el('span', { class: 'text' }, systemText(ev)),
      el('span', { class: 'meta' }, when));
  }
  return el('li', { ...attrs, class: `msg${mine ? ' mine' : ''}${ev.recalled ? ' recalled' : ''}` },
    seq,
    el('span', { class: 'who' }, `${ev.sender_user_id}${ev.sender_device_id ? '/' + ev.sender_device_id : ''}`),
    el('span', { class: 'body' }, ev.recalled ? 'message recalled' : bodyText(ev)),
    el('span', { class: 'meta' }, `${ev.edited ? 'edited · ' : ''}msg_id `, el('code', { class: 'msgid' }, ev.msg_id || ''), ` · ${when}`));
}

// memberLabel is a member as the header lists it: with its role when not
// a plain member, and "muted" while muted.
function memberLabel(s, u) {
  const role = s.roles.get(u);
  const muted = (s.muted.get(u) || 0) > Date.now();
  return u + (role && role !== 'member' ? ` (${role})` : '') + (muted ? ' (muted)' : '');
}

function groupText(ev) {
  const g = ev.group || {};
  switch (ev.action) {
    case 'join': return `${ev.sender_user_id} joined${g.by_invite_code ? ' with the invite code' : ''}`;
    case 'set_role': return `${ev.sender_user_id} made ${g.user_id} ${g.role === 'admin' ? 'an admin' : 'a member'}`;
    case 'transfer_ownership': return `${ev.sender_user_id} handed the group to ${g.user_id}`;
    case 'mute': return g.muted_until_ms ? `${ev.sender_user_id} muted ${g.user_id} until ${new Date(g.muted_until_ms).toLocaleString()}` : `${ev.sender_user_id} unmuted ${g.user_id}`;
    case 'mute_all': return `${ev.sender_user_id} ${g.muted ? 'muted' : 'unmuted'} the group`;
    case 'edit': return `${ev.sender_user_id} edited the group`;
    case 'dissolve': return `${ev.sender_user_id} dissolved the group`;
    default: return `${ev.sender_user_id}: ${ev.action}`;
  }
}

function systemText(ev) {
  const users = (ev.user_ids || []).join(', ');
  switch (ev.kind) {
    case 'group':
      return groupText(ev);
    case 'session_create':
      return ev.session_kind === 'direct'
        ? `${ev.sender_user_id} started a direct session with ${(ev.user_ids || []).filter((u) => u !== ev.sender_user_id).join(', ') || '?'}`
        : `${ev.sender_user_id} created the group "${ev.title || ''}" with ${users || 'nobody else'}`;
    case 'membership':
      return `${ev.sender_user_id} ${ev.action === 'remove' ? 'removed' : 'added'} ${users}`;
    case 'edit':
      return `${ev.sender_user_id} edited #${ev.target_seq}`;
    case 'recall':
      return `${ev.sender_user_id} recalled #${ev.target_seq}`;
    default:
      return ev.kind;
  }
}

function pendingRow(c) {
  const status = c.status === 'failed' ? `failed: ${c.error.name}` : c.status === 'accepted' ? 'accepted, seq pending' : c.status;
  return el('li', { class: `msg mine pending${c.status === 'failed' ? ' failed' : ''}`, 'data-client-msg-id': c.frame.client_msg_id },
    el('span', { class: 'seq' }, '…'),
    el('span', { class: 'who' }, `${state.user}/${state.device}`),
    el('span', { class: 'body' }, c.frame.body),
    el('span', { class: 'meta' }, status));
}

function renderComposer() {
  const s = state.sessions.get(state.current);
  const ok = !!s && !s.removed;
  $('send-text').disabled = !ok;
  $('send-button').disabled = !ok;
  $('send-text').placeholder = !s ? 'pick a session' : s.removed ? 'you are no longer a member'
    : state.conn === 'connected' ? `message ${sessionName(s)}` : 'offline: messages wait and are sent on reconnect';
}

// ---------------------------------------------------------------- wiring

function showChat() {
  $('login').hidden = true;
  $('chat').hidden = false;
  $('logout').hidden = false;
  $('conn').hidden = false;
  $('whoami').textContent = `${state.user}/${state.device}`;
  document.title = `${state.user} · seqflow chat`;
  connect();
  render();
}

function ids(text) {
  return text.split(/[\s,]+/).map((x) => x.trim()).filter(Boolean);
}

function init() {
  $('login-form').addEventListener('submit', async (e) => {
    e.preventDefault();
    $('login-error').textContent = '';
    $('login-submit').disabled = true;
    try {
      await login($('login-user').value.trim(), $('login-device').value.trim(), $('login-token').value);
      showChat();
    } catch (err) {
      $('login-error').textContent = err.message;
    } finally {
      $('login-submit').disabled = false;
    }
  });
  $('new-direct').addEventListener('submit', (e) => {
    e.preventDefault();
    const peer = $('direct-peer').value.trim();
    if (!ID_RE.test(peer)) return note(`"${peer}" is not a user ID`, 'error');
    if (peer === state.user) return note('a direct session needs another user', 'error');
    createDirect(peer);
    $('direct-peer').value = '';
  });
  $('new-group').addEventListener('submit', (e) => {
    e.preventDefault();
    const members = ids($('group-members').value).filter((u) => u !== state.user);
    const bad = members.find((u) => !ID_RE.test(u));
    if (bad) return note(`"${bad}" is not a user ID`, 'error');
    createGroup($('group-title').value.trim(), members);
    $('group-title').value = '';
    $('group-members').value = '';
  });
  $('send-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const text = $('send-text').value;
    if (!text.trim()) return;
    sendText(text);
    $('send-text').value = '';
  });
  $('toggle').addEventListener('click', () => (state.online ? disconnect() : connect()));
  $('logout').addEventListener('click', logout);

  const saved = JSON.parse(sessionStorage.getItem('seqflow.login') || 'null');
  if (saved && saved.token) {
    Object.assign(state, { token: saved.token, user: saved.user, device: saved.device });
    showChat();
  }
}

init();
