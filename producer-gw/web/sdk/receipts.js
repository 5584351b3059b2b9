// Delivered receipts in batches (client/receipts.go): the highest seq the
// app was handed per session, flushed after `count` events or `intervalMs`,
// whichever comes first (seed 004's window: 64 or 100 ms), at most 256
// cursors a frame. A flush that cannot be written (no connection) keeps its
// cursors for the next one; cursors only move forward, so sending one twice
// is harmless.
/** The gateway's bound on one delivered frame. */
export const maxCursorsPerFrame = 256;
export class Receipts {
    count;
    intervalMs;
    write;
    dirty = new Map();
    pending = 0;
    timer;
    closed = false;
    /** write sends one delivered frame; it throws when there is no connection. */
    constructor(count, intervalMs, write) {
        this.count = count;
        this.intervalMs = intervalMs;
        this.write = write;
    }
    /** add records that the app holds session up to seq. */
    add(session, seq) {
        if (seq > (this.dirty.get(session) ?? 0))
            this.dirty.set(session, seq);
        this.pending++;
        if (this.pending >= this.count)
            this.flush();
        else
            this.arm();
    }
    /** retry flushes whatever is dirty soon (after a reconnect). */
    retry() {
        if (this.dirty.size > 0)
            this.arm();
    }
    arm() {
        if (this.timer !== undefined || this.closed)
            return;
        this.timer = setTimeout(() => {
            this.timer = undefined;
            this.flush();
        }, this.intervalMs);
    }
    flush() {
        if (this.timer !== undefined) {
            clearTimeout(this.timer);
            this.timer = undefined;
        }
        this.pending = 0;
        if (this.dirty.size === 0)
            return;
        const cs = [...this.dirty].map(([session_id, seq]) => ({ session_id, seq }));
        cs.sort((a, b) => (a.session_id < b.session_id ? -1 : a.session_id > b.session_id ? 1 : 0));
        this.dirty.clear();
        for (let i = 0; i < cs.length; i += maxCursorsPerFrame) {
            try {
                this.write(cs.slice(i, i + maxCursorsPerFrame));
            }
            catch {
                for (const c of cs.slice(i))
                    if (c.seq > (this.dirty.get(c.session_id) ?? 0))
                        this.dirty.set(c.session_id, c.seq);
                return;
            }
        }
    }
    close() {
        this.closed = true;
        if (this.timer !== undefined)
            clearTimeout(this.timer);
        this.timer = undefined;
    }
}
