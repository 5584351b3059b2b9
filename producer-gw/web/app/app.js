// seqflow demo chat: a browser client on the TypeScript SDK (client-ts;
// its compiled browser entry is committed under /sdk/). The SDK keeps the
// connection, resends commands with their client_msg_id, fills gaps and
// hands the page every event once, in seq order per session, and keeps
// unanswered sends in IndexedDB across a reload. The page logs in, draws
// what it is handed, and asks the gateway for what it shows: unread counts
// (never recounted here), delivered/read ticks and "seen by", typing,
// members, older history. Nothing here is trusted as HTML: every value
// reaches the page through textContent.

import {
  ClosedError,
  Client,
  HandshakeError,
  IndexedDBOutbox,
  ReplacedError,
  SignedOutError,
  newMessageId,
  text,
} from '/sdk/index.js';

const ID_RE = /^[A-Za-z0-9._:@-]{1,64}$/;
const FIRST_LOAD = 200; // events per session handed at first connect; older ones on demand
const OLDER_PAGE = 50; // events per "load older" page
const TYPING_EVERY_MS = 3000; // an active indicator is repeated this often while typing
const CATCH_UP_WAIT_MS = 15000; // how long the catch-up note waits for the store's max_seq

const $ = (id) => document.getElementById(id);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// state is everything the page knows; render() draws it.
const state = {
  token: '', user: '', device: '', pasted: false,
  client: null,
  conn: 'disconnected', // connecting | connected | disconnected (reconnecting) | offline (the user's choice, or final)
  hello: null,
  online: false, // the user wants a connection
  connects: 0, // hellos, over every client of this page
  cursors: {}, // what the previous client was handed, per session (after a disconnect)
  sessions: new Map(), // session_id → session
  current: '',
  pending: new Map(), // client_msg_id → a send without its seq yet (or failed)
  totalUnread: 0,
  typingSent: 0, // when the last active typing indicator went out
  typingIn: '',
  starting: null, // a client being opened
  gen: 0, // bumped by every start and disconnect: an older start gives up
  offlineWrites: Promise.resolve(), // sends written to the outbox while disconnected
};

function session(id) {
  let s = state.sessions.get(id);
  if (!s) {
    s = {
      id, kind: id.startsWith('d-') ? 'direct' : 'group', title: '', members: new Set(),
      roles: new Map(), // user → owner/admin/member
      muted: new Map(), // user → muted until (ms)
      memberVersion: 0, // the member sync holds everything up to here
      online: new Map(), // user → online (presence, asked when the session is opened)
      events: new Map(), // seq → event
      live: 0, // the highest seq the SDK handed over
      oldest: 0, // the lowest seq held of the run that reaches live (0: none)
      hasOlder: false, loadingOlder: false,
      storeMax: 0, // max_seq from the latest changes
      unread: 0, readSeq: 0, // from the gateway: never counted here
      seen: 0, // the highest seq shown while the session was open
      read: new Map(), // other user → read cursor (receipts, seen_by)
      delivered: new Map(), // other user → delivered cursor (receipts)
      typing: new Map(), // other user → shown until (ms)
      preview: '', removed: false, divider: null, named: false,
      readTimer: 0, membersTimer: 0,
    };
    state.sessions.set(id, s);
  }
  return s;
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
  const isPasted = !!pasted.trim();
  Object.assign(state, { token, user, device, pasted: isPasted });
  sessionStorage.setItem('seqflow.login', JSON.stringify({ token, user, device, pasted: isPasted }));
}

function tokenClaims(token) {
  try {
    const p = token.split('.')[1].replace(/-/g, '+').replace(/_/g, '/');
    return JSON.parse(atob(p));
  } catch {
    return null;
  }
}

// currentToken is the SDK's tokenSource for dev logins: asked before every
// connection attempt, it renews a token about to expire.
async function currentToken() {
  const c = tokenClaims(state.token);
  if (c && c.exp && c.exp * 1000 - Date.now() < 60_000) {
    await login(state.user, state.device, '');
    note('token renewed');
  }
  return state.token;
}

function logout() {
  state.online = false;
  sessionStorage.removeItem('seqflow.login');
  if (state.client) state.client.close();
  location.reload();
}

// ---------------------------------------------------------------- connection

// seed reads the session list over HTTP (changes): before the WebSocket
// opens it says how far back the first catch-up goes (FIRST_LOAD per
// session); after each connect, up to where the catch-up must reach.
async function seed() {
  const get = async () => fetch('/v1/changes', { headers: { Authorization: `Bearer ${state.token}` } });
  let resp = await get();
  if (resp.status === 401 && !state.pasted) {
    await login(state.user, state.device, '');
    resp = await get();
  }
  const body = await resp.json().catch(() => ({}));
  if (!resp.ok) throw new Error(body.error ? `${body.error.name}: ${body.error.message}` : `HTTP ${resp.status}`);
  return body.sessions || [];
}

// start opens a client and runs it until the user disconnects or the
// gateway ends the login. Each start is a new Client: it resumes after
// what the previous one handed over, and finds the previous one's
// unanswered sends in the IndexedDB outbox.
function start() {
  state.starting = openClient().finally(() => { state.starting = null; });
}

// outboxName is the IndexedDB database of this user and device's sends.
function outboxName() {
  return `seqflow-outbox:${state.user}:${state.device}`;
}

async function openClient() {
  const gen = ++state.gen;
  state.online = true;
  setConn('connecting');
  const cursors = { ...state.cursors };
  try {
    for (const c of await seed()) {
      applyChange(c);
      if (!(c.session_id in cursors) && c.max_seq > FIRST_LOAD) cursors[c.session_id] = c.max_seq - FIRST_LOAD;
    }
  } catch (err) {
    note(`session list: ${err.message}`, 'warn');
  }
  if (gen !== state.gen) return; // disconnected (or started again) meanwhile
  await state.offlineWrites; // sends made while disconnected are in the outbox before it is read
  let client;
  try {
    client = await Client.open({
      urls: [`${location.protocol === 'https:' ? 'wss:' : 'ws:'}//${location.host}/v1/ws`],
      ...(state.pasted ? { token: state.token } : { tokenSource: currentToken }),
      platform: 'web',
      outbox: new IndexedDBOutbox(outboxName()),
      cursors,
      onEvent,
      onConnect: (h) => onConnect(client, h),
      onDisconnect,
      onUnread,
      onReceipt,
      onTyping,
      logger: { info() {}, warn: (msg, attrs) => console.warn(msg, attrs || {}) },
    });
  } catch (err) {
    if (gen !== state.gen) return;
    state.online = false;
    setConn('offline', err.message);
    note(`open the client: ${err.message}`, 'error');
    return;
  }
  if (gen !== state.gen) {
    // Disconnected while the outbox was read: run() after close() only
    // releases the outbox.
    client.close();
    client.run().catch(() => {});
    return;
  }
  state.client = client;
  for (const p of client.recovered) {
    const f = p.frame;
    if (f.op !== 'send') continue;
    const row = { id: p.clientMsgId, sessionId: f.session_id, body: typeof f.body === 'string' ? f.body : JSON.stringify(f.body), failed: '' };
    state.pending.set(row.id, row);
    track(p, row);
  }
  if (client.recovered.length) note(`${plural(client.recovered.length, 'command')} from the outbox, resent once connected`);
  client.run().then(
    () => {
      if (state.client === client) setConn('offline');
    },
    (err) => {
      if (state.client !== client) return;
      state.online = false;
      let why = err.message;
      if (err instanceof HandshakeError) why = 'token refused: log in again';
      else if (err instanceof SignedOutError) why = 'this device was signed out: log in again';
      else if (err instanceof ReplacedError) why = 'replaced by a newer connection of this device';
      setConn('offline', why);
      note(why, 'error');
    },
  );
  render();
}

function disconnect() {
  state.gen++;
  state.online = false;
  const c = state.client;
  if (!c) return setConn('offline');
  state.cursors = c.cursors();
  state.client = null;
  c.close();
  setConn('offline');
  note('disconnected');
}

function onConnect(client, h) {
  if (state.client !== client) return;
  state.hello = h;
  state.connects++;
  setConn('connected');
  const first = state.connects === 1;
  const before = new Map([...state.sessions.values()].map((s) => [s.id, s.live]));
  settle(client, first, before);
  client.readReceipts().then((on) => showReceipts(on), () => {});
}

function showReceipts(on) {
  $('receipts').hidden = false;
  $('read-receipts').checked = on;
}

// setReadReceipts turns the user's read receipts on or off on every
// device: the others stop seeing "read" and "seen by" from the user.
async function setReadReceipts(on) {
  if (!state.client) return showReceipts(!on);
  try {
    const now = await state.client.setReadReceipts(on);
    showReceipts(now);
    note(`read receipts ${now ? 'on' : 'off'}`);
  } catch (err) {
    showReceipts(!on);
    note(`read receipts: ${err.message}`, 'error');
  }
}

function onDisconnect(err) {
  state.hello = null;
  if (!state.online) return;
  setConn('disconnected', 'reconnecting');
  note(`connection lost (${err.message})`, 'warn');
}

// settle reports a connection's catch-up once the SDK has handed every
// session up to the store's max_seq: "loaded" after the first, "caught
// up" after a reconnect, with a divider where the open session resumed.
// The targets come over HTTP: a changes on the WebSocket would seed the
// connection's unread counts again, from a store that may lag its pushes.
async function settle(client, first, before) {
  let sessions;
  try {
    sessions = await seed();
  } catch (err) {
    note(`catch-up: ${err.message}`, 'error');
    return;
  }
  for (const c of sessions) applyChange(c, false);
  const deadline = Date.now() + CATCH_UP_WAIT_MS;
  while (Date.now() < deadline && state.client === client && sessions.some((c) => session(c.session_id).live < c.max_seq)) await sleep(50);
  if (state.client !== client) return;
  let total = 0;
  let moved = 0;
  for (const s of state.sessions.values()) {
    let n = 0;
    for (const ev of s.events.values()) {
      if (first ? ev.seq <= s.live : ev.seq > (before.get(s.id) || 0) && ev.kind === 'message' && ev.sender_user_id !== state.user) n++;
    }
    total += n;
    if (n) moved++;
    if (!first && n && s.id === state.current) s.divider = { after: before.get(s.id) || 0, text: '' };
    if (first && s.oldest > 1 && !s.named) nameSession(client, s);
  }
  if (first) {
    note(`loaded ${plural(total, 'event')} in ${plural(moved, 'session')}`);
  } else {
    const text = `caught up ${plural(total, 'message')} in ${plural(moved, 'session')}`;
    note(text, 'catchup');
    for (const s of state.sessions.values()) if (s.divider && !s.divider.text) s.divider.text = text;
  }
  const open = state.sessions.get(state.current);
  if (open) markRead(open);
  render();
  refreshDevices();
}

// refreshDevices lists the user's devices (online first), each but this
// one with a sign-out button: its tokens stop working and its connections
// close with 4002 signed_out.
async function refreshDevices() {
  const client = state.client;
  if (!client) return;
  let list;
  try {
    list = await client.devices();
  } catch (err) {
    if (!(err instanceof ClosedError)) note(`devices: ${err.message}`, 'warn');
    return;
  }
  $('devices').replaceChildren(...list.map((d) => el('li', { 'data-device': d.deviceId, 'data-current': d.current ? 'true' : null, 'data-online': String(d.online) },
    el('span', { class: `dot${d.online ? ' on' : ''}` }),
    el('span', { class: 'device' }, `${d.deviceId}${d.platform ? ` (${d.platform})` : ''}`),
    el('span', { class: 'seen-at' }, d.current ? 'this device' : d.online ? `online${d.connections > 1 ? ` ×${d.connections}` : ''}` : `seen ${new Date(d.lastSeenMs).toLocaleString()}`),
    d.current ? null : el('button', { type: 'button', class: 'sign-out link', onclick: () => signOut(d.deviceId) }, 'sign out'))));
}

async function signOut(deviceId) {
  if (!state.client) return;
  try {
    await state.client.signOutDevice(deviceId);
    note(`signed out ${deviceId}`);
  } catch (err) {
    note(`sign out ${deviceId}: ${err.message}`, 'error');
  }
  refreshDevices();
}

// nameSession reads a session's first event (its creation: kind, title)
// when the first catch-up started after it.
async function nameSession(client, s) {
  try {
    const r = await client.sync(s.id, 0, 1);
    for (const ev of r.messages) applyCreate(s, ev);
    s.named = true;
    scheduleRender();
  } catch {
    // the name waits for the next connect
  }
}

// applyChange takes a session of a changes result; its unread count only
// with counts (before the SDK's own changes, which then keeps them).
function applyChange(c, counts = true) {
  const s = session(c.session_id);
  s.storeMax = Math.max(s.storeMax, c.max_seq);
  s.readSeq = Math.max(s.readSeq, c.read_seq || 0);
  if (counts) s.unread = c.unread || 0;
  if (c.preview) s.preview = c.preview;
  if ((c.member_version || 0) > s.memberVersion) syncMembersSoon(s);
}

// ---------------------------------------------------------------- events

// onEvent is the SDK's stream: once per event, per session in seq order.
function onEvent(ev) {
  const s = session(ev.session_id);
  if (ev.seq <= s.live) {
    // The SDK promises this never happens; the browser test checks for it.
    note(`event ${ev.session_id} #${ev.seq} handed after #${s.live}: out of order or twice`, 'error');
    return;
  }
  if (s.oldest === 0) {
    s.oldest = ev.seq;
    s.hasOlder = ev.seq > 1;
  }
  s.live = ev.seq;
  addEvent(s, ev, true);
  if (s.id === state.current) markRead(s);
}

// addEvent keeps one event per seq. Live events (the SDK's, in order)
// also change the session: members, title, edits, recalls; history pages
// and ACKs only fill in rows.
function addEvent(s, ev, live) {
  const had = s.events.get(ev.seq);
  if (had && !live) return;
  s.events.set(ev.seq, ev);
  if (ev.client_msg_id && state.pending.has(ev.client_msg_id)) state.pending.delete(ev.client_msg_id);
  applyCreate(s, ev);
  if (live) applyLive(s, ev);
  scheduleRender();
}

function applyCreate(s, ev) {
  if (ev.kind !== 'session_create') return;
  s.kind = ev.session_kind || s.kind;
  if (ev.title) s.title = ev.title;
  s.named = true;
  if (s.memberVersion === 0) {
    for (const u of ev.user_ids || []) s.members.add(u);
    s.members.add(ev.sender_user_id);
    if (ev.session_kind !== 'direct' && !s.roles.has(ev.sender_user_id)) s.roles.set(ev.sender_user_id, 'owner');
  }
}

function applyLive(s, ev) {
  switch (ev.kind) {
    case 'group': {
      const g = ev.group || {};
      if (ev.action === 'join') s.members.add(ev.sender_user_id);
      if (ev.action === 'set_role') s.roles.set(g.user_id, g.role);
      if (ev.action === 'transfer_ownership') { s.roles.set(g.user_id, 'owner'); s.roles.set(ev.sender_user_id, 'admin'); }
      if (ev.action === 'mute') s.muted.set(g.user_id, g.muted_until_ms || 0);
      if (ev.action === 'edit' && g.settings && g.settings.title !== undefined) s.title = g.settings.title;
      syncMembersSoon(s);
      break;
    }
    case 'membership':
      for (const u of ev.user_ids || []) {
        if (ev.action === 'remove') s.members.delete(u);
        else s.members.add(u);
      }
      if (ev.action === 'remove' && (ev.user_ids || []).includes(state.user)) s.removed = true;
      if (ev.action === 'add' && (ev.user_ids || []).includes(state.user)) s.removed = false;
      if (!s.removed) syncMembersSoon(s);
      break;
    case 'edit': {
      const t = s.events.get(ev.target_seq);
      if (t) s.events.set(t.seq, { ...t, body: ev.body, type: ev.type, edited: true });
      break;
    }
    case 'recall': {
      const t = s.events.get(ev.target_seq);
      if (t) s.events.set(t.seq, { ...t, body: undefined, recalled: true });
      break;
    }
    case 'message':
      s.preview = bodyText(ev);
      s.typing.delete(ev.sender_user_id);
      break;
  }
}

// onUnread: the gateway's count of a session and the total, after
// changes, on every chat event and after a read on any of the user's devices.
function onUnread(u) {
  const s = session(u.sessionId);
  s.unread = u.unread;
  if (u.readSeq) s.readSeq = Math.max(s.readSeq, u.readSeq);
  state.totalUnread = u.totalUnread;
  scheduleRender();
}

// onReceipt: another member's delivered or read cursor (ephemeral).
function onReceipt(r) {
  const s = session(r.sessionId);
  raise(s.delivered, r.userId, r.seq);
  if (r.kind === 'read') raise(s.read, r.userId, r.seq);
  scheduleRender();
}

function raise(m, k, v) {
  if ((m.get(k) || 0) < v) m.set(k, v);
}

// onTyping: another member's indicator, shown until it expires or stops.
function onTyping(t) {
  const s = session(t.sessionId);
  if (t.active) {
    const ms = t.expiresInMs || 6000;
    s.typing.set(t.userId, Date.now() + ms);
    setTimeout(scheduleRender, ms + 50);
  } else {
    s.typing.delete(t.userId);
  }
  scheduleRender();
}

function typers(s) {
  const now = Date.now();
  return [...s.typing].filter(([, until]) => until > now).map(([u]) => u).sort();
}

// markRead records that the open session was seen up to what the SDK
// handed over, and sends a read receipt for it (debounced): what was on
// screen is read even when the user moves on before the receipt leaves.
// The gateway answers every device with the new unread count.
function markRead(s) {
  if (s.id !== state.current) return;
  s.seen = Math.max(s.seen, s.live);
  sendRead(s);
}

function sendRead(s) {
  if (s.readTimer || s.seen <= s.readSeq || !state.client) return;
  s.readTimer = setTimeout(async () => {
    const client = state.client;
    const seq = s.seen;
    try {
      if (client && seq > s.readSeq) {
        await client.markRead(s.id, seq);
        s.readSeq = Math.max(s.readSeq, seq);
      }
    } catch (err) {
      if (!(err instanceof ClosedError)) note(`read ${s.id}: ${err.message}`, 'warn');
      return; // the next event or opening of the session tries again
    } finally {
      s.readTimer = 0;
    }
    sendRead(s); // seen moved on while the receipt was in flight
  }, 150);
}

// ---------------------------------------------------------------- queries

function syncMembersSoon(s) {
  if (s.membersTimer) return;
  s.membersTimer = setTimeout(() => {
    s.membersTimer = 0;
    syncMembers(s).catch((err) => {
      if (!(err instanceof ClosedError)) note(`members of ${s.id}: ${err.message}`, 'warn');
    });
  }, 50);
}

// syncMembers applies member_changes after the member version held.
async function syncMembers(s) {
  const client = state.client;
  if (!client) return;
  for (;;) {
    const r = await client.memberChanges(s.id, s.memberVersion, 200);
    for (const c of r.changes) {
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
    s.memberVersion = Math.max(s.memberVersion, r.version);
    if (!r.hasMore) break;
  }
  scheduleRender();
}

// loadOlder pages back with sync before_seq, newest first.
async function loadOlder(s) {
  const client = state.client;
  if (!client || s.loadingOlder || !s.hasOlder) return;
  s.loadingOlder = true;
  try {
    const r = await client.syncBefore(s.id, s.oldest || s.storeMax + 1, OLDER_PAGE);
    for (const ev of r.messages) {
      addEvent(s, ev, false);
      if (s.oldest === 0 || ev.seq < s.oldest) s.oldest = ev.seq;
    }
    s.hasOlder = r.hasMore && r.messages.length > 0;
    note(`loaded ${plural(r.messages.length, 'older event')}`);
  } catch (err) {
    note(`older history: ${err.message}`, 'error');
  } finally {
    s.loadingOlder = false;
  }
  render({ keepTop: true });
}

// lookAround asks, for the opened session, who has read the user's latest
// message (seen_by: the stored read cursors) and who of the members is
// online: receipts only tell what changes from then on.
async function lookAround(s) {
  const client = state.client;
  if (!client) return;
  const mine = [...s.events.values()].filter((ev) => ev.kind === 'message' && ev.sender_user_id === state.user);
  const last = mine.reduce((m, ev) => Math.max(m, ev.seq), 0);
  try {
    if (last) {
      const r = await client.seenBy(s.id, last);
      for (const u of r.users) raise(s.read, u, last);
    }
    const others = [...s.members].filter((u) => u !== state.user).slice(0, 200);
    if (others.length) {
      const p = await client.presence(others);
      for (const x of p.presence) s.online.set(x.userId, x.online);
    }
  } catch (err) {
    if (!(err instanceof ClosedError)) note(`seen by / presence: ${err.message}`, 'warn');
  }
  scheduleRender();
}

// showSeenBy answers "who has read this?" for one of the user's messages.
async function showSeenBy(s, seq) {
  if (!state.client) return;
  try {
    const r = await state.client.seenBy(s.id, seq);
    for (const u of r.users) raise(s.read, u, seq);
    note(`#${seq} seen by ${r.users.length ? r.users.join(', ') : r.count ? r.count : 'nobody yet'} (of ${r.members} members)`);
  } catch (err) {
    note(`seen by: ${err.message}`, 'error');
  }
  scheduleRender();
}

// ---------------------------------------------------------------- commands

function fail(row, err) {
  row.failed = err.errorName || err.message;
  note(`send failed: ${err.errorName ? `${err.errorName}: ` : ''}${err.message}`, 'error');
  scheduleRender();
}

// track waits for a send's ACK. The pushed event may come before or after
// it; the ACK's seq and msg_id complete the row either way.
function track(p, row) {
  p.wait().then(
    (ack) => {
      const s = session(ack.sessionId || row.sessionId);
      if (!s.events.has(ack.seq)) {
        addEvent(s, {
          session_id: s.id, seq: ack.seq, msg_id: ack.msgId, client_msg_id: ack.clientMsgId,
          sender_user_id: state.user, sender_device_id: state.device, server_ts: ack.serverTs,
          kind: 'message', type: 'text', body: row.body,
        }, false);
      }
      state.pending.delete(row.id);
      if (ack.duplicate) note(`send retried: same seq ${ack.seq}, same msg_id (deduplicated)`);
      scheduleRender();
    },
    (err) => {
      if (err instanceof ClosedError) return; // the outbox keeps it for the next client
      fail(row, err);
    },
  );
}

async function sendText(body) {
  const s = state.sessions.get(state.current);
  if (!s) return;
  stopTyping();
  const row = { id: newMessageId(), sessionId: s.id, body, failed: '' };
  state.pending.set(row.id, row);
  render();
  if (!state.client && state.starting) await state.starting;
  if (!state.client) {
    // Disconnected by the user: the send goes straight into the outbox,
    // where the next client finds it and sends it with this ID.
    const frame = { op: 'send', client_msg_id: row.id, session_id: s.id, ...text(body), client_ts: Date.now() };
    state.offlineWrites = state.offlineWrites.then(async () => {
      const outbox = new IndexedDBOutbox(outboxName());
      try {
        await outbox.add(frame);
      } finally {
        await outbox.close();
      }
    }).catch((err) => fail(row, err));
    return;
  }
  let p;
  try {
    p = await state.client.postMessage(s.id, text(body), { clientMsgId: row.id });
  } catch (err) {
    fail(row, err);
    return;
  }
  track(p, row);
}

async function createDirect(peer) {
  if (!state.client) return note('not connected', 'error');
  const known = new Set(state.sessions.keys());
  try {
    const id = await state.client.openDirect(peer);
    const s = session(id);
    s.kind = 'direct';
    if (s.members.size === 0) s.members = new Set([state.user, peer]);
    note(known.has(id) ? `a direct session with ${peer} exists: opened it` : `direct session with ${peer} created`);
    openSession(id);
  } catch (err) {
    note(`direct session with ${peer}: ${err.errorName ? `${err.errorName}: ` : ''}${err.message}`, 'error');
  }
}

async function createGroup(title, members) {
  if (!state.client) return note('not connected', 'error');
  try {
    const ack = await state.client.createGroup(title, members);
    const s = session(ack.sessionId);
    s.kind = 'group';
    s.title = title;
    if (s.memberVersion === 0) {
      s.members = new Set([state.user, ...members]);
      s.roles.set(state.user, 'owner');
    }
    note(`group ${title || s.id} created at seq ${ack.seq}`);
    openSession(s.id);
  } catch (err) {
    note(`create group: ${err.errorName ? `${err.errorName}: ` : ''}${err.message}`, 'error');
  }
}

function typing() {
  const s = state.sessions.get(state.current);
  if (!s || !state.client || state.conn !== 'connected') return;
  if (!$('send-text').value.trim()) return stopTyping();
  if (state.typingIn === s.id && Date.now() - state.typingSent < TYPING_EVERY_MS) return;
  state.typingSent = Date.now();
  state.typingIn = s.id;
  state.client.setTyping(s.id, true).catch(() => {}); // ephemeral: a lost one expires by itself
}

function stopTyping() {
  if (!state.typingIn || !state.client) return;
  const id = state.typingIn;
  state.typingIn = '';
  state.typingSent = 0;
  if (state.conn === 'connected') state.client.setTyping(id, false).catch(() => {});
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
  if (conn === 'connected' && state.hello) text += ` · ${state.hello.gatewayId}`;
  if (detail) text += ` · ${detail}`;
  c.textContent = text;
  c.title = state.hello ? `conn ${state.hello.connId}` : '';
  const t = $('toggle');
  t.hidden = !state.token;
  t.textContent = state.online ? 'disconnect' : 'reconnect';
  if (conn !== 'connected') state.typingIn = '';
  scheduleRender();
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
  render();
  $('send-text').focus();
  markRead(s);
  if (s.memberVersion === 0 && !s.removed) syncMembersSoon(s);
  lookAround(s);
  if (s.hasOlder && s.events.size < 20) loadOlder(s);
}

function render(opts) {
  renderSessions();
  renderConversation(opts || {});
  renderComposer();
  document.title = `${state.totalUnread ? `(${state.totalUnread}) ` : ''}${state.user || 'log in'} · seqflow chat`;
}

function renderSessions() {
  const list = [...state.sessions.values()].sort((a, b) => lastTs(b) - lastTs(a) || a.id.localeCompare(b.id));
  $('sessions').replaceChildren(...list.map((s) => {
    const who = typers(s);
    return el('li', {
      'data-session': s.id, 'data-kind': s.kind, 'data-unread': s.unread, class: s.id === state.current ? 'active' : '', onclick: () => openSession(s.id),
    },
    el('span', { class: 'name' }, sessionName(s)),
    el('span', { class: `kind ${s.kind}` }, s.kind),
    s.unread ? el('span', { class: 'unread', title: 'unread, as the gateway counts them' }, String(s.unread)) : null,
    el('span', { class: `preview${who.length ? ' typing' : ''}` }, who.length ? `${who.join(', ')} typing…` : s.removed ? 'you were removed' : s.preview || ' '),
    el('span', { class: 'seqinfo' }, `seq ${Math.max(s.live, s.storeMax)}`));
  }));
  $('no-sessions').hidden = list.length > 0;
  $('total-unread').textContent = state.totalUnread ? `${state.totalUnread} unread` : '';
}

function lastTs(s) {
  let ts = 0;
  for (const ev of s.events.values()) ts = Math.max(ts, ev.server_ts || 0);
  return ts;
}

function renderConversation({ keepTop }) {
  const s = state.sessions.get(state.current);
  const ol = $('messages');
  if (!s) {
    $('conv-title').textContent = 'Pick a session';
    $('conv-meta').textContent = state.sessions.size ? '' : 'or start one on the left';
    $('people').hidden = true;
    $('typing').textContent = '';
    ol.replaceChildren();
    return;
  }
  $('conv-title').textContent = sessionName(s);
  $('conv-meta').dataset.memberVersion = String(s.memberVersion);
  $('conv-meta').replaceChildren(
    el('span', { class: `kind ${s.kind}` }, s.kind), ' ',
    el('span', { class: 'members' }, [...s.members].sort().map((u) => memberLabel(s, u)).join(', ')), ' ',
    el('code', { title: 'session_id' }, s.id));
  renderMembers(s);
  const who = typers(s);
  $('typing').textContent = who.length ? `${who.join(', ')} ${who.length === 1 ? 'is' : 'are'} typing…` : '';
  const fromBottom = ol.scrollHeight - ol.scrollTop - ol.clientHeight;
  const height = ol.scrollHeight;
  const rows = [];
  if (s.hasOlder) {
    rows.push(el('li', { class: 'older' }, el('button', {
      type: 'button', id: 'load-older', class: 'quiet', disabled: s.loadingOlder, onclick: () => loadOlder(s),
    }, s.loadingOlder ? 'loading…' : 'load older messages')));
  }
  let divided = !s.divider;
  for (const ev of [...s.events.values()].sort((a, b) => a.seq - b.seq)) {
    if (!divided && ev.seq > s.divider.after) {
      rows.push(el('li', { class: 'divider' }, s.divider.text));
      divided = true;
    }
    rows.push(eventRow(s, ev));
  }
  for (const row of state.pending.values()) {
    if (row.sessionId === s.id) rows.push(pendingRow(row));
  }
  ol.replaceChildren(...rows);
  if (keepTop) ol.scrollTop = ol.scrollHeight - height;
  else if (fromBottom < 40) ol.scrollTop = ol.scrollHeight;
}

function renderMembers(s) {
  $('people').hidden = false;
  $('member-count').textContent = String(s.members.size);
  $('member-list').replaceChildren(...[...s.members].sort().map((u) => {
    const online = s.online.get(u);
    return el('li', { 'data-user': u, 'data-role': s.roles.get(u) || 'member' },
      el('span', { class: `dot${u === state.user || online ? ' on' : ''}`, title: online === undefined && u !== state.user ? 'presence unknown' : online || u === state.user ? 'online' : 'offline' }),
      el('span', { class: 'user' }, u === state.user ? `${u} (you)` : u),
      memberTags(s, u));
  }));
}

function memberTags(s, u) {
  const role = s.roles.get(u);
  const muted = (s.muted.get(u) || 0) > Date.now();
  const tags = [role && role !== 'member' ? role : '', muted ? 'muted' : ''].filter(Boolean).join(' · ');
  return tags ? el('span', { class: 'role' }, tags) : null;
}

// ticks is what the user's own message shows of the others: in a direct
// session sent / delivered / read, in a group "seen by" (read cursors).
function ticks(s, ev) {
  const others = [...s.members].filter((u) => u !== state.user);
  if (s.kind === 'direct') {
    const peer = others[0] || '';
    const st = (s.read.get(peer) || 0) >= ev.seq ? 'read' : (s.delivered.get(peer) || 0) >= ev.seq ? 'delivered' : 'sent';
    return el('span', { class: `ticks ${st}`, 'data-state': st, title: st }, { sent: '✓ sent', delivered: '✓✓ delivered', read: '✓✓ read' }[st]);
  }
  const seen = others.filter((u) => (s.read.get(u) || 0) >= ev.seq).sort();
  return el('button', {
    type: 'button', class: 'seen', 'data-seen': seen.join(','), 'data-count': seen.length,
    title: 'ask the gateway who has read it', onclick: () => showSeenBy(s, ev.seq),
  }, seen.length === 0 ? 'seen by nobody yet' : seen.length <= 3 ? `seen by ${seen.join(', ')}` : `seen by ${seen.length}`);
}

function eventRow(s, ev) {
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
    el('span', { class: 'meta' }, `${ev.edited ? 'edited · ' : ''}msg_id `, el('code', { class: 'msgid' }, ev.msg_id || ''), ` · ${when}`,
      mine && !ev.recalled ? ' · ' : null, mine && !ev.recalled ? ticks(s, ev) : null));
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

function pendingRow(row) {
  const status = row.failed ? `failed: ${row.failed}` : state.conn === 'connected' ? 'sending' : 'queued until reconnect (kept in this browser)';
  return el('li', { class: `msg mine pending${row.failed ? ' failed' : ''}`, 'data-client-msg-id': row.id },
    el('span', { class: 'seq' }, '…'),
    el('span', { class: 'who' }, `${state.user}/${state.device}`),
    el('span', { class: 'body' }, row.body),
    el('span', { class: 'meta' }, status));
}

function renderComposer() {
  const s = state.sessions.get(state.current);
  const ok = !!s && !s.removed;
  $('send-text').disabled = !ok;
  $('send-button').disabled = !ok;
  $('send-text').placeholder = !s ? 'pick a session' : s.removed ? 'you are no longer a member'
    : state.conn === 'connected' ? `message ${sessionName(s)}` : 'offline: messages wait in this browser and are sent on reconnect';
}

// ---------------------------------------------------------------- wiring

function showChat() {
  $('login').hidden = true;
  $('chat').hidden = false;
  $('logout').hidden = false;
  $('conn').hidden = false;
  $('whoami').textContent = `${state.user}/${state.device}`;
  start();
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
    const body = $('send-text').value;
    if (!body.trim()) return;
    sendText(body);
    $('send-text').value = '';
  });
  $('send-text').addEventListener('input', typing);
  $('send-text').addEventListener('blur', stopTyping);
  $('toggle').addEventListener('click', () => (state.online ? disconnect() : start()));
  $('read-receipts').addEventListener('change', (e) => setReadReceipts(e.target.checked));
  $('devices-refresh').addEventListener('click', refreshDevices);
  $('logout').addEventListener('click', logout);

  const saved = JSON.parse(sessionStorage.getItem('seqflow.login') || 'null');
  if (saved && saved.token) {
    Object.assign(state, { token: saved.token, user: saved.user, device: saved.device, pasted: !!saved.pasted });
    showChat();
  }
}

init();
