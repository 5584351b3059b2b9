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
}

func newMembership(s standingChecker, ttl, localTTL time.Duration) *membership {
	return &membership{store: s, ttl: ttl, localTTL: localTTL, now: time.Now,
		cache: map[mkey]cachedAnswer{}, local: map[mkey]seen{}}
}

// IsMember reports whether user is a current member of session.
func (m *membership) IsMember(ctx context.Context, session, user string) (bool, error) {
	st, err := m.Standing(ctx, session, user)
	return st == store.CurrentMember, err
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
			return
		}
		users = []string{ev.SenderUserId}
	default:
		return
	}
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, u := range users {
		k := mkey{ev.SessionId, u}
		if s, ok := m.local[k]; ok && s.seq >= ev.Seq {
			continue
		}
		m.local[k] = seen{member: member, seq: ev.Seq, at: now}
		delete(m.cache, k)
	}
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
}

// Run drops expired entries once a second until ctx ends, and returns
// ctx.Err().
func (m *membership) Run(ctx context.Context) error {
	return every(ctx, time.Second, m.sweep)
}
