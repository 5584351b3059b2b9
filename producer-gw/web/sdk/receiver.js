// The receive path (client/receiver.go): pushes and sync pages become one
// ordered stream of events for the app. The tracker decides; a fill runs
// per session that needs one; a dispatcher hands the app one event at a
// time (awaiting it when the handler returns a promise), in the order the
// tracker released them, then records the event for delivered receipts.
import { TokenBucket } from './budget.js';
import { ServerError } from './errors.js';
export class Receiver {
    tracker;
    sync;
    rc;
    stats;
    handle;
    delivered;
    onHandlerError;
    initial;
    pollMinMs = 20;
    pollMaxMs = 500;
    queue = [];
    dispatching = false;
    closed = false;
    fills = new Set();
    /** Per session, the highest seq handed to the app. */
    handed = new Map();
    budget;
    /** The fills' waits in progress, ended early by close. */
    wakers = new Set();
    constructor(tracker, sync, rc, stats, handle, delivered, onHandlerError, initial = {}) {
        this.tracker = tracker;
        this.sync = sync;
        this.rc = rc;
        this.stats = stats;
        this.handle = handle;
        this.delivered = delivered;
        this.onHandlerError = onHandlerError;
        this.initial = initial;
        this.budget = new TokenBucket(rc.syncBudget, Math.max(Math.floor(2 * rc.syncBudget), 1));
    }
    /** setSelf records the user's ID (each connection's hello names it). */
    setSelf(user) {
        this.tracker.self = user;
    }
    /** hold buffers pushes until catchUp: called when a connection opens. */
    hold() {
        this.tracker.holding = true;
    }
    push(m) {
        const res = this.tracker.push(m, Date.now());
        if (res.duplicate)
            this.stats.duplicatesDropped++;
        this.emit(res.deliver);
        if (res.startFill) {
            this.stats.gaps++;
            this.startFill(m.session_id, this.rc.gapWaitMs);
        }
    }
    /** catchUp applies a connection's changes result and starts the fills it calls for. */
    catchUp(changes) {
        for (const s of this.tracker.catchUp(changes, Date.now()))
            this.startFill(s, 0);
    }
    /** release ends holding without a changes result: buffered sessions are filled as if a push showed a gap. */
    release() {
        this.catchUp([]);
    }
    /**
     * startFill starts a fill of session after waitMs: a gap a push showed is
     * often closed by the pushes behind it (a push path that lagged or
     * reordered), and a fill started at once would fetch what they bring.
     * The session stays marked filling meanwhile, so its later pushes do not
     * start fills of their own.
     */
    startFill(session, waitMs) {
        if (this.closed) {
            this.tracker.get(session).filling = false;
            return;
        }
        const p = this.fill(session, waitMs).finally(() => this.fills.delete(p));
        this.fills.add(p);
    }
    /** fill syncs session from have until the tracker says the gap is closed, polling with a growing pause while the store lags. */
    async fill(session, waitMs) {
        if (waitMs > 0) {
            await this.pause(waitMs);
            if (this.closed || !this.tracker.needsFill(session)) {
                this.tracker.get(session).filling = false;
                return;
            }
        }
        let pause = this.pollMinMs;
        for (;;) {
            if (!(await this.paced())) {
                this.tracker.get(session).filling = false;
                return;
            }
            const after = this.tracker.fillFrom(session);
            this.stats.syncPages++;
            let page;
            try {
                page = await this.sync(session, after);
            }
            catch (e) {
                if (e instanceof ServerError)
                    this.tracker.abandon(session); // e.g. not_a_member: the user left
                else
                    this.tracker.get(session).filling = false; // closing; the next client catches up
                return;
            }
            if (this.closed) {
                this.tracker.get(session).filling = false;
                return;
            }
            this.stats.synced += page.messages.length;
            const res = this.tracker.synced(session, page.messages, page.hasMore, Date.now(), this.rc.gapTimeoutMs);
            this.emit(res.deliver);
            if (res.gaveUp)
                this.stats.gapTimeouts++;
            if (res.done)
                return;
            if (page.hasMore) {
                pause = this.pollMinMs;
                continue;
            }
            await this.pause(pause);
            if (this.closed) {
                this.tracker.get(session).filling = false;
                return;
            }
            pause = Math.min(2 * pause, this.pollMaxMs);
        }
    }
    /**
     * paced waits for the budget to allow one more sync page: however many
     * sessions need a fill, the client's syncs stay within it (counted in
     * stats.syncsPaced when a page had to wait). False: the receiver closed.
     */
    async paced() {
        const ms = this.budget.reserve();
        if (ms === 0)
            return true;
        this.stats.syncsPaced++;
        await this.pause(ms);
        return !this.closed;
    }
    /** pause sleeps ms, or less when the receiver closes. */
    pause(ms) {
        if (this.closed)
            return Promise.resolve();
        return new Promise((resolve) => {
            const done = () => {
                clearTimeout(t);
                this.wakers.delete(done);
                resolve();
            };
            const t = setTimeout(done, ms);
            this.wakers.add(done);
        });
    }
    emit(ms) {
        if (ms.length === 0)
            return;
        this.queue.push(...ms);
        if (!this.dispatching)
            void this.dispatch();
    }
    async dispatch() {
        this.dispatching = true;
        try {
            while (this.queue.length > 0 && !this.closed) {
                const m = this.queue.shift();
                if (this.handle) {
                    try {
                        await this.handle(m);
                    }
                    catch (e) {
                        this.onHandlerError(e);
                    }
                }
                this.stats.delivered++;
                this.handed.set(m.session_id, m.seq);
                this.delivered(m.session_id, m.seq);
            }
        }
        finally {
            this.dispatching = false;
        }
    }
    /** close stops the fills and the dispatcher (events not yet handed over are dropped: the cursors say where to resume). */
    async close() {
        this.closed = true;
        for (const wake of [...this.wakers])
            wake();
        await Promise.allSettled([...this.fills]);
    }
    /**
     * Per session, the highest seq handed to the app (its handler returned):
     * what a later client passes as cursors to resume after. The sessions of
     * the cursors it started with are included.
     */
    cursors() {
        const out = { ...this.initial };
        for (const [id, seq] of this.handed)
            out[id] = seq;
        return out;
    }
}
export function sleep(ms) {
    return new Promise((r) => setTimeout(r, ms));
}
