package client

import (
	"slices"
	"time"

	"github.com/seqflow/seqflow/internal/wire"
)

// tracker is the per-session seq logic of the receive path, without I/O:
// it decides which events the app gets, in which order, and when a session
// needs a sync. Its owner (receiver) serializes calls.
//
// For each session it keeps have, the highest seq handed to the app. A
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
// over (the app may page them with SyncBefore). Such a member gets no
// pushes while away, so its re-add would otherwise look like a gap as
// long as its absence, filled by sync at every rejoin.
type tracker struct {
	sessions map[string]*track
	// skipHistory starts a session never seen before at its first known
	// seq instead of syncing its history from 0.
	skipHistory bool
	// holding buffers every push (a connection's catch-up is pending).
	holding bool
	// self is the user's ID (from the connection's hello): events that
	// remove or add it mark a session's away span.
	self string
}

type track struct {
	have int64
	// target is a seq the store is known to hold (a changes max_seq):
	// the session is filled until have reaches it.
	target int64
	buf    map[int64]wire.Message
	// filling is set while a fill runs; pushes are buffered meanwhile.
	filling  bool
	gapSince time.Time
	// away: the last event handed over removed the user (until an event
	// adds it back, what follows is skipped).
	away bool
}

func newTracker(cursors map[string]int64, skipHistory bool) *tracker {
	t := &tracker{sessions: map[string]*track{}, skipHistory: skipHistory}
	for s, seq := range cursors {
		t.sessions[s] = &track{have: seq}
	}
	return t
}

func (t *tracker) get(session string, firstSeq int64) *track {
	s, ok := t.sessions[session]
	if !ok {
		s = &track{}
		if t.skipHistory && firstSeq > 0 {
			s.have = firstSeq - 1
		}
		t.sessions[session] = s
	}
	return s
}

// pushResult says what a push led to.
type pushResult struct {
	deliver   []wire.Message
	duplicate bool
	// startFill asks the owner to start a fill of the session.
	startFill bool
}

// push handles one pushed event.
func (t *tracker) push(m wire.Message, now time.Time) pushResult {
	s := t.get(m.SessionID, m.Seq)
	if _, dup := s.buf[m.Seq]; dup || m.Seq <= s.have {
		return pushResult{duplicate: true}
	}
	if s.away && t.addsSelf(m) {
		// Added back: nothing between the removal and this was for the
		// user, so the session resumes here without a fill.
		for seq := range s.buf {
			if seq < m.Seq {
				delete(s.buf, seq)
			}
		}
		s.have = m.Seq - 1
	}
	if m.Seq == s.have+1 {
		// The next seq goes out at once, even during a fill or a catch-up:
		// nothing can come before it.
		out := t.take(s, m, nil)
		out = t.drain(s, out)
		if len(s.buf) == 0 {
			s.gapSince = time.Time{}
		}
		return pushResult{deliver: out}
	}
	if s.buf == nil {
		s.buf = map[int64]wire.Message{}
	}
	s.buf[m.Seq] = m
	if s.gapSince.IsZero() {
		s.gapSince = now
	}
	if t.holding || s.filling {
		return pushResult{}
	}
	s.filling = true
	return pushResult{startFill: true}
}

// drain appends the buffered events that follow have without a hole.
func (t *tracker) drain(s *track, out []wire.Message) []wire.Message {
	for {
		m, ok := s.buf[s.have+1]
		if !ok {
			return out
		}
		delete(s.buf, m.Seq)
		out = t.take(s, m, out)
	}
}

// take moves have to m, the next event of s, and appends it to out unless
// the user was away from the session at it.
func (t *tracker) take(s *track, m wire.Message, out []wire.Message) []wire.Message {
	s.have = m.Seq
	switch {
	case t.addsSelf(m):
		s.away = false
	case s.away:
		return out
	case t.removesSelf(m):
		s.away = true
	}
	return append(out, m)
}

// removesSelf says whether m takes the user out of its session.
func (t *tracker) removesSelf(m wire.Message) bool {
	return t.self != "" && m.Kind == wire.KindMembership && m.Action == wire.ActionRemove && slices.Contains(m.UserIDs, t.self)
}

// addsSelf says whether m makes the user a member of its session.
func (t *tracker) addsSelf(m wire.Message) bool {
	if t.self == "" || !slices.Contains(m.UserIDs, t.self) {
		return false
	}
	return (m.Kind == wire.KindMembership && m.Action == wire.ActionAdd) ||
		(m.Kind == wire.KindGroupChange && m.Action == wire.ActionJoin) || m.Kind == wire.KindSessionCreate
}

// catchUp records a connection's changes result: every session whose
// store max_seq is above have gets that as its target. It returns the
// sessions that need a fill (target above have, or events buffered) and
// ends holding. A session first seen here with skipHistory starts at its
// max_seq.
func (t *tracker) catchUp(changes []wire.SessionChange, now time.Time) []string {
	t.holding = false
	for _, c := range changes {
		_, known := t.sessions[c.SessionID]
		s := t.get(c.SessionID, 0)
		if !known && t.skipHistory {
			s.have = max(s.have, c.MaxSeq)
			continue
		}
		s.target = max(s.target, c.MaxSeq)
	}
	var fill []string
	for id, s := range t.sessions {
		if s.filling || (s.target <= s.have && len(s.buf) == 0) {
			continue
		}
		if s.gapSince.IsZero() {
			s.gapSince = now
		}
		s.filling = true
		fill = append(fill, id)
	}
	slices.Sort(fill)
	return fill
}

// fillFrom returns where the next sync page of session starts.
func (t *tracker) fillFrom(session string) int64 {
	return t.get(session, 0).have
}

// syncResult says what a sync page led to.
type syncResult struct {
	deliver []wire.Message
	// done: the fill is over (nothing buffered, target reached).
	done bool
	// gaveUp: the gap timeout passed; buffered events went out past a hole
	// the store never filled.
	gaveUp bool
}

// synced applies one sync page of session. The page may start below have
// (a push moved have meanwhile); what is at or below have is skipped.
func (t *tracker) synced(session string, msgs []wire.Message, hasMore bool, now time.Time, gapTimeout time.Duration) syncResult {
	s := t.get(session, 0)
	var out []wire.Message
	for _, m := range msgs {
		if m.Seq <= s.have {
			continue
		}
		// The store holds a prefix of the log: every seq between have and
		// m.Seq that exists was in this page, so the hole is empty.
		for seq := range s.buf {
			if seq < m.Seq {
				delete(s.buf, seq)
			}
		}
		delete(s.buf, m.Seq)
		out = t.take(s, m, out)
	}
	out = t.drain(s, out)
	if len(s.buf) == 0 && s.have >= s.target {
		s.filling, s.gapSince, s.target = false, time.Time{}, 0
		return syncResult{deliver: out, done: true}
	}
	if !hasMore && !s.gapSince.IsZero() && now.Sub(s.gapSince) >= gapTimeout {
		keys := make([]int64, 0, len(s.buf))
		for seq := range s.buf {
			keys = append(keys, seq)
		}
		slices.Sort(keys)
		for _, seq := range keys {
			out = t.take(s, s.buf[seq], out)
		}
		s.buf = nil
		s.filling, s.gapSince, s.target = false, time.Time{}, 0
		return syncResult{deliver: out, done: true, gaveUp: true}
	}
	return syncResult{deliver: out}
}

// abandon ends a fill that cannot go on (the user left the session):
// buffered events are dropped.
func (t *tracker) abandon(session string) {
	s := t.get(session, 0)
	s.buf, s.filling, s.gapSince, s.target = nil, false, time.Time{}, 0
}

// needsFill says whether session still has a hole to fill: events held
// above one, or a target the store holds beyond have.
func (t *tracker) needsFill(session string) bool {
	s := t.get(session, 0)
	return len(s.buf) > 0 || s.target > s.have
}

// cursor returns have for session (0 when unknown).
func (t *tracker) cursor(session string) int64 {
	if s, ok := t.sessions[session]; ok {
		return s.have
	}
	return 0
}
