package main

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/seqflow/seqflow/internal/apierr"
	"github.com/seqflow/seqflow/internal/store"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// memberChecker answers whether a user is a current member of a session
// (the membership cache, for reads and signals). IsMember may block on
// PostgreSQL; ctx bounds the wait.
type memberChecker interface {
	IsMember(ctx context.Context, sessionID, userID string) (bool, error)
}

// standingChecker answers a user's standing in a session: the message
// store (the persister's projection) for the membership cache, the cache
// for the uplink's edit and recall. Standing may block on PostgreSQL; ctx
// bounds the wait.
type standingChecker interface {
	Standing(ctx context.Context, sessionID, userID string) (store.Standing, error)
}

// requireMember answers NOT_A_MEMBER unless user is a current member of
// session; a failed check is logged and answered as the store's error.
func requireMember(ctx context.Context, mc memberChecker, log *slog.Logger, session, user string) *apierr.Error {
	ok, err := mc.IsMember(ctx, session, user)
	if err != nil {
		log.Warn("membership check failed", "session_id", session, "user_id", user, "err", err)
		return storeError(err)
	}
	if !ok {
		return apierr.New(imv1.ErrorCode_ERROR_CODE_NOT_A_MEMBER, "")
	}
	return nil
}

type mkey struct{ session, user string }

type cachedAnswer struct {
	standing store.Standing
	at       time.Time
}

// seen is membership learned from a sequenced event that passed through
// this gateway: newer than PostgreSQL until the persister catches up.
type seen struct {
	member bool
	seq    int64
	at     time.Time
}

// Negative answers (not a current member) are kept longer, for IsMember
// only: a client naming sessions it is not in (delivered cursors, sync)
// costs the store one query per session and negativeTTL, not one per
// frame. They never refuse a command (Standing does not read them), and
// any membership event of their session seen here drops them.
const (
	negativeTTL = 30 * time.Second
	// maxNegative bounds the negative answers kept; past it new ones are
	// not kept until the sweep drops expired ones.
	maxNegative = 100_000
)

// membership decides who may send to, sync and receive a session. The
// authority is the message store (PostgreSQL), which lags the log by the
// persister's batch time; two things narrow that gap:
//   - answers are cached only briefly (ttl);
//   - membership events the gateway sees in push batches (session_create,
//     add, remove) override the store for localTTL, long enough for the
//     persister to catch up. They let a creator send right after the
//     create's ACK, and stop a removed user's sends and deliveries as soon
//     as the removal reaches their gateway.
//
// Run expires both once a second.
type membership struct {
	store    standingChecker
	ttl      time.Duration
	localTTL time.Duration
	now      func() time.Time

	mu    sync.Mutex
	cache map[mkey]cachedAnswer
	local map[mkey]seen
	// neg is the negative answers of IsMember, by session and user; nNeg
	// counts them. events counts the membership events observed: an
	// answer read across one is not kept.
	neg    map[string]map[string]time.Time
	nNeg   int
	events uint64
}

func newMembership(s standingChecker, ttl, localTTL time.Duration) *membership {
	return &membership{store: s, ttl: ttl, localTTL: localTTL, now: time.Now,
		cache: map[mkey]cachedAnswer{}, local: map[mkey]seen{}, neg: map[string]map[string]time.Time{}}
}

// IsMember reports whether user is a current member of session.
// A negative answer is kept for negativeTTL (see there).
func (m *membership) IsMember(ctx context.Context, session, user string) (bool, error) {
	m.mu.Lock()
	if at, ok := m.neg[session][user]; ok && m.now().Sub(at) < negativeTTL {
		m.mu.Unlock()
		return false, nil
	}
	events := m.events
	m.mu.Unlock()
	st, err := m.Standing(ctx, session, user)
	if err == nil && st != store.CurrentMember {
		m.keepNegative(session, user, events)
	}
	return st == store.CurrentMember, err
}

// keepNegative keeps the store's negative answer read when events
// membership events had been observed, unless another came since. One
// that came from an event seen here is that event's (localTTL).
func (m *membership) keepNegative(session, user string, events uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.events != events || m.nNeg >= maxNegative {
		return
	}
	if s, ok := m.local[mkey{session, user}]; ok && m.now().Sub(s.at) < m.localTTL {
		return
	}
	users := m.neg[session]
	if users == nil {
		users = map[string]time.Time{}
		m.neg[session] = users
	}
	if _, ok := users[user]; !ok {
		m.nNeg++
	}
	users[user] = m.now()
}

// known reports whether an answer for user in session is at hand without
// asking the store.
func (m *membership) known(session, user string) bool {
	k := mkey{session, user}
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.local[k]; ok && now.Sub(s.at) < m.localTTL {
		return true
	}
	if c, ok := m.cache[k]; ok && now.Sub(c.at) < m.ttl {
		return true
	}
	at, ok := m.neg[session][user]
	return ok && now.Sub(at) < negativeTTL
}

// Standing returns user's standing in session: a membership event seen
// in a push batch (a removal makes a former member), else the store.
func (m *membership) Standing(ctx context.Context, session, user string) (store.Standing, error) {
	k := mkey{session, user}
	now := m.now()
	m.mu.Lock()
	if s, ok := m.local[k]; ok && now.Sub(s.at) < m.localTTL {
		m.mu.Unlock()
		if s.member {
			return store.CurrentMember, nil
		}
		return store.FormerMember, nil
	}
	if c, ok := m.cache[k]; ok && now.Sub(c.at) < m.ttl {
		m.mu.Unlock()
		return c.standing, nil
	}
	m.mu.Unlock()
	st, err := m.store.Standing(ctx, session, user)
	if err != nil {
		return store.NotMember, err
	}
	if m.ttl > 0 {
		m.mu.Lock()
		m.cache[k] = cachedAnswer{standing: st, at: now}
		m.mu.Unlock()
	}
	return st, nil
}

// mayReceive reports whether an event of session at seq may go to user's
// connections: false only when the gateway saw user leave the session
// before seq (and not rejoin). The removal event itself still reaches the
// removed user, so their devices learn of it.
func (m *membership) mayReceive(session, user string, seq int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.local[mkey{session, user}]
	return !ok || s.member || seq <= s.seq
}

// observe learns from a sequenced event.
func (m *membership) observe(ev *imv1.SequencedEvent) {
	var users []string
	member := true
	switch p := ev.Payload.(type) {
	case *imv1.SequencedEvent_SessionCreate:
		users = append([]string{ev.SenderUserId}, p.SessionCreate.GetMemberUserIds()...)
	case *imv1.SequencedEvent_Membership:
		users = p.Membership.GetUserIds()
		member = p.Membership.GetOp() != imv1.MembershipChange_OP_REMOVE
	case *imv1.SequencedEvent_Group:
		if p.Group.GetJoin() == nil {
			m.mu.Lock()
			m.dropNegativeLocked(ev.SessionId)
			m.mu.Unlock()
			return
		}
		users = []string{ev.SenderUserId}
	default:
		return
	}
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dropNegativeLocked(ev.SessionId)
	for _, u := range users {
		k := mkey{ev.SessionId, u}
		if s, ok := m.local[k]; ok && s.seq >= ev.Seq {
			continue
		}
		m.local[k] = seen{member: member, seq: ev.Seq, at: now}
		delete(m.cache, k)
	}
}

// dropNegativeLocked drops the negative answers of session; m.mu is held.
func (m *membership) dropNegativeLocked(session string) {
	m.events++
	m.nNeg -= len(m.neg[session])
	delete(m.neg, session)
}

// sweep drops expired entries.
func (m *membership) sweep() {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, c := range m.cache {
		if now.Sub(c.at) >= m.ttl {
			delete(m.cache, k)
		}
	}
	for k, s := range m.local {
		if now.Sub(s.at) >= m.localTTL {
			delete(m.local, k)
		}
	}
	for session, users := range m.neg {
		for u, at := range users {
			if now.Sub(at) >= negativeTTL {
				delete(users, u)
				m.nNeg--
			}
		}
		if len(users) == 0 {
			delete(m.neg, session)
		}
	}
}

// Run drops expired entries once a second until ctx ends, and returns
// ctx.Err().
func (m *membership) Run(ctx context.Context) error {
	return every(ctx, time.Second, m.sweep)
}
