// The window of commands in flight (client/sender.go): each command is
// (re)sent with the same client_msg_id at once on the current connection,
// again on every new connection, again when its ACK is overdue, and after
// a backoff when the gateway answered with a retryable error, until it
// gets an ok ACK or a final error.
import { backoffDelay } from './backoff.js';
import { ClosedError, ServerError } from './errors.js';
/**
 * A command in flight: resent with the same client_msg_id until the
 * gateway answers it with an ok ACK or a final error.
 */
export class Pending {
    frame;
    recovered;
    /** Generated once (UUIDv7) and reused by every resend. */
    clientMsgId;
    /** When the command entered the window, Unix ms. */
    posted = Date.now();
    /** Resolves with the Ack; rejects with a ServerError (final) or ClosedError. */
    ack;
    finished = false;
    result;
    error;
    sentOn;
    sentAt = 0;
    /** After a retryable error: not before. */
    retryAt = 0;
    /** Answered "accepted": waiting for the seq_notice. */
    accepted = false;
    attempts = 0;
    resolve;
    reject;
    constructor(frame, 
    /** Read from the outbox: holds no window slot. */
    recovered) {
        this.frame = frame;
        this.recovered = recovered;
        this.clientMsgId = frame.client_msg_id;
        this.ack = new Promise((res, rej) => {
            this.resolve = res;
            this.reject = rej;
        });
        // The app may never wait on a command; its rejection is not unhandled.
        this.ack.catch(() => { });
    }
    /** wait resolves with the Ack once the command is answered. Giving up the wait does not withdraw the command. */
    wait() {
        return this.ack;
    }
}
export class Sender {
    inFlight;
    ackTimeoutMs;
    acceptedTimeoutMs;
    minBackoffMs;
    maxBackoffMs;
    outbox;
    stats;
    resendEveryMs;
    onFinish;
    cur;
    byId = new Map();
    /** Posting order; finished ones removed lazily. */
    order = [];
    slots = 0;
    slotWaiters = [];
    closed = false;
    timer;
    constructor(inFlight, ackTimeoutMs, acceptedTimeoutMs, minBackoffMs, maxBackoffMs, outbox, stats, resendEveryMs = 50) {
        this.inFlight = inFlight;
        this.ackTimeoutMs = ackTimeoutMs;
        this.acceptedTimeoutMs = acceptedTimeoutMs;
        this.minBackoffMs = minBackoffMs;
        this.maxBackoffMs = maxBackoffMs;
        this.outbox = outbox;
        this.stats = stats;
        this.resendEveryMs = resendEveryMs;
    }
    /** Commands not yet answered. */
    get size() {
        return this.byId.size;
    }
    /**
     * post enters f into the window (waiting while the window is full, until
     * signal aborts), records it in the outbox and sends it if connected.
     * Posting a client_msg_id already in flight returns the command in flight.
     */
    async post(f, signal) {
        if (this.closed)
            throw new ClosedError();
        const old = this.byId.get(f.client_msg_id);
        if (old && !old.finished)
            return old;
        await this.takeSlot(signal);
        if (this.outbox) {
            try {
                await this.outbox.add(f);
            }
            catch (e) {
                this.releaseSlot();
                throw e;
            }
        }
        if (this.closed) {
            this.releaseSlot();
            throw new ClosedError();
        }
        const again = this.byId.get(f.client_msg_id);
        if (again && !again.finished) {
            this.releaseSlot();
            return again;
        }
        const p = new Pending(f, false);
        this.track(p);
        this.stats.posted++;
        if (this.cur && !this.cur.dead)
            this.sendNow(p, this.cur, Date.now());
        return p;
    }
    takeSlot(signal) {
        if (this.slots < this.inFlight && this.slotWaiters.length === 0) {
            this.slots++;
            return Promise.resolve();
        }
        signal?.throwIfAborted();
        return new Promise((resolve, reject) => {
            const w = {
                resolve: () => {
                    signal?.removeEventListener('abort', onAbort);
                    resolve();
                },
                reject,
            };
            const onAbort = () => {
                const i = this.slotWaiters.indexOf(w);
                if (i >= 0)
                    this.slotWaiters.splice(i, 1);
                reject(signal.reason);
            };
            signal?.addEventListener('abort', onAbort, { once: true });
            this.slotWaiters.push(w);
        });
    }
    releaseSlot() {
        const w = this.slotWaiters.shift();
        if (w)
            w.resolve(); // the slot passes to the waiter
        else
            this.slots--;
    }
    track(p) {
        const old = this.byId.get(p.clientMsgId);
        if (old && !old.finished)
            return;
        this.byId.set(p.clientMsgId, p);
        this.order.push(p);
        this.arm();
    }
    /** recover adds commands read from the outbox; they hold no window slot. */
    recover(frames) {
        const out = [];
        for (const f of frames) {
            if (!f.client_msg_id)
                continue;
            this.track(new Pending(f, true));
            out.push(this.byId.get(f.client_msg_id));
        }
        return out;
    }
    sendNow(p, c, now) {
        if (p.attempts > 0)
            this.stats.resent++;
        p.attempts++;
        p.sentOn = c;
        p.sentAt = now;
        p.retryAt = 0;
        p.accepted = false;
        try {
            c.send(p.frame);
        }
        catch {
            // A dead connection is found out by the next connection's attach.
        }
    }
    /** attach makes c the current connection (undefined: none) and resends, in posting order, every command not yet answered. */
    attach(c) {
        this.cur = c;
        if (!c)
            return;
        const now = Date.now();
        for (const p of this.live()) {
            if (p.retryAt > now)
                continue;
            this.sendNow(p, c, now);
        }
    }
    live() {
        this.order = this.order.filter((p) => !p.finished);
        return this.order;
    }
    /** The resend scan runs every resendEveryMs while commands are in flight, and not at all while none is. */
    arm() {
        if (this.timer !== undefined || this.closed)
            return;
        this.timer = setInterval(() => {
            if (!this.scan(Date.now())) {
                clearInterval(this.timer);
                this.timer = undefined;
            }
        }, this.resendEveryMs);
    }
    /**
     * scan resends what is overdue: not sent on the current connection, ACK
     * missing for ackTimeout, or a retryable error's backoff elapsed. It
     * reports whether any command is still in flight.
     */
    scan(now) {
        const c = this.cur;
        if (!c || c.dead)
            return this.byId.size > 0;
        for (const p of this.live()) {
            if (p.retryAt !== 0) {
                if (now >= p.retryAt)
                    this.sendNow(p, c, now);
            }
            else if (p.sentOn !== c ||
                now - p.sentAt >= this.ackTimeoutMs ||
                (p.accepted && now - p.sentAt >= this.acceptedTimeoutMs)) {
                this.sendNow(p, c, now);
            }
        }
        return this.byId.size > 0;
    }
    /** onFrame handles an ack, seq_notice or error that names a client_msg_id. */
    onFrame(f) {
        const p = this.byId.get(f.client_msg_id ?? '');
        if (!p || p.finished)
            return;
        const now = Date.now();
        if (f.op === 'error' && f.error) {
            if (f.error.retryable) {
                this.stats.retryableErrors++;
                p.retryAt = now + backoffDelay(this.minBackoffMs, this.maxBackoffMs, p.attempts - 1);
                return;
            }
            this.finish(p, undefined, new ServerError(f.error, f.client_msg_id));
            return;
        }
        switch (f.status) {
            case 'accepted':
                // Durable in Kafka; the seq follows as a seq_notice. Ask again
                // after acceptedTimeout in case the notice is lost.
                p.sentAt = now;
                p.accepted = true;
                this.stats.accepted++;
                return;
            case 'refused':
                // The group's rules refused it after an "accepted" (a seq_notice).
                if (f.error)
                    this.finish(p, undefined, new ServerError(f.error, f.client_msg_id));
                return;
            case 'ok':
                this.finish(p, {
                    clientMsgId: p.clientMsgId,
                    sessionId: f.session_id ?? '',
                    seq: f.seq,
                    msgId: f.msg_id ?? '',
                    serverTs: f.server_ts ?? 0,
                    duplicate: f.duplicate === true,
                });
                return;
        }
    }
    finish(p, a, err) {
        p.finished = true;
        p.result = a;
        p.error = err;
        this.byId.delete(p.clientMsgId);
        if (a?.duplicate)
            this.stats.duplicateAcks++;
        // A lost "done" costs one duplicate resend.
        this.outbox?.done(p.clientMsgId).catch(() => { });
        if (!p.recovered)
            this.releaseSlot();
        if (err)
            p.reject(err);
        else
            p.resolve(a);
        this.onFinish?.(p);
    }
    /** close fails every command still in flight with ClosedError; the outbox keeps them for the next client. */
    close() {
        this.closed = true;
        clearInterval(this.timer);
        this.timer = undefined;
        for (const p of this.live()) {
            p.finished = true;
            p.error = new ClosedError();
            p.reject(p.error);
        }
        this.byId.clear();
        this.order = [];
        for (const w of this.slotWaiters.splice(0))
            w.reject(new ClosedError());
    }
}
