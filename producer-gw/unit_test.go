package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/seqflow/seqflow/internal/auth"
	"github.com/seqflow/seqflow/internal/presence"
	"github.com/seqflow/seqflow/internal/store"
	"github.com/seqflow/seqflow/internal/wire"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// fakeMembers is an in-process stand-in for the message store, for unit
// tests of the membership logic only; integration tests use PostgreSQL.
type fakeMembers struct {
	members map[mkey]store.Standing
	calls   int
	err     error
	block   func() // runs during each call, when set
}

func (f *fakeMembers) Standing(_ context.Context, s, u string) (store.Standing, error) {
	f.calls++
	if f.block != nil {
		f.block()
	}
	return f.members[mkey{s, u}], f.err
}

func TestMembership(t *testing.T) {
	ev := func(seq int64, p any) *imv1.SequencedEvent {
		e := &imv1.SequencedEvent{SessionId: "s", Seq: seq, SenderUserId: "owner"}
		switch x := p.(type) {
		case *imv1.SessionCreate:
			e.Payload = &imv1.SequencedEvent_SessionCreate{SessionCreate: x}
		case *imv1.MembershipChange:
			e.Payload = &imv1.SequencedEvent_Membership{Membership: x}
		case *imv1.MessageContent:
			e.Payload = &imv1.SequencedEvent_Message{Message: x}
		}
		return e
	}
	remove := &imv1.MembershipChange{Op: imv1.MembershipChange_OP_REMOVE, UserIds: []string{"bob"}}
	add := &imv1.MembershipChange{Op: imv1.MembershipChange_OP_ADD, UserIds: []string{"bob"}}
	const never, former, current = store.NotMember, store.FormerMember, store.CurrentMember
	cases := []struct {
		name     string
		store    map[mkey]store.Standing
		events   []*imv1.SequencedEvent
		user     string
		standing store.Standing
		receive  map[int64]bool // seq → may receive
	}{
		{name: "store says member", store: map[mkey]store.Standing{{"s", "bob"}: current}, user: "bob", standing: current, receive: map[int64]bool{5: true}},
		{name: "store says former member", store: map[mkey]store.Standing{{"s", "bob"}: former}, user: "bob", standing: former},
		{name: "store lags a create", events: []*imv1.SequencedEvent{ev(1, &imv1.SessionCreate{MemberUserIds: []string{"bob"}})}, user: "owner", standing: current},
		{name: "create lists member", events: []*imv1.SequencedEvent{ev(1, &imv1.SessionCreate{MemberUserIds: []string{"bob"}})}, user: "bob", standing: current},
		{name: "removal beats a lagging store", store: map[mkey]store.Standing{{"s", "bob"}: current}, events: []*imv1.SequencedEvent{ev(7, remove)}, user: "bob", standing: former,
			receive: map[int64]bool{6: true, 7: true, 8: false}},
		{name: "re-added", events: []*imv1.SequencedEvent{ev(7, remove), ev(9, add)}, user: "bob", standing: current, receive: map[int64]bool{10: true}},
		{name: "an older event does not undo a newer one", events: []*imv1.SequencedEvent{ev(9, add), ev(7, remove)}, user: "bob", standing: current, receive: map[int64]bool{10: true}},
		{name: "messages change nothing", store: map[mkey]store.Standing{}, events: []*imv1.SequencedEvent{ev(3, &imv1.MessageContent{Type: "text"})}, user: "bob", standing: never,
			receive: map[int64]bool{3: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := newMembership(&fakeMembers{members: c.store}, time.Minute, time.Minute)
			for _, e := range c.events {
				m.observe(e)
			}
			got, err := m.Standing(context.Background(), "s", c.user)
			if err != nil || got != c.standing {
				t.Fatalf("Standing = %v, %v; want %v", got, err, c.standing)
			}
			if member, err := m.IsMember(context.Background(), "s", c.user); err != nil || member != (c.standing == current) {
				t.Fatalf("IsMember = %v, %v; want %v", member, err, c.standing == current)
			}
			for seq, want := range c.receive {
				if got := m.mayReceive("s", c.user, seq); got != want {
					t.Fatalf("mayReceive(seq %d) = %v, want %v", seq, got, want)
				}
			}
		})
	}
}

func TestMembershipCacheAndExpiry(t *testing.T) {
	store := &fakeMembers{members: map[mkey]store.Standing{{"s", "bob"}: store.CurrentMember}}
	m := newMembership(store, time.Second, 10*time.Second)
	now := time.Unix(1000, 0)
	m.now = func() time.Time { return now }
	for i := 0; i < 3; i++ {
		if ok, _ := m.IsMember(context.Background(), "s", "bob"); !ok {
			t.Fatal("not a member")
		}
	}
	if store.calls != 1 {
		t.Fatalf("store asked %d times within the cache TTL, want 1", store.calls)
	}
	now = now.Add(2 * time.Second)
	m.sweep()
	_, _ = m.IsMember(context.Background(), "s", "bob")
	if store.calls != 2 {
		t.Fatalf("store asked %d times after the TTL, want 2", store.calls)
	}
	m.observe(&imv1.SequencedEvent{SessionId: "s", Seq: 4, Payload: &imv1.SequencedEvent_Membership{
		Membership: &imv1.MembershipChange{Op: imv1.MembershipChange_OP_REMOVE, UserIds: []string{"bob"}}}})
	if ok, _ := m.IsMember(context.Background(), "s", "bob"); ok {
		t.Fatal("removal not applied")
	}
	now = now.Add(11 * time.Second)
	m.sweep()
	if ok, _ := m.IsMember(context.Background(), "s", "bob"); !ok {
		t.Fatal("after the local TTL the store decides again")
	}
	store.err = errors.New("down")
	now = now.Add(2 * time.Second)
	if _, err := m.IsMember(context.Background(), "s", "bob"); err == nil {
		t.Fatal("store error swallowed")
	}
}

func TestWaiters(t *testing.T) {
	w := newWaiters(nil, time.Now)
	k := ackKey{"s", "c1", "alice"}
	now := time.Unix(0, 0)
	t.Run("resolve reaches the waiter", func(t *testing.T) {
		p := w.add(k, now)
		if !w.resolve(k, seqResult{seq: 3}) {
			t.Fatal("nobody waiting")
		}
		if r := <-p.ch; r.seq != 3 {
			t.Fatalf("got %+v", r)
		}
	})
	t.Run("another user's event resolves nothing", func(t *testing.T) {
		p := w.add(k, now)
		if w.resolve(ackKey{"s", "c1", "mallory"}, seqResult{seq: 9}) {
			t.Fatal("resolved across users")
		}
		w.remove(p)
		if w.len() != 0 {
			t.Fatal("remove left an entry")
		}
	})
	t.Run("late result goes to the notice", func(t *testing.T) {
		p := w.add(k, now)
		var got seqResult
		if _, raced := p.toNotice(func(r seqResult) { got = r }, now.Add(time.Minute)); raced {
			t.Fatal("raced without a result")
		}
		w.resolve(k, seqResult{seq: 5})
		if got.seq != 5 {
			t.Fatalf("notice got %+v", got)
		}
	})
	t.Run("result that raced the timeout is returned", func(t *testing.T) {
		p := w.add(k, now)
		w.resolve(k, seqResult{seq: 6})
		if r, raced := p.toNotice(func(seqResult) { t.Fatal("notice called") }, now); !raced || r.seq != 6 {
			t.Fatalf("toNotice = %+v, %v", r, raced)
		}
	})
	t.Run("a second copy of a seq does not answer a retry sent since", func(t *testing.T) {
		// The direct ACK answers the send at uplink 2/40; the client
		// retries (uplink 2/41); the pusher's copy of the same seq then
		// comes and must leave the retry to its own duplicate ACK.
		first := w.add(k, now)
		first.produced(2, 40)
		seq := seqResult{seq: 7, msgID: 70, uplink: uplinkPos{2, 40, true}}
		if !w.resolve(k, seq) {
			t.Fatal("the first copy answered nothing")
		}
		if r := <-first.ch; r.seq != 7 || r.duplicate {
			t.Fatalf("first = %+v", r)
		}
		retry := w.add(k, now)
		retry.produced(2, 41)
		if w.resolve(k, seq) {
			t.Fatal("the second copy answered the retry")
		}
		if !w.resolve(k, seqResult{seq: 7, msgID: 70, duplicate: true}) {
			t.Fatal("the duplicate ACK answered nothing")
		}
		if r := <-retry.ch; r.seq != 7 || !r.duplicate {
			t.Fatalf("retry = %+v, want seq 7 duplicate", r)
		}
		if w.len() != 0 {
			t.Fatal("entries left")
		}
	})
	t.Run("a seq that comes before Kafka's answer to the produce waits for it", func(t *testing.T) {
		p := w.add(k, now) // its produce callback has not run
		if w.resolve(k, seqResult{seq: 8, uplink: uplinkPos{2, 49, true}}) {
			t.Fatal("another uplink's seq answered a command of unknown position")
		}
		if w.resolve(k, seqResult{seq: 9, uplink: uplinkPos{2, 50, true}, source: "sequencer"}) {
			t.Fatal("answered before the position was known")
		}
		w.resolve(k, seqResult{seq: 9, uplink: uplinkPos{2, 50, true}, source: "pusher"}) // the second copy
		if r, ok := p.produced(2, 50); !ok || r.seq != 9 || r.source != "sequencer" {
			t.Fatalf("produced = %+v, %v; want the seq of its uplink handed over, from the first copy", r, ok)
		}
		w.remove(p)
		if r := <-p.ch; r.seq != 9 {
			t.Fatalf("got %+v, want the seq of uplink 2/50", r)
		}
		q := w.add(k, now)
		w.resolve(k, seqResult{seq: 8, uplink: uplinkPos{2, 49, true}})
		if _, ok := q.produced(2, 51); ok {
			t.Fatal("produced handed over another uplink's seq")
		}
		w.remove(q)
		if w.len() != 0 {
			t.Fatal("entries left")
		}
	})
	t.Run("expired notices are swept", func(t *testing.T) {
		p := w.add(k, now)
		p.toNotice(func(seqResult) {}, now.Add(time.Second))
		w.sweep(now.Add(2 * time.Second))
		if w.len() != 0 {
			t.Fatal("expired notice kept")
		}
	})
}

func TestSessionIDs(t *testing.T) {
	cases := []struct {
		name string
		a, b string
	}{
		{"simple", "alice", "bob"},
		{"equal prefixes", "ab", "abc"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			x, y := DirectSessionID(c.a, c.b), DirectSessionID(c.b, c.a)
			if x != y || len(x) != 34 {
				t.Fatalf("DirectSessionID not symmetric: %s %s", x, y)
			}
		})
	}
	if DirectSessionID("a", "bc") == DirectSessionID("ab", "c") {
		t.Fatal("pairs collide")
	}
	if groupSessionID("u", "c1") != groupSessionID("u", "c1") || groupSessionID("u", "c1") == groupSessionID("v", "c1") {
		t.Fatal("group IDs must repeat per (creator, client_msg_id) and differ across creators")
	}
}

func TestLimiter(t *testing.T) {
	l := newLimiters(1, 2, time.Now)
	now := time.Unix(100, 0)
	got := []bool{l.allow("u", now, 1), l.allow("u", now, 1), l.allow("u", now, 1), l.allow("v", now, 1), l.allow("u", now.Add(time.Second), 1), l.allow("w", now, 3)}
	want := []bool{true, true, false, true, true, false}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("allow #%d = %v, want %v (all: %v)", i, got[i], want[i], got)
		}
	}
	l.sweep(now.Add(time.Hour))
	if len(l.m) != 0 {
		t.Fatal("idle limiters kept")
	}
}

// TestLimiterFallsBackWithoutRedis points the limiter at a closed port:
// every decision is taken by the local buckets (and counted), Redis is
// tried once per cooldown, not once per request, and nothing is refused
// because Redis is down.
func TestLimiterFallsBackWithoutRedis(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer rdb.Close()
	m := newMetrics(prometheus.NewRegistry())
	now := time.Unix(100, 0)
	clock := func() time.Time { return now }
	l := newLimiter(rdb, Config{RatePerUser: 1, RateBurst: 2, RatePerDevice: 1, RateDeviceBurst: 1},
		slog.New(slog.DiscardHandler), m, clock)
	p := auth.Principal{UserID: "u", DeviceID: "d1"}
	other := auth.Principal{UserID: "u", DeviceID: "d2"}
	got := []bool{l.allow(t.Context(), p), l.allow(t.Context(), p), l.allow(t.Context(), other), l.allow(t.Context(), other)}
	// d1's bucket holds 1 (the device limit), the user's 2: d2's first
	// request takes the user's second token, its second finds none.
	if want := []bool{true, false, true, false}; !slices.Equal(got, want) {
		t.Fatalf("allow = %v, want %v", got, want)
	}
	if n := testutil.ToFloat64(m.rateFallbacks); n != 4 {
		t.Fatalf("fallbacks = %v, want 4", n)
	}
	l.mu.Lock()
	down := l.downUntil
	l.mu.Unlock()
	if !down.Equal(now.Add(redisLimitCooldown)) {
		t.Fatalf("redis skipped until %v, want %v: only the first request may wait on it", down, now.Add(redisLimitCooldown))
	}
}

// blockingMembers is an in-process stand-in for the message store (unit
// test only) whose answers wait until release is closed.
type blockingMembers struct {
	entered chan string
	release chan struct{}
}

func (f *blockingMembers) Standing(_ context.Context, s, _ string) (store.Standing, error) {
	f.entered <- s
	<-f.release
	return store.NotMember, nil // not a member: nothing is produced
}

// TestReceiptBatchAddsWhileFlushing: a flush waiting on the membership
// check (PostgreSQL, in the gateway) must not hold up the connection's
// read loop, which adds the next cursors.
func TestReceiptBatchAddsWhileFlushing(t *testing.T) {
	store := &blockingMembers{entered: make(chan string, 16), release: make(chan struct{})}
	rs := newReceipts(Config{DeliveredFlushCount: 2, DeliveredFlushInterval: time.Hour}, nil, newMembership(store, 0, 0), nil, nil, time.Now)
	b := rs.batch(auth.Principal{UserID: "u", DeviceID: "d"})
	go b.add([]wire.Cursor{{SessionID: "s1", Seq: 1}, {SessionID: "s1", Seq: 2}}) // two updates: flushes
	if s := <-store.entered; s != "s1" {
		t.Fatalf("flush checked %q, want s1", s)
	}
	added := make(chan struct{})
	go func() {
		b.add([]wire.Cursor{{SessionID: "s2", Seq: 7}}) // one update: gathered
		close(added)
	}()
	select {
	case <-added:
	case <-time.After(10 * time.Second):
		close(store.release)
		t.Fatal("add waited for a flush's membership check")
	}
	close(store.release)
	b.stop() // flushes s2
	if s := <-store.entered; s != "s2" {
		t.Fatalf("stop flushed %q, want s2", s)
	}
	b.add([]wire.Cursor{{SessionID: "s3", Seq: 1}, {SessionID: "s3", Seq: 2}})
	select {
	case s := <-store.entered:
		t.Fatalf("an add after stop flushed %q", s)
	default:
	}
}

// fakeLists, fakePresence and fakeSend are in-process stand-ins for the
// message store, presence in Redis and the push transport, for the unit
// test of the cursor flush only; TestSeen and TestTyping run it on the
// real stack.
type fakeLists struct {
	members      map[string][]string
	one, batches int
}

func (f *fakeLists) Members(_ context.Context, s string) ([]string, error) {
	f.one++
	return f.members[s], nil
}

func (f *fakeLists) MembersOf(_ context.Context, ss []string) (map[string][]string, error) {
	f.batches++
	out := map[string][]string{}
	for _, s := range ss {
		if m, ok := f.members[s]; ok {
			out[s] = m
		}
	}
	return out, nil
}

type fakePresence struct{}

func (fakePresence) Lookup(_ context.Context, users []string) (map[string][]presence.Conn, error) {
	out := map[string][]presence.Conn{}
	for _, u := range users {
		out[u] = []presence.Conn{{UserID: u, DeviceID: "d", ConnID: "c-" + u, GatewayID: "gw"}}
	}
	return out, nil
}

type fakeSend struct{ batches []*imv1.PushBatch }

func (f *fakeSend) Send(_ context.Context, b *imv1.PushBatch) error {
	f.batches = append(f.batches, b)
	return nil
}
func (f *fakeSend) Close() error { return nil }

// A flush reads the member lists of all the sessions whose cursors it
// carries in one query, and addresses each cursor to the other members.
func TestCursorFlushListsMembersOnce(t *testing.T) {
	now := time.Unix(1000, 0)
	lists := &fakeLists{members: map[string][]string{}}
	for i := range 20 {
		s := fmt.Sprintf("s%d", i)
		lists.members[s] = []string{"a" + s, "b" + s}
	}
	send := &fakeSend{}
	sg := newSignals("gw", nil, lists, fakePresence{}, send, slog.New(slog.DiscardHandler), newMetrics(prometheus.NewRegistry()), func() time.Time { return now })
	for s := range lists.members {
		sg.cursor("a"+s, s, wire.ReceiptRead, 5, true)
		sg.cursor("b"+s, s, wire.ReceiptDelivered, 7, true)
	}
	sg.flushCursors(t.Context())
	if lists.batches != 1 || lists.one != 0 {
		t.Fatalf("one flush of 20 sessions: %d batch and %d single queries, want 1 and 0", lists.batches, lists.one)
	}
	got := map[string]int64{} // "to user: signal from" → seq
	for _, b := range send.batches {
		for _, it := range b.Items {
			e := it.GetEphemeral()
			for _, r := range it.Recipients {
				got[r.UserId+": "+signalName(e)+" of "+e.SenderUserId] = e.GetRead().GetSeq() + e.GetDelivered().GetSeq()
			}
		}
	}
	for s := range lists.members {
		// a's read goes to b and to a's own devices; b's delivery to a.
		for k, want := range map[string]int64{"b" + s + ": read of a" + s: 5, "a" + s + ": read of a" + s: 5, "a" + s + ": delivered of b" + s: 7} {
			if got[k] != want {
				t.Errorf("%s: seq %d, want %d", k, got[k], want)
			}
		}
	}
	if len(got) != 60 {
		t.Errorf("%d deliveries, want 60: %v", len(got), got)
	}
	// Within memberListTTL the lists are reused.
	sg.cursor("as1", "s1", wire.ReceiptRead, 6, true)
	sg.cursor("as2", "s2", wire.ReceiptRead, 6, true)
	sg.flushCursors(t.Context())
	if lists.batches != 1 || lists.one != 0 {
		t.Fatalf("a second flush within the TTL queried: %d batch and %d single queries", lists.batches, lists.one)
	}
}

// A cursor whose reader the store does not list as a member yet (the
// store trails the log by the persister's batch) is kept for the next
// flushes, with the member list read again each time, and reaches the
// other members once the store lists them; past cursorStoreWait it goes
// to whoever is listed. With the fakes above (unit test only; TestSDK's
// "read cursors" and TestSeen run it on the real stack).
func TestCursorWaitsForTheStore(t *testing.T) {
	now := time.Unix(1000, 0)
	lists := &fakeLists{members: map[string][]string{}}
	send := &fakeSend{}
	m := newMetrics(prometheus.NewRegistry())
	sg := newSignals("gw", nil, lists, fakePresence{}, send, slog.New(slog.DiscardHandler), m, func() time.Time { return now })
	delivered := func() map[string]int64 { // "to user: signal of reader" → seq
		got := map[string]int64{}
		for _, b := range send.batches {
			for _, it := range b.Items {
				e := it.GetEphemeral()
				for _, r := range it.Recipients {
					got[r.UserId+": "+signalName(e)+" of "+e.SenderUserId] = e.GetRead().GetSeq()
				}
			}
		}
		send.batches = nil
		return got
	}

	// The store has no member list for s yet: nothing goes out, not even
	// to bob's own devices, and the cursor is kept.
	sg.cursor("bob", "s", wire.ReceiptRead, 5, true)
	sg.flushCursors(t.Context())
	if got := delivered(); len(got) != 0 {
		t.Fatalf("flushed while the store lists nobody: %v", got)
	}
	if w := testutil.ToFloat64(m.signals.WithLabelValues("read", "waiting_for_store")); w != 1 {
		t.Fatalf("waiting_for_store = %v, want 1", w)
	}
	// A later read of bob joins the kept cursor (the highest seq goes).
	sg.cursor("bob", "s", wire.ReceiptRead, 6, true)
	lists.members["s"] = []string{"alice", "bob"}
	now = now.Add(readFlush)
	sg.flushCursors(t.Context())
	got := delivered()
	if got["alice: read of bob"] != 6 || got["bob: read of bob"] != 6 || len(got) != 2 {
		t.Fatalf("once the store lists bob: %v, want alice and bob's own devices at 6", got)
	}

	// A reader the store never lists: kept until cursorStoreWait, then
	// sent to the reader's own devices only, and not kept again.
	sg.cursor("carol", "t", wire.ReceiptRead, 3, true)
	for since := now; now.Sub(since) < cursorStoreWait; now = now.Add(readFlush) {
		sg.flushCursors(t.Context())
		if got := delivered(); len(got) != 0 {
			t.Fatalf("flush %v into the wait: %v", now.Sub(since), got)
		}
	}
	sg.flushCursors(t.Context())
	if got := delivered(); got["carol: read of carol"] != 3 || len(got) != 1 {
		t.Fatalf("past the wait: %v, want carol's own devices only", got)
	}
	sg.flushCursors(t.Context())
	if got := delivered(); len(got) != 0 {
		t.Fatalf("the cursor was kept past the wait: %v", got)
	}
}
