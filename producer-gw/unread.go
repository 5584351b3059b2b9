package main

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/seqflow/seqflow/internal/store"
	"github.com/seqflow/seqflow/internal/wire"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// Unread counts on the push. A connection that asks changes seeds them
// with the store's counts, replays what it wrote and learned shortly
// before (recentNotes) and while the store answered, and answers with the result (conn.answerChanges); from
// then on the gateway keeps them for that connection from the events it
// writes to it and the user's read cursors it learns, and attaches the
// session's count and the total to every chat message and recall it
// pushes and to the user's leave (and sends an unread frame when a read
// moves them), so a client never recounts. The rules are the store's
// (Store.Changes): chat messages of others above max(read cursor, join),
// recalled ones left out.
//
// What the seed counted, the range (cursor, seedMax], is known by its
// count only; events above seedMax are known one by one. A read at or
// past seedMax is exact in memory; one below it asks the store again
// (recounter), off the push path.

// unreadNote is what the counts need of one event.
type unreadNote struct {
	seq    int64
	sender string
	kind   noteKind
	target int64    // recall
	users  []string // join, leave
}

type noteKind uint8

const (
	noteOther noteKind = iota
	noteMessage
	noteRecall
	noteJoin
	noteLeave
)

// noteOf reads the counts' view of ev.
func noteOf(ev *imv1.SequencedEvent) unreadNote {
	n := unreadNote{seq: ev.Seq, sender: ev.SenderUserId}
	switch p := ev.Payload.(type) {
	case *imv1.SequencedEvent_Message:
		n.kind = noteMessage
	case *imv1.SequencedEvent_Recall:
		n.kind, n.target = noteRecall, p.Recall.GetTargetSeq()
	case *imv1.SequencedEvent_SessionCreate:
		n.kind, n.users = noteJoin, slices.Concat(p.SessionCreate.GetMemberUserIds(), []string{ev.SenderUserId})
	case *imv1.SequencedEvent_Membership:
		n.kind, n.users = noteJoin, p.Membership.GetUserIds()
		if p.Membership.GetOp() == imv1.MembershipChange_OP_REMOVE {
			n.kind = noteLeave
		}
	case *imv1.SequencedEvent_Group:
		if p.Group.GetJoin() != nil {
			n.kind, n.users = noteJoin, []string{ev.SenderUserId}
		}
	}
	return n
}

// unreadCounts is one connection's unread counts. Its owner (conn) guards
// it with its mutex.
type unreadCounts struct {
	user     string
	sessions map[string]*unreadSession
	total    int64
	// seeding: a changes is being answered; the events written and the
	// reads learned meanwhile wait in pending, in the order they came, and
	// seed replays them onto the store's counts.
	seeding bool
	pending []pendingNote
}

// pendingNote is an event written (note) or, when read > 0, a read of the
// user's to read, while seeding. old: it came before the seed began
// (recentNotes).
type pendingNote struct {
	session string
	note    unreadNote
	read    int64
	old     bool
}

// recentNotes are the events a connection wrote and the user's reads it
// learned in the last recentFor (at most recentMax of them). A changes
// replays them onto the store's counts before what comes while it is
// answered: the store may not hold them yet, since the persister writes
// an event after the pushers have pushed it, and a read cursor after the
// gateway has passed it on. Replaying what the store already held is a
// no-op. A store further behind than recentFor still undercounts until
// the next changes.
type recentNotes struct{ notes []recentNote }

type recentNote struct {
	at time.Time
	p  pendingNote
}

const (
	recentFor = 10 * time.Second
	recentMax = 256
)

func (r *recentNotes) add(now time.Time, p pendingNote) {
	r.prune(now)
	if len(r.notes) == recentMax {
		// A quarter at a time: a busy connection shifts the buffer once
		// per recentMax/4 events, not on every one.
		r.notes = slices.Delete(r.notes, 0, recentMax/4)
	}
	r.notes = append(r.notes, recentNote{now, p})
}

func (r *recentNotes) prune(now time.Time) {
	i := 0
	for i < len(r.notes) && now.Sub(r.notes[i].at) > recentFor {
		i++
	}
	if i > 0 {
		r.notes = slices.Delete(r.notes, 0, i)
	}
	if len(r.notes) == 0 {
		r.notes = nil // an idle connection keeps no buffer
	}
}

// since returns the notes of the last recentFor, marked old.
func (r *recentNotes) since(now time.Time) []pendingNote {
	r.prune(now)
	out := make([]pendingNote, len(r.notes))
	for i, n := range r.notes {
		out[i] = n.p
		out[i].old = true
	}
	return out
}

// seededRead is a read learned while seeding, as the seed left it: the
// session's cursor is seq, and recount says the store must count again
// after it (read).
type seededRead struct {
	session string
	seq     int64
	recount bool
}

type unreadSession struct {
	// cursor is max(read cursor, join): only messages above it count.
	cursor int64
	// seedMax is the highest seq the store held when it counted
	// seedUnread, the unread messages in (cursor, seedMax].
	seedMax    int64
	seedUnread int64
	// fresh are the unread messages of others above seedMax, ascending.
	fresh []int64
	// recalls are the recalls written to the connection whose target is
	// at or below seedMax and above cursor: a recount from a store that
	// does not hold the recall yet leaves them out itself.
	recalls []recallNote
}

type recallNote struct{ seq, target int64 }

func (s *unreadSession) unread() int64 { return s.seedUnread + int64(len(s.fresh)) }

func newUnreadCounts(user string) *unreadCounts {
	return &unreadCounts{user: user, sessions: map[string]*unreadSession{}}
}

// begin starts a seed: recent (recentNotes.since) and the events from
// now on are kept until seed.
func (u *unreadCounts) begin(recent []pendingNote) {
	u.seeding, u.pending = true, append(u.pending[:0], recent...)
}

// seed takes the store's counts, then replays the events written and the
// reads learned since begin (each is a no-op when the store held it). It
// returns, per session whose cursor a replayed read moved, where the
// cursor stands: its owner tells the client after the changes result, or
// asks the store to recount.
func (u *unreadCounts) seed(states []store.SessionState) []seededRead {
	u.sessions = make(map[string]*unreadSession, len(states))
	u.total = 0
	for _, st := range states {
		u.sessions[st.SessionID] = &unreadSession{cursor: max(st.ReadSeq, st.JoinedSeq), seedMax: st.MaxSeq, seedUnread: st.Unread}
		u.total += st.Unread
	}
	u.seeding = false
	var reads []seededRead
	for _, p := range u.pending {
		if p.read == 0 {
			if p.old && u.sessions[p.session] == nil && p.note.kind != noteJoin {
				// Before the seed, of a session the store does not list
				// (left since, or a join the replay has not met): it
				// does not count.
				continue
			}
			u.event(p.session, p.note)
			continue
		}
		changed, recount, _, _ := u.read(p.session, p.read)
		if !changed {
			continue
		}
		r := seededRead{p.session, p.read, recount}
		if i := slices.IndexFunc(reads, func(r seededRead) bool { return r.session == p.session }); i >= 0 {
			reads[i] = r // a later read is past the earlier one
		} else {
			reads = append(reads, r)
		}
	}
	u.pending = nil
	// A session left (or left and joined again) after the read: its
	// counts no longer follow that cursor.
	return slices.DeleteFunc(reads, func(r seededRead) bool {
		s := u.sessions[r.session]
		return s == nil || s.cursor != r.seq
	})
}

// answer writes the counts into the changes result the seed was taken
// from, so that a client applying it ends with the connection's counts:
// each listed session's count (0 for one the user left since the store
// answered) and the total, plus each session the store did not list yet
// that has unread messages (joined while the changes was answered), with
// the highest seq written to the connection as its max_seq. Call it right
// after seed, and queue res before anything else that carries counts.
func (u *unreadCounts) answer(res *wire.ChangesResult, lastSeq map[string]int64) {
	listed := make(map[string]bool, len(res.Sessions))
	for i := range res.Sessions {
		sc := &res.Sessions[i]
		listed[sc.SessionID] = true
		sc.Unread = 0
		if s := u.sessions[sc.SessionID]; s != nil {
			sc.Unread = s.unread()
		}
	}
	var more []string
	for id, s := range u.sessions {
		if !listed[id] && s.unread() > 0 {
			more = append(more, id)
		}
	}
	slices.Sort(more)
	for _, id := range more {
		res.Sessions = append(res.Sessions, wire.SessionChange{SessionID: id, MaxSeq: lastSeq[id], Unread: u.sessions[id].unread()})
	}
	res.TotalUnread = u.total
}

// event applies one event written to the connection and says whether its
// frame carries the counts (a chat message or a recall of a counted
// session, or the user's leave of one: then 0), with the session's count
// and the total after it.
func (u *unreadCounts) event(session string, n unreadNote) (attach bool, unread, total int64) {
	if u.seeding {
		u.pending = append(u.pending, pendingNote{session: session, note: n})
		return false, 0, 0
	}
	s := u.sessions[session]
	if s == nil {
		switch {
		case n.kind == noteJoin && slices.Contains(n.users, u.user):
			// Joined after the seed: nothing before the join counts.
			u.sessions[session] = &unreadSession{cursor: n.seq, seedMax: n.seq}
			return false, 0, 0
		case n.kind == noteMessage || n.kind == noteRecall:
			// A session the seed did not list (it joined in a way the
			// counts do not see): count from here.
			s = &unreadSession{cursor: n.seq - 1, seedMax: n.seq - 1}
			u.sessions[session] = s
		default:
			return false, 0, 0
		}
	}
	if n.seq <= s.seedMax {
		// The store held it when it counted.
		return n.kind == noteMessage || n.kind == noteRecall, s.unread(), u.total
	}
	switch n.kind {
	case noteMessage:
		if n.sender != u.user && n.seq > s.cursor {
			s.fresh = append(s.fresh, n.seq)
			u.total++
		}
	case noteRecall:
		// Only its sender recalls a message, so the recall's sender is the
		// target's.
		if n.sender != u.user && n.target > s.cursor {
			if n.target <= s.seedMax {
				s.recalls = append(s.recalls, recallNote{n.seq, n.target})
				if s.seedUnread > 0 {
					s.seedUnread--
					u.total--
				}
			} else if i, ok := slices.BinarySearch(s.fresh, n.target); ok {
				s.fresh = slices.Delete(s.fresh, i, i+1)
				u.total--
			}
		}
	case noteLeave:
		if !slices.Contains(n.users, u.user) {
			return false, 0, 0
		}
		// The leave carries the total without the session: an unread
		// frame would claim a read cursor that did not move.
		u.total -= s.unread()
		delete(u.sessions, session)
		return true, 0, u.total
	default:
		return false, 0, 0
	}
	return true, s.unread(), u.total
}

// read moves the session's cursor to seq (a read on any of the user's
// devices). It returns whether the counts changed and, when the seed's
// range is left partly unread, recount: the store must count again after
// seq (then unread and total are not final). While seeding it only keeps
// the read for seed.
func (u *unreadCounts) read(session string, seq int64) (changed, recount bool, unread, total int64) {
	if seq <= 0 {
		return false, false, 0, 0
	}
	if u.seeding {
		u.pending = append(u.pending, pendingNote{session: session, read: seq})
		return false, false, 0, 0
	}
	s := u.sessions[session]
	if s == nil || seq <= s.cursor {
		return false, false, 0, 0
	}
	before := s.unread()
	s.cursor = seq
	i, _ := slices.BinarySearch(s.fresh, seq+1)
	s.fresh = s.fresh[i:]
	s.recalls = slices.DeleteFunc(s.recalls, func(r recallNote) bool { return r.target <= seq })
	if seq >= s.seedMax {
		s.seedUnread = 0
	} else if s.seedUnread > 0 {
		// Some of the seed's range may stay unread: only the store knows.
		recount = true
	}
	u.total += s.unread() - before
	return true, recount, s.unread(), u.total
}

// recounted takes the store's count after cursor (n, as of upTo); it is
// dropped when the cursor moved since (a newer recount follows).
func (u *unreadCounts) recounted(session string, cursor, n, upTo int64) (ok bool, unread, total int64) {
	s := u.sessions[session]
	if u.seeding || s == nil || s.cursor != cursor {
		return false, 0, 0
	}
	before := s.unread()
	for _, r := range s.recalls {
		if r.seq > upTo && r.target <= upTo && n > 0 {
			n-- // the store counted a message whose recall it does not hold yet
		}
	}
	s.recalls = slices.DeleteFunc(s.recalls, func(r recallNote) bool { return r.target <= upTo })
	if upTo > s.seedMax {
		i, _ := slices.BinarySearch(s.fresh, upTo+1)
		s.fresh = s.fresh[i:]
		s.seedMax = upTo
	}
	s.seedUnread = n
	u.total += s.unread() - before
	return true, s.unread(), u.total
}

// unreadCounter counts a user's unread messages of a session after a
// cursor (the message store). It blocks on PostgreSQL; ctx bounds it.
type unreadCounter interface {
	UnreadAfter(ctx context.Context, sessionID, userID string, after int64) (n, upTo int64, err error)
}

var _ unreadCounter = (*store.Store)(nil)

// recountQueue bounds the recounts waiting; past it one is dropped and
// the connection keeps a stale count until its next changes.
const recountQueue = 1024

type recount struct {
	c       *conn
	session string
	cursor  int64
}

// recounter asks the store for the counts a read below a connection's
// seed leaves, one at a time, off the push path.
type recounter struct {
	store unreadCounter
	queue chan recount
	log   *slog.Logger
	m     *metrics
}

func newRecounter(st unreadCounter, log *slog.Logger, m *metrics) *recounter {
	return &recounter{store: st, queue: make(chan recount, recountQueue), log: log, m: m}
}

// post queues a recount; it does not block.
func (r *recounter) post(c *conn, session string, cursor int64) {
	select {
	case r.queue <- recount{c, session, cursor}:
	default:
		r.m.unreadRecounts.WithLabelValues("dropped_queue_full").Inc()
	}
}

// Run answers queued recounts until ctx ends, and returns ctx.Err().
func (r *recounter) Run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case q := <-r.queue:
			qctx, cancel := context.WithTimeout(ctx, storeTimeout)
			n, upTo, err := r.store.UnreadAfter(qctx, q.session, q.c.p.UserID, q.cursor)
			cancel()
			if err != nil {
				r.m.unreadRecounts.WithLabelValues("error").Inc()
				r.log.Warn("recount unread", "session_id", q.session, "user_id", q.c.p.UserID, "err", err)
				continue
			}
			r.m.unreadRecounts.WithLabelValues("ok").Inc()
			q.c.recounted(q.session, q.cursor, n, upTo)
		}
	}
}
