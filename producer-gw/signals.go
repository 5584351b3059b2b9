package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/seqflow/seqflow/internal/apierr"
	"github.com/seqflow/seqflow/internal/auth"
	"github.com/seqflow/seqflow/internal/delivery"
	"github.com/seqflow/seqflow/internal/presence"
	"github.com/seqflow/seqflow/internal/store"
	"github.com/seqflow/seqflow/internal/wire"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// Typing indicators and the read and delivery cursors shown to the other
// members are ephemeral: they never enter Kafka. The sender's gateway checks
// membership, then hands each one to the gateways holding
// the other members' connections (presence in Redis), over the push
// transport, and those write it to the connections, dropping it rather
// than wait when a connection's queue is full. One may be lost anywhere on
// the way; each carries how long a client shows it, so a lost stop ends
// by itself.
const (
	// typingExpiry is how long a client shows an indicator that is not
	// repeated: clients repeat an active one every few seconds.
	typingExpiry = 6 * time.Second
	// typingRate and typingBurst bound a device's typing frames; more are
	// dropped (and refused with rate_limited when they carry a req_id).
	typingRate, typingBurst = 2, 4
	// typingMaxMembers: a session with more members gets no indicators
	// (in a group that large they are noise, and the fan-out would cost
	// every member's presence lookup per keystroke burst).
	typingMaxMembers = 500
	// typingQueue bounds the indicators waiting for their fan-out; past it
	// they are dropped.
	typingQueue = 1024
	// memberListTTL is how long a session's member list is reused.
	memberListTTL = time.Second
	// readFlush is how often the read cursors of this gateway's users are
	// fanned out: a user's reads of one session within it go out once,
	// with the highest seq.
	readFlush = 500 * time.Millisecond
	// cursorStoreWait is how long a cursor waits, flush after flush, for
	// the store's member list of its session to list its reader. The
	// reader passed the membership check, which also knows the membership
	// events this gateway has seen; the store learns them from the
	// persister, up to its batch time later. Until it does, the list would
	// address the cursor to nobody, so it waits (a new session, a fresh
	// join), then goes to whoever is listed.
	cursorStoreWait = 5 * time.Second
)

// memberLister lists the current members of a session, or of several in
// one query (the message store). It blocks on PostgreSQL; ctx bounds it.
type memberLister interface {
	Members(ctx context.Context, sessionID string) ([]string, error)
	MembersOf(ctx context.Context, sessionIDs []string) (map[string][]string, error)
}

// presenceReader finds users' connections (presence in Redis). It blocks
// on Redis; ctx bounds it.
type presenceReader interface {
	Lookup(ctx context.Context, users []string) (map[string][]presence.Conn, error)
}

var (
	_ memberLister   = (*store.Store)(nil)
	_ presenceReader = (*presence.Store)(nil)
	_ cursorSink     = (*signals)(nil)
)

// signals fans ephemeral signals out from this gateway: the read loop
// calls post (typing), the receipts call cursor; both only touch memory,
// and Run does the lookups and the sends.
type signals struct {
	gatewayID string
	members   memberChecker
	list      memberLister
	presence  presenceReader
	send      delivery.Sender
	limits    *limiters // per device
	queue     chan *imv1.Ephemeral
	log       *slog.Logger
	m         *metrics
	now       func() time.Time

	mu      sync.Mutex
	lists   map[string]memberList   // session → members, reused for memberListTTL
	cursors map[cursorKey]cursorVal // read and delivery cursors waiting for the next flush
}

type cursorKey struct{ session, user, kind string }

// cursorVal is a cursor waiting for the flush: the highest seq, whether
// it may be shown to the other members (false when any read it covers was
// made with read receipts off), and when it was first taken.
type cursorVal struct {
	seq   int64
	shown bool
	since time.Time
}

type memberList struct {
	users []string
	at    time.Time
}

func newSignals(gatewayID string, members memberChecker, list memberLister, pr presenceReader, send delivery.Sender,
	log *slog.Logger, m *metrics, now func() time.Time) *signals {
	return &signals{gatewayID: gatewayID, members: members, list: list, presence: pr, send: send,
		limits: newLimiters(typingRate, typingBurst, now), queue: make(chan *imv1.Ephemeral, typingQueue),
		log: log, m: m, now: now, lists: map[string]memberList{}, cursors: map[cursorKey]cursorVal{}}
}

// post takes a typing frame of p's device. It blocks only on the
// membership check (memory, or PostgreSQL on a cache miss; ctx bounds it)
// and returns an error for a non-member or a device over its rate; the
// fan-out happens in Run.
func (t *signals) post(ctx context.Context, p auth.Principal, f *wire.ClientFrame) *apierr.Error {
	if !t.limits.allow(p.UserID+"/"+p.DeviceID, t.now(), 1) {
		t.m.signals.WithLabelValues("typing", "rate_limited").Inc()
		return apierr.New(imv1.ErrorCode_ERROR_CODE_RATE_LIMITED, "typing indicators: at most 2 a second per device")
	}
	if err := requireMember(ctx, t.members, t.log, f.SessionID, p.UserID); err != nil {
		t.m.signals.WithLabelValues("typing", "not_a_member").Inc()
		return err
	}
	e := &imv1.Ephemeral{SessionId: f.SessionID, SenderUserId: p.UserID, SenderDeviceId: p.DeviceID,
		Signal: &imv1.Ephemeral_Typing{Typing: &imv1.Typing{Active: f.Active, ExpiresInMs: typingExpiry.Milliseconds()}}}
	select {
	case t.queue <- e:
	default:
		t.m.signals.WithLabelValues("typing", "dropped_queue_full").Inc()
	}
	return nil
}

// cursor takes the read (kind wire.ReceiptRead) or delivery
// (wire.ReceiptDelivered) cursor of a durable receipt of user, to show the
// other members at the next flush (unless !shown) and, a read cursor, to
// the user's own devices, whose unread counts follow it. It only touches
// memory.
func (t *signals) cursor(user, session, kind string, seq int64, shown bool) {
	k := cursorKey{session, user, kind}
	t.mu.Lock()
	v, ok := t.cursors[k]
	if !ok {
		v.shown, v.since = true, t.now()
	}
	t.cursors[k] = cursorVal{seq: max(v.seq, seq), shown: v.shown && shown, since: v.since}
	t.mu.Unlock()
}

// keep puts back a cursor the flush could not address yet, merged with
// any taken since, and drops its session's cached member list so the
// next flush reads it again.
func (t *signals) keep(k cursorKey, v cursorVal) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if cur, ok := t.cursors[k]; ok {
		v = cursorVal{seq: max(v.seq, cur.seq), shown: v.shown && cur.shown, since: v.since}
	}
	t.cursors[k] = v
	delete(t.lists, k.session)
}

// Run fans out queued indicators, and every readFlush the read cursors
// taken since the last, until ctx ends, and returns ctx.Err().
func (t *signals) Run(ctx context.Context) error {
	sweep := time.NewTicker(memberListTTL)
	defer sweep.Stop()
	flush := time.NewTicker(readFlush)
	defer flush.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-sweep.C:
			t.sweep()
		case <-flush.C:
			t.flushCursors(ctx)
		case e := <-t.queue:
			o, _ := t.address(ctx, e, true, false)
			t.fanOut(ctx, []outgoing{o})
		}
	}
}

// outgoing is one signal with the users it goes to; targets nil: it goes
// nowhere (dropped or nobody to tell).
type outgoing struct {
	e       *imv1.Ephemeral
	targets []string
}

// flushCursors fans out the cursors taken since the last flush together:
// one presence lookup for all of them and one push batch per gateway, so
// a flush costs a few round trips however many users read.
func (t *signals) flushCursors(ctx context.Context) {
	t.mu.Lock()
	cursors := t.cursors
	t.cursors = map[cursorKey]cursorVal{}
	t.mu.Unlock()
	if len(cursors) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	shown := map[string]bool{}
	for k, v := range cursors {
		if v.shown {
			shown[k.session] = true
		}
	}
	t.loadLists(ctx, shown)
	out := make([]outgoing, 0, len(cursors))
	now := t.now()
	for k, v := range cursors {
		e := &imv1.Ephemeral{SessionId: k.session, SenderUserId: k.user}
		toSelf := k.kind == wire.ReceiptRead
		if toSelf {
			e.Signal = &imv1.Ephemeral_Read{Read: &imv1.Read{Seq: v.seq}}
		} else {
			e.Signal = &imv1.Ephemeral_Delivered{Delivered: &imv1.Delivered{Seq: v.seq}}
		}
		o, behind := t.address(ctx, e, v.shown, toSelf)
		if behind && now.Sub(v.since) < cursorStoreWait {
			t.m.signals.WithLabelValues(signalName(e), "waiting_for_store").Inc()
			t.keep(k, v)
			continue
		}
		out = append(out, o)
	}
	t.fanOut(ctx, out)
}

// address finds who e goes to: the other members (toOthers) and the
// sender's own devices (toSelf). A member list that cannot be read drops
// e (counted). behind reports a member list that does not list e's sender:
// the store has not caught up with the sender's membership.
func (t *signals) address(ctx context.Context, e *imv1.Ephemeral, toOthers, toSelf bool) (o outgoing, behind bool) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	o = outgoing{e: e}
	if toOthers {
		users, err := t.memberList(ctx, e.SessionId)
		switch {
		case err != nil:
			t.m.signals.WithLabelValues(signalName(e), "dropped_error").Inc()
			t.log.Warn("signals: list members", "session_id", e.SessionId, "err", err)
			return o, false
		case len(users) > typingMaxMembers:
			t.m.signals.WithLabelValues(signalName(e), "dropped_large_group").Inc()
		default:
			behind = true
			o.targets = make([]string, 0, len(users))
			for _, u := range users {
				if u != e.SenderUserId {
					o.targets = append(o.targets, u)
				} else {
					behind = false
				}
			}
		}
	}
	if toSelf {
		o.targets = append(o.targets, e.SenderUserId)
	}
	return o, behind
}

// fanOut hands the signals to the gateways of their targets' connections,
// with one presence lookup for all targets and one push batch per
// gateway; a lookup or send that fails drops what it carried (counted).
func (t *signals) fanOut(ctx context.Context, out []outgoing) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var users []string
	seen := map[string]bool{}
	for _, o := range out {
		for _, u := range o.targets {
			if !seen[u] {
				seen[u] = true
				users = append(users, u)
			}
		}
	}
	if len(users) == 0 {
		return
	}
	conns, err := t.presence.Lookup(ctx, users)
	if err != nil {
		for _, o := range out {
			if len(o.targets) > 0 {
				t.m.signals.WithLabelValues(signalName(o.e), "dropped_error").Inc()
			}
		}
		t.log.Warn("signals: presence lookup", "signals", len(out), "err", err)
		return
	}
	now := t.now().UnixMilli()
	batches := map[string]*imv1.PushBatch{}
	for _, o := range out {
		if len(o.targets) == 0 {
			continue
		}
		o.e.SentTsMs = now
		byGateway := map[string][]*imv1.Recipient{}
		for _, u := range o.targets {
			for _, c := range conns[u] {
				byGateway[c.GatewayID] = append(byGateway[c.GatewayID], &imv1.Recipient{UserId: u, DeviceId: c.DeviceID, ConnId: c.ConnID})
			}
		}
		for gw, rs := range byGateway {
			b := batches[gw]
			if b == nil {
				b = &imv1.PushBatch{GatewayId: gw, Sender: "gateway", SentTsMs: now}
				batches[gw] = b
			}
			b.Items = append(b.Items, &imv1.PushItem{Recipients: rs, Item: &imv1.PushItem_Ephemeral{Ephemeral: o.e}})
		}
		t.m.signals.WithLabelValues(signalName(o.e), "sent").Inc()
	}
	for gw, b := range batches {
		if err := t.send.Send(ctx, b); err != nil {
			for _, it := range b.Items {
				t.m.signals.WithLabelValues(signalName(it.GetEphemeral()), "dropped_error").Inc()
			}
			t.log.Warn("signals: send to gateway", "gateway_id", gw, "signals", len(b.Items), "err", err)
		}
	}
}

// signalName labels e's kind in the metrics.
func signalName(e *imv1.Ephemeral) string {
	switch {
	case e.GetRead() != nil:
		return "read"
	case e.GetDelivered() != nil:
		return "delivered"
	}
	return "typing"
}

func (t *signals) memberList(ctx context.Context, session string) ([]string, error) {
	t.mu.Lock()
	l, ok := t.lists[session]
	t.mu.Unlock()
	if ok && t.now().Sub(l.at) < memberListTTL {
		return l.users, nil
	}
	users, err := t.list.Members(ctx, session)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	t.lists[session] = memberList{users: users, at: t.now()}
	t.mu.Unlock()
	return users, nil
}

// loadLists reads the member lists of those of sessions not cached, in
// one query, into the cache: a flush then costs one query however many
// sessions were read. A failure leaves them to memberList, which asks
// again and drops what it cannot address.
func (t *signals) loadLists(ctx context.Context, sessions map[string]bool) {
	now := t.now()
	var missing []string
	t.mu.Lock()
	for s := range sessions {
		if l, ok := t.lists[s]; !ok || now.Sub(l.at) >= memberListTTL {
			missing = append(missing, s)
		}
	}
	t.mu.Unlock()
	if len(missing) < 2 {
		return // memberList's own query is as cheap
	}
	lists, err := t.list.MembersOf(ctx, missing)
	if err != nil {
		t.log.Warn("signals: list members", "sessions", len(missing), "err", err)
		return
	}
	t.mu.Lock()
	for _, s := range missing {
		t.lists[s] = memberList{users: lists[s], at: now}
	}
	t.mu.Unlock()
}

func (t *signals) sweep() {
	now := t.now()
	t.limits.sweep(now)
	t.mu.Lock()
	defer t.mu.Unlock()
	for s, l := range t.lists {
		if now.Sub(l.at) >= memberListTTL {
			delete(t.lists, s)
		}
	}
}

// ephemeralFrame renders e for a recipient's connection.
func ephemeralFrame(e *imv1.Ephemeral) ([]byte, bool) {
	var v any
	switch s := e.Signal.(type) {
	case *imv1.Ephemeral_Typing:
		v = wire.TypingFrame{Op: wire.OpTyping, SessionID: e.SessionId, UserID: e.SenderUserId,
			DeviceID: e.SenderDeviceId, Active: s.Typing.Active, ExpiresInMs: s.Typing.ExpiresInMs}
	case *imv1.Ephemeral_Read:
		v = wire.ReceiptFrame{Op: wire.OpReceipt, SessionID: e.SessionId, UserID: e.SenderUserId, Kind: wire.ReceiptRead, Seq: s.Read.Seq}
	case *imv1.Ephemeral_Delivered:
		v = wire.ReceiptFrame{Op: wire.OpReceipt, SessionID: e.SessionId, UserID: e.SenderUserId, Kind: wire.ReceiptDelivered, Seq: s.Delivered.Seq}
	default:
		return nil, false
	}
	b, err := json.Marshal(v)
	return b, err == nil
}
