// The Client: one user's device connected to seqflow (the TypeScript twin
// of the Go SDK in client/). It reconnects with backoff and jitter and
// catches up through changes and sync; commands get a client_msg_id once
// and are resent until answered; per-session seq tracking drops duplicates
// and fills gaps before later events reach the app; delivered receipts go
// out in batches; an optional outbox keeps unanswered commands across
// restarts. See README.md for the guarantees.
import { backoffDelay } from './backoff.js';
import { Conn } from './conn.js';
import { ClosedError, ConnectionLostError, ReplacedError, ServerError, SignedOutError, isAuth, } from './errors.js';
import { directSessionId, newMessageId } from './ids.js';
import { Receipts } from './receipts.js';
import { Receiver, sleep } from './receiver.js';
import { Sender } from './sender.js';
import { Tracker } from './tracker.js';
import { browserDialer } from './transport.js';
/** A text message. */
export function text(s) {
    return { type: 'text', body: s };
}
const nop = { info() { }, warn() { } };
/** wsURL normalizes a gateway URL: ws(s) scheme, /v1/ws by default. */
export function wsURL(s) {
    let u;
    try {
        u = new URL(s);
    }
    catch {
        throw new Error(`URL ${JSON.stringify(s)}: not a URL`);
    }
    switch (u.protocol) {
        case 'ws:':
        case 'wss:':
            break;
        case 'http:':
            u.protocol = 'ws:';
            break;
        case 'https:':
            u.protocol = 'wss:';
            break;
        default:
            throw new Error(`URL ${JSON.stringify(s)}: scheme must be ws, wss, http or https`);
    }
    if (u.pathname === '' || u.pathname === '/')
        u.pathname = '/v1/ws';
    return u.toString();
}
/**
 * Client is one user's device connected to seqflow. Open it with
 * Client.open (which reads the outbox), then run() it; its methods work
 * while run() runs, and commands posted before a connection exists are
 * sent once one does.
 */
export class Client {
    opts;
    stats = {
        connects: 0,
        posted: 0,
        resent: 0,
        retryableErrors: 0,
        accepted: 0,
        duplicateAcks: 0,
        delivered: 0,
        duplicatesDropped: 0,
        gaps: 0,
        gapTimeouts: 0,
        synced: 0,
        syncPages: 0,
        syncsPaced: 0,
    };
    /** The commands read from the outbox by open; resent once connected. Wait on them to learn their ACKs. */
    recovered = [];
    o;
    urls;
    log;
    dialer;
    snd;
    rcv;
    rcp;
    cur;
    connWaiters = [];
    userId = '';
    stopped = false;
    ran = false;
    stop = new AbortController();
    resyncTimer;
    recheckTimer;
    unread = new Map();
    totalUnread = 0;
    /** Use Client.open, which also reads the outbox. */
    constructor(opts) {
        this.opts = opts;
        const errs = [];
        if (!opts.urls || opts.urls.length === 0)
            errs.push('urls: at least one gateway URL is required');
        const urls = [];
        for (const u of opts.urls ?? []) {
            try {
                urls.push(wsURL(u));
            }
            catch (e) {
                errs.push(e.message);
            }
        }
        if (!opts.token && !opts.tokenSource)
            errs.push('no token: set token or tokenSource');
        if (opts.platform !== undefined && !/^[a-z0-9_-]{1,16}$/.test(opts.platform))
            errs.push(`platform ${JSON.stringify(opts.platform)}: [a-z0-9_-], up to 16 bytes`);
        const num = (v, def, name, lo = 0, hi = Infinity) => {
            if (v === undefined || v === 0)
                return def;
            if (!Number.isFinite(v) || v < lo || v > hi)
                errs.push(`${name}: ${v} not in ${lo}..${hi}`);
            return v;
        };
        this.o = {
            inFlight: num(opts.inFlight, 32, 'inFlight', 1, 10_000),
            ackTimeoutMs: num(opts.ackTimeoutMs, 10_000, 'ackTimeoutMs'),
            acceptedTimeoutMs: num(opts.acceptedTimeoutMs, 3_000, 'acceptedTimeoutMs'),
            minBackoffMs: num(opts.minBackoffMs, 100, 'minBackoffMs'),
            maxBackoffMs: num(opts.maxBackoffMs, 5_000, 'maxBackoffMs'),
            deliveredCount: num(opts.deliveredCount, 64, 'deliveredCount', 1),
            deliveredIntervalMs: num(opts.deliveredIntervalMs, 100, 'deliveredIntervalMs'),
            syncLimit: num(opts.syncLimit, 200, 'syncLimit', 1, 200),
            gapTimeoutMs: num(opts.gapTimeoutMs, 10_000, 'gapTimeoutMs'),
            gapWaitMs: Math.max(opts.gapWaitMs || 250, 0),
            syncBudget: num(opts.syncBudget, 10, 'syncBudget'),
            resyncIntervalMs: opts.resyncIntervalMs || 30_000,
            recheckAfterMs: opts.recheckAfterMs || 1_000,
            requestTimeoutMs: num(opts.requestTimeoutMs, 30_000, 'requestTimeoutMs'),
        };
        if (this.o.maxBackoffMs < this.o.minBackoffMs)
            errs.push(`maxBackoffMs ${this.o.maxBackoffMs} is below minBackoffMs ${this.o.minBackoffMs}`);
        if (errs.length > 0)
            throw new Error(`client options: ${errs.join('; ')}`);
        this.urls = urls;
        this.log = opts.logger ?? nop;
        this.dialer = opts.dialer ?? browserDialer();
        this.snd = new Sender(this.o.inFlight, this.o.ackTimeoutMs, this.o.acceptedTimeoutMs, this.o.minBackoffMs, this.o.maxBackoffMs, opts.outbox, this.stats);
        this.snd.onFinish = opts.onFinish;
        this.rcp = new Receipts(this.o.deliveredCount, this.o.deliveredIntervalMs, (cs) => this.writeDelivered(cs));
        this.rcv = new Receiver(new Tracker(opts.cursors ?? {}, opts.skipHistory ?? false), (s, after) => this.syncPage(s, after), { gapTimeoutMs: this.o.gapTimeoutMs, gapWaitMs: this.o.gapWaitMs, syncBudget: this.o.syncBudget }, this.stats, opts.onEvent, (s, seq) => this.rcp.add(s, seq), (e) => this.log.warn('onEvent threw', { err: String(e) }), opts.cursors ?? {});
    }
    /** open validates opts, applies defaults and reads the outbox (its commands become recovered). */
    static async open(opts) {
        const c = new Client(opts);
        await c.loadOutbox();
        return c;
    }
    async loadOutbox() {
        if (this.opts.outbox)
            this.recovered = this.snd.recover(await this.opts.outbox.load());
    }
    /**
     * run connects, reconnects with backoff and jitter, and serves until
     * close() is called, then resolves. It rejects early only when the token
     * is refused and there is no tokenSource to get another (HandshakeError),
     * when the device is signed out (SignedOutError), or when the login
     * policy replaced the connection (ReplacedError). Commands still in
     * flight then fail with ClosedError (the outbox keeps them). run may be
     * called once.
     */
    async run() {
        if (this.ran)
            throw new Error('client: run called twice');
        this.ran = true;
        if (this.o.resyncIntervalMs > 0) {
            this.resyncTimer = setInterval(() => this.resyncQuietly(), this.o.resyncIntervalMs);
        }
        try {
            await this.connectLoop();
        }
        finally {
            await this.shutdown();
        }
    }
    /** close stops run(): the connection is closed, commands in flight fail with ClosedError (an outbox keeps them). */
    close() {
        if (this.stopped)
            return;
        this.stopped = true;
        this.stop.abort(new ClosedError());
        this.cur?.kill(new ClosedError());
    }
    async shutdown() {
        this.stopped = true;
        this.stop.abort(new ClosedError());
        clearInterval(this.resyncTimer);
        clearTimeout(this.recheckTimer);
        this.rcp.flush();
        this.rcp.close();
        this.cur?.kill(new ClosedError());
        this.cur = undefined;
        for (const w of this.connWaiters.splice(0))
            w.reject(new ClosedError());
        this.snd.close();
        await this.rcv.close();
        await this.opts.outbox?.close();
    }
    async connectLoop() {
        let attempt = 0;
        let i = 0;
        while (!this.stopped) {
            const u = this.urls[i % this.urls.length];
            let cn;
            try {
                cn = await this.dial(u);
            }
            catch (e) {
                if (this.stopped)
                    return;
                if (isAuth(e) && !this.opts.tokenSource)
                    throw e;
                this.log.warn('connect to gateway', { url: u, attempt, err: String(e) });
                i++;
            }
            if (cn) {
                const began = Date.now();
                const err = await this.serve(cn, u);
                if (this.stopped)
                    return;
                this.log.info('connection lost', { url: u, gateway_id: cn.hello.gateway_id, err: err.message });
                this.opts.onDisconnect?.(err);
                // Reconnecting cannot help: the token is dead, or it would close
                // the newer connection in turn.
                if (err instanceof SignedOutError || err instanceof ReplacedError)
                    throw err;
                if (Date.now() - began > 10_000)
                    attempt = 0;
            }
            await this.pause(backoffDelay(this.o.minBackoffMs, this.o.maxBackoffMs, attempt));
            attempt++;
        }
    }
    /** pause sleeps ms, or less when the client is closed. */
    pause(ms) {
        return new Promise((resolve) => {
            const t = setTimeout(done, ms);
            function done() {
                clearTimeout(t);
                resolve();
            }
            this.stop.signal.addEventListener('abort', done, { once: true });
        });
    }
    async dial(u) {
        const tok = this.opts.tokenSource ? await this.opts.tokenSource() : this.opts.token;
        let url = u;
        if (this.opts.platform) {
            const p = new URL(u);
            p.searchParams.set('platform', this.opts.platform);
            url = p.toString();
        }
        const signal = AbortSignal.any([this.stop.signal, AbortSignal.timeout(this.o.requestTimeoutMs)]);
        const sock = await this.dialer(url, tok, signal);
        const cn = await Conn.open(sock, (f) => this.onFrame(f));
        if (this.stopped) {
            cn.kill(new ClosedError());
            throw new ClosedError();
        }
        return cn;
    }
    /**
     * serve runs one connection: pushes are held until the changes result
     * has set every session's catch-up target, commands in flight are
     * resent, dirty delivered cursors are flushed. It resolves with why the
     * connection died.
     */
    async serve(cn, u) {
        this.stats.connects++;
        this.rcv.hold();
        this.cur = cn;
        this.userId = cn.hello.user_id ?? '';
        this.rcv.setSelf(this.userId);
        for (const w of this.connWaiters.splice(0))
            w.resolve(cn);
        this.log.info('connected', { url: u, gateway_id: cn.hello.gateway_id, conn_id: cn.hello.conn_id });
        this.opts.onConnect?.({
            connId: cn.hello.conn_id ?? '',
            userId: cn.hello.user_id ?? '',
            deviceId: cn.hello.device_id ?? '',
            gatewayId: cn.hello.gateway_id ?? '',
            url: u,
        });
        this.snd.attach(cn);
        try {
            const r = await cn.request({ op: 'changes' }, this.o.requestTimeoutMs);
            this.seedUnread(r);
            this.rcv.catchUp(r.sessions ?? []);
        }
        catch (e) {
            this.log.warn('catch-up changes', { err: String(e) });
            this.rcv.release();
        }
        this.rcp.retry();
        if (this.o.recheckAfterMs > 0 && !cn.dead) {
            clearTimeout(this.recheckTimer);
            this.recheckTimer = setTimeout(() => this.resyncQuietly(), this.o.recheckAfterMs);
        }
        const err = await cn.closed;
        if (this.cur === cn)
            this.cur = undefined;
        this.snd.attach(undefined);
        return err;
    }
    resyncQuietly() {
        if (this.stopped || !this.cur)
            return;
        this.resync().catch((e) => {
            if (!this.stopped)
                this.log.warn('resync', { err: String(e) });
        });
    }
    /** onFrame handles every frame that answers no request. */
    onFrame(f) {
        switch (f.op) {
            case 'event':
                if (typeof f.unread === 'number' && typeof f.total_unread === 'number') {
                    this.setUnread({ sessionId: f.event.session_id, unread: f.unread, totalUnread: f.total_unread });
                }
                this.rcv.push(f.event);
                return;
            case 'unread':
                if (f.session_id && typeof f.unread === 'number') {
                    this.setUnread({ sessionId: f.session_id, unread: f.unread, totalUnread: f.total_unread ?? 0, readSeq: f.read_seq ?? 0 });
                }
                return;
            case 'typing':
                if (f.session_id && f.user_id) {
                    this.opts.onTyping?.({
                        sessionId: f.session_id,
                        userId: f.user_id,
                        deviceId: f.device_id ?? '',
                        active: f.active === true,
                        expiresInMs: f.expires_in_ms ?? 0,
                    });
                }
                return;
            case 'receipt':
                if (f.session_id && f.user_id && (f.seq ?? 0) > 0) {
                    this.opts.onReceipt?.({ sessionId: f.session_id, userId: f.user_id, kind: f.kind ?? '', seq: f.seq });
                }
                return;
            case 'ack':
            case 'seq_notice':
            case 'error':
                if (f.client_msg_id)
                    this.snd.onFrame(f);
                else if (f.op === 'error')
                    this.log.warn('gateway error', { code: f.error?.code, name: f.error?.name, message: f.error?.message });
                return;
        }
    }
    seedUnread(r) {
        this.unread.clear();
        for (const s of r.sessions ?? [])
            this.unread.set(s.session_id, s.unread ?? 0);
        this.totalUnread = r.total_unread ?? 0;
        if (this.opts.onUnread) {
            for (const s of r.sessions ?? [])
                this.opts.onUnread({ sessionId: s.session_id, unread: s.unread ?? 0, totalUnread: this.totalUnread, readSeq: s.read_seq });
        }
    }
    setUnread(u) {
        this.unread.set(u.sessionId, u.unread);
        this.totalUnread = u.totalUnread;
        this.opts.onUnread?.(u);
    }
    /** The unread counts as the gateway last told them (after changes, per event and per read), and their total. */
    unreadCounts() {
        return { sessions: Object.fromEntries(this.unread), total: this.totalUnread };
    }
    /** waitConn resolves with the current connection, waiting for one. */
    waitConn() {
        if (this.stopped)
            return Promise.reject(new ClosedError());
        if (this.cur && !this.cur.dead)
            return Promise.resolve(this.cur);
        return new Promise((resolve, reject) => this.connWaiters.push({ resolve, reject }));
    }
    /**
     * request sends f on the current connection and resolves with its
     * answer, retrying on the next connection after a lost one and after
     * retryable errors, until the client closes. A final error frame
     * rejects with ServerError.
     */
    async request(f) {
        for (let attempt = 0;; attempt++) {
            const cn = await this.waitConn();
            try {
                return await cn.request(f, this.o.requestTimeoutMs);
            }
            catch (e) {
                if (this.stopped)
                    throw new ClosedError();
                if (e instanceof ServerError && !e.retryable)
                    throw e;
            }
            await this.pause(backoffDelay(this.o.minBackoffMs, this.o.maxBackoffMs, attempt));
            if (this.stopped)
                throw new ClosedError();
        }
    }
    async syncPage(session, after) {
        const r = await this.request({ op: 'sync', session_id: session, after_seq: after, limit: this.o.syncLimit });
        return { messages: r.messages ?? [], hasMore: r.has_more === true };
    }
    writeDelivered(cursors) {
        const cn = this.cur;
        if (!cn || cn.dead)
            throw new ConnectionLostError();
        cn.send({ op: 'delivered', cursors });
    }
    // ------------------------------------------------------------ commands
    post(f, signal) {
        if (this.stopped)
            return Promise.reject(new ClosedError());
        if (!f.client_msg_id)
            f.client_msg_id = newMessageId();
        return this.snd.post(f, signal);
    }
    async command(f, signal) {
        return (await this.post(f, signal)).wait();
    }
    /**
     * postMessage sends a message without waiting for its ACK: it enters the
     * in-flight window (waiting while the window is full, until signal
     * aborts) and is resent with the same client_msg_id until the gateway
     * answers it. Await pending.wait() for the ACK. clientMsgId lets an app
     * that records the ID before the message leaves choose it (newMessageId);
     * posting an ID already in flight returns the command in flight.
     */
    postMessage(sessionId, content, o = {}) {
        const f = { op: 'send', session_id: sessionId, type: content.type, body: content.body, client_ts: Date.now() };
        if (o.clientMsgId)
            f.client_msg_id = o.clientMsgId;
        return this.post(f, o.signal);
    }
    /** send sends a message and resolves with its ACK (seq, msgId). */
    async send(sessionId, content, o = {}) {
        return (await this.postMessage(sessionId, content, o)).wait();
    }
    /** edit replaces the content of the user's own message at targetSeq. */
    edit(sessionId, targetSeq, content) {
        return this.command({ op: 'edit', session_id: sessionId, target_seq: targetSeq, type: content.type, body: content.body });
    }
    /** recall withdraws the user's own message at targetSeq. */
    recall(sessionId, targetSeq) {
        return this.command({ op: 'recall', session_id: sessionId, target_seq: targetSeq });
    }
    /** createGroup creates a group of the user and members; the Ack carries the new session ID. A resend yields the same group. */
    createGroup(title, members = [], settings) {
        const f = { op: 'create_session', kind: 'group', title, member_user_ids: members };
        if (settings)
            f.settings = settings;
        return this.command(f);
    }
    /** openDirect returns the direct session of the user and peer, creating it when it does not exist yet. */
    async openDirect(peer) {
        try {
            return (await this.command({ op: 'create_session', kind: 'direct', peer_user_id: peer })).sessionId;
        }
        catch (e) {
            if (e instanceof ServerError && e.errorName === 'session_exists')
                return directSessionId(await this.getUserId(), peer);
            throw e;
        }
    }
    /** addMembers adds users to a group (who may is the group's rules: a refusal is a ServerError such as not_permitted). */
    addMembers(sessionId, users) {
        return this.command({ op: 'members', session_id: sessionId, action: 'add', user_ids: users });
    }
    /** removeMembers removes (kicks) users from a group. */
    removeMembers(sessionId, users) {
        return this.command({ op: 'members', session_id: sessionId, action: 'remove', user_ids: users });
    }
    /** leave removes the user from a group (the owner cannot: transfer ownership or dissolve first). */
    leave(sessionId) {
        return this.command({ op: 'members', session_id: sessionId, action: 'leave' });
    }
    group(sessionId, f) {
        return this.command({ ...f, op: 'group', session_id: sessionId });
    }
    /** join joins a group whose join rule is open, or with its invite code. */
    join(sessionId, inviteCode) {
        return this.group(sessionId, inviteCode ? { action: 'join', invite_code: inviteCode } : { action: 'join' });
    }
    /** setRole makes a member an admin or a plain member; the owner only. */
    setRole(sessionId, userId, role) {
        return this.group(sessionId, { action: 'set_role', user_id: userId, role });
    }
    /** transferOwnership makes a member the owner; the caller becomes an admin. */
    transferOwnership(sessionId, userId) {
        return this.group(sessionId, { action: 'transfer_ownership', user_id: userId });
    }
    /** mute stops a member from sending until untilMs (Unix ms; 0 lifts it). */
    mute(sessionId, userId, untilMs) {
        const f = { action: 'mute', user_id: userId };
        if (untilMs > 0)
            f.muted_until_ms = untilMs;
        return this.group(sessionId, f);
    }
    /** muteAll mutes (or unmutes) every plain member; admins still speak. */
    muteAll(sessionId, muted) {
        return this.group(sessionId, { action: 'mute_all', muted });
    }
    /** editGroup changes the settings that are set in s. */
    editGroup(sessionId, s) {
        return this.group(sessionId, { action: 'edit', settings: s });
    }
    /** dissolve ends a group (the owner only); later commands to it are refused with group_dissolved. */
    dissolve(sessionId) {
        return this.group(sessionId, { action: 'dissolve' });
    }
    // ------------------------------------------------------------- queries
    /** memberList returns one page of a group's current members after afterUser in user ID order, and the member version. */
    async memberList(sessionId, afterUser = '', limit = 0) {
        const f = { op: 'member_list', session_id: sessionId };
        if (afterUser)
            f.after_user_id = afterUser;
        if (limit)
            f.limit = limit;
        const r = await this.request(f);
        return { members: Array.isArray(r.members) ? r.members : [], hasMore: r.has_more === true, version: r.member_version ?? 0 };
    }
    /** memberChanges returns what changed in a group's members after since (a member version; 0: everything). */
    async memberChanges(sessionId, since = 0, limit = 0) {
        const f = { op: 'member_changes', session_id: sessionId };
        if (since)
            f.since_version = since;
        if (limit)
            f.limit = limit;
        const r = await this.request(f);
        return { changes: r.changes ?? [], version: r.member_version ?? 0, hasMore: r.has_more === true };
    }
    /** sync returns a page of a session's events after afterSeq, in their current state (the app's event stream is not touched). */
    async sync(sessionId, afterSeq = 0, limit = 0) {
        const f = { op: 'sync', session_id: sessionId };
        if (afterSeq)
            f.after_seq = afterSeq;
        if (limit)
            f.limit = limit;
        const r = await this.request(f);
        return { messages: r.messages ?? [], hasMore: r.has_more === true };
    }
    /** syncBefore returns a page of events before beforeSeq, newest first (scrolling back). */
    async syncBefore(sessionId, beforeSeq, limit = 0) {
        const f = { op: 'sync', session_id: sessionId, before_seq: beforeSeq };
        if (limit)
            f.limit = limit;
        const r = await this.request(f);
        return { messages: r.messages ?? [], hasMore: r.has_more === true };
    }
    /** syncAround returns a page around seq, in seq order, to jump to a message: the event at seq (or the first after it) and up to (limit-1)/2 older ones. */
    async syncAround(sessionId, seq, limit = 0) {
        const f = { op: 'sync', session_id: sessionId, around_seq: seq };
        if (limit)
            f.limit = limit;
        const r = await this.request(f);
        return { messages: r.messages ?? [], hasMoreBefore: r.has_more_before === true, hasMore: r.has_more === true };
    }
    /** devices lists the user's devices seen within the gateway's retention and not signed out: online ones first. */
    async devices() {
        const r = await this.request({ op: 'devices' });
        return (r.devices ?? []).map((d) => ({
            deviceId: d.device_id,
            platform: d.platform ?? '',
            online: d.online === true,
            connections: d.connections ?? 0,
            lastSeenMs: d.last_seen_ms ?? 0,
            current: d.current === true,
        }));
    }
    /**
     * signOutDevice signs one of the user's devices out on every gateway:
     * its tokens issued up to the returned time (Unix seconds) are refused
     * from now on. Signing out this client's own device makes run() reject
     * with SignedOutError.
     */
    async signOutDevice(deviceId) {
        const r = await this.request({ op: 'sign_out', device_id: deviceId });
        return r.signed_out_at ?? 0;
    }
    /** presence asks for up to 200 users' presence; users the caller shares no session with come back in notVisible. */
    async presence(users) {
        const r = await this.request({ op: 'presence', user_ids: users });
        const presence = (r.presence ?? []).map((p) => ({
            userId: p.user_id,
            online: p.online === true,
            platforms: p.platforms ?? [],
            lastSeenMs: p.last_seen_ms ?? 0,
        }));
        return { presence, notVisible: r.not_visible ?? [] };
    }
    /** changes returns every session of the user with its max_seq, read_seq and unread count, and the total. */
    async changes() {
        const r = await this.request({ op: 'changes' });
        return { sessions: r.sessions ?? [], totalUnread: r.total_unread ?? 0 };
    }
    /** markRead sends a read receipt; it resolves once the receipt is durable. */
    async markRead(sessionId, seq) {
        await this.request({ op: 'read', session_id: sessionId, seq });
    }
    /** seenBy returns who of the session's current members has read it up to seq (the sender left out), their count and the member count. */
    async seenBy(sessionId, seq) {
        const r = await this.request({ op: 'seen_by', session_id: sessionId, seq });
        return { users: r.users ?? [], count: r.count ?? 0, members: typeof r.members === 'number' ? r.members : 0 };
    }
    /** setReadReceipts turns the user's read receipts on or off on every device; it resolves with the setting in effect. */
    async setReadReceipts(on) {
        const r = await this.request({ op: 'settings', read_receipts: on });
        return r.read_receipts !== false;
    }
    /** readReceipts resolves with whether the user's read receipts are on. */
    async readReceipts() {
        const r = await this.request({ op: 'settings' });
        return r.read_receipts !== false;
    }
    /** setTyping tells the session's other members that the user is typing (active) or stopped; sent once, never resent. */
    async setTyping(sessionId, active) {
        const cn = await this.waitConn();
        await cn.request({ op: 'typing', session_id: sessionId, active }, this.o.requestTimeoutMs);
    }
    /** resync runs changes now and starts the syncs it calls for, as a reconnect would. */
    async resync() {
        const r = await this.request({ op: 'changes' });
        this.seedUnread(r);
        this.rcv.catchUp(r.sessions ?? []);
    }
    /** cursors returns, per session, the highest seq handed to onEvent: pass it as cursors to a later client to resume there. */
    cursors() {
        return this.rcv.cursors();
    }
    /** getUserId resolves with the user's ID as the gateway knows it (waits for a connection the first time). */
    async getUserId() {
        if (this.userId)
            return this.userId;
        return (await this.waitConn()).hello.user_id ?? '';
    }
    /** Commands posted and not yet answered. */
    get inFlight() {
        return this.snd.size;
    }
}
export { sleep };
