// The per-session seq logic of the receive path, without I/O (a port of
// client/tracker.go): it decides which events the app gets, in which
// order, and when a session needs a sync.
//
// For each session it keeps `have`, the highest seq handed to the app. A
// pushed event at have+1 is delivered at once; one at or below have, or
// already buffered, is a duplicate; one above have+1 is buffered and the
// session is filled by sync from have. Seqs may have gaps (the sequencer
// skips numbers after a crash), so a hole is only known to be empty once
// the store, which holds a prefix of the session's log, has answered past
// it; the store lags the log, so a fill polls until it does, for at most
// the gap timeout.
//
// A member removed from a session and added back later resumes at its
// re-add: the events sequenced while it was not a member are not handed
// over (the app may page them with syncBefore). Such a member gets no
// pushes while away, so its re-add would otherwise look like a gap as
// long as its absence, filled by sync at every rejoin.
export class Tracker {
    skipHistory;
    sessions = new Map();
    /** Every push is buffered while a connection's catch-up is pending. */
    holding = false;
    /** The user's ID (from the connection's hello): events that remove or add it mark a session's away span. */
    self = '';
    constructor(cursors = {}, skipHistory = false) {
        this.skipHistory = skipHistory;
        for (const [s, seq] of Object.entries(cursors))
            this.sessions.set(s, newTrack(seq));
    }
    get(session, firstSeq = 0) {
        let s = this.sessions.get(session);
        if (!s) {
            s = newTrack(this.skipHistory && firstSeq > 0 ? firstSeq - 1 : 0);
            this.sessions.set(session, s);
        }
        return s;
    }
    /** push handles one pushed event. */
    push(m, now) {
        const s = this.get(m.session_id, m.seq);
        if (s.buf.has(m.seq) || m.seq <= s.have)
            return { deliver: [], duplicate: true, startFill: false };
        if (s.away && this.addsSelf(m)) {
            // Added back: nothing between the removal and this was for the
            // user, so the session resumes here without a fill.
            for (const seq of s.buf.keys())
                if (seq < m.seq)
                    s.buf.delete(seq);
            s.have = m.seq - 1;
        }
        if (m.seq === s.have + 1) {
            // The next seq goes out at once, even during a fill or a catch-up:
            // nothing can come before it.
            const out = this.drain(s, this.take(s, m, []));
            if (s.buf.size === 0)
                s.gapSince = 0;
            return { deliver: out, duplicate: false, startFill: false };
        }
        s.buf.set(m.seq, m);
        if (s.gapSince === 0)
            s.gapSince = now;
        if (this.holding || s.filling)
            return { deliver: [], duplicate: false, startFill: false };
        s.filling = true;
        return { deliver: [], duplicate: false, startFill: true };
    }
    /**
     * catchUp records a connection's changes result: every session whose
     * store max_seq is above have gets it as its target. It returns the
     * sessions that need a fill (target above have, or events buffered) and
     * ends holding. A session first seen here with skipHistory starts at its
     * max_seq.
     */
    catchUp(changes, now) {
        this.holding = false;
        for (const c of changes) {
            const known = this.sessions.has(c.session_id);
            const s = this.get(c.session_id);
            if (!known && this.skipHistory) {
                s.have = Math.max(s.have, c.max_seq);
                continue;
            }
            s.target = Math.max(s.target, c.max_seq);
        }
        const fill = [];
        for (const [id, s] of this.sessions) {
            if (s.filling || (s.target <= s.have && s.buf.size === 0))
                continue;
            if (s.gapSince === 0)
                s.gapSince = now;
            s.filling = true;
            fill.push(id);
        }
        return fill.sort();
    }
    /** Where the next sync page of session starts. */
    fillFrom(session) {
        return this.get(session).have;
    }
    /**
     * synced applies one sync page of session. The page may start below have
     * (a push moved have meanwhile); what is at or below have is skipped.
     */
    synced(session, msgs, hasMore, now, gapTimeoutMs) {
        const s = this.get(session);
        const out = [];
        for (const m of msgs) {
            if (m.seq <= s.have)
                continue;
            // The store holds a prefix of the log: every seq between have and
            // m.seq that exists was in this page, so the hole is empty.
            for (const seq of s.buf.keys())
                if (seq < m.seq)
                    s.buf.delete(seq);
            s.buf.delete(m.seq);
            this.take(s, m, out);
        }
        this.drain(s, out);
        if (s.buf.size === 0 && s.have >= s.target) {
            s.filling = false;
            s.gapSince = 0;
            s.target = 0;
            return { deliver: out, done: true, gaveUp: false };
        }
        if (!hasMore && s.gapSince !== 0 && now - s.gapSince >= gapTimeoutMs) {
            const keys = [...s.buf.keys()].sort((a, b) => a - b);
            for (const seq of keys)
                this.take(s, s.buf.get(seq), out);
            s.buf.clear();
            s.filling = false;
            s.gapSince = 0;
            s.target = 0;
            return { deliver: out, done: true, gaveUp: true };
        }
        return { deliver: out, done: false, gaveUp: false };
    }
    /** abandon ends a fill that cannot go on (the user left the session): buffered events are dropped. */
    abandon(session) {
        const s = this.get(session);
        s.buf.clear();
        s.filling = false;
        s.gapSince = 0;
        s.target = 0;
    }
    /** needsFill says whether session still has a hole to fill: events held above one, or a target the store holds beyond have. */
    needsFill(session) {
        const s = this.get(session);
        return s.buf.size > 0 || s.target > s.have;
    }
    /** have of session (0 when unknown). */
    cursor(session) {
        return this.sessions.get(session)?.have ?? 0;
    }
    /** drain appends the buffered events that follow have without a hole. */
    drain(s, out) {
        for (;;) {
            const m = s.buf.get(s.have + 1);
            if (!m)
                return out;
            s.buf.delete(m.seq);
            this.take(s, m, out);
        }
    }
    /** take moves have to m, the next event of s, and appends it to out unless the user was away from the session at it. */
    take(s, m, out) {
        s.have = m.seq;
        if (this.addsSelf(m))
            s.away = false;
        else if (s.away)
            return out;
        else if (this.removesSelf(m))
            s.away = true;
        out.push(m);
        return out;
    }
    /** removesSelf says whether m takes the user out of its session. */
    removesSelf(m) {
        return this.self !== '' && m.kind === 'membership' && m.action === 'remove' && (m.user_ids ?? []).includes(this.self);
    }
    /** addsSelf says whether m makes the user a member of its session. */
    addsSelf(m) {
        if (this.self === '' || !(m.user_ids ?? []).includes(this.self))
            return false;
        return (m.kind === 'membership' && m.action === 'add') || (m.kind === 'group' && m.action === 'join') || m.kind === 'session_create';
    }
}
function newTrack(have) {
    return { have, target: 0, buf: new Map(), filling: false, gapSince: 0, away: false };
}
