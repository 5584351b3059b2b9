package client

import (
	"fmt"
	"maps"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/seqflow/seqflow/internal/store"
)

// unreadLog collects what a client's OnUnread receives.
type unreadLog struct {
	mu      sync.Mutex
	updates []UnreadUpdate
	wake    chan struct{}
}

func newUnreadLog() *unreadLog { return &unreadLog{wake: make(chan struct{}, 1)} }

func (l *unreadLog) add(u UnreadUpdate) {
	l.mu.Lock()
	l.updates = append(l.updates, u)
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// waitFor waits until one update received so far satisfies ok, and
// returns it.
func (l *unreadLog) waitFor(t *testing.T, d time.Duration, what string, ok func(UnreadUpdate) bool) UnreadUpdate {
	t.Helper()
	deadline := time.After(d)
	for {
		l.mu.Lock()
		us := append([]UnreadUpdate(nil), l.updates...)
		l.mu.Unlock()
		for _, u := range us {
			if ok(u) {
				return u
			}
		}
		select {
		case <-l.wake:
		case <-deadline:
			t.Fatalf("no unread update with %s within %v; got %+v", what, d, us)
		}
	}
}

// TestUnreadCounts runs the SDK against the whole pipeline: bob's phone
// gets the count of a session and the total with each of alice's messages
// in two groups, the counts drop to 0 for a group when bob reads it on
// another device (an unread frame), and a device that connects later
// starts from the changes seed.
func TestUnreadCounts(t *testing.T) {
	p := newPipeline(t)
	gw := p.gateway(t, "gw-unread")
	alice, bob := user("alice"), user("bob")
	// No recheck or resync: every count after the connect's seed comes
	// from an event or an unread frame.
	quiet := func(o *Options) { o.RecheckAfter, o.ResyncInterval = -1, -1 }
	a := p.start(t, alice, "phone", []string{gw.url}, nil)
	phone := newUnreadLog()
	p.start(t, bob, "phone", []string{gw.url}, func(o *Options) { quiet(o); o.OnUnread = phone.add })
	laptop := p.start(t, bob, "laptop", []string{gw.url}, quiet)
	ctx := ctxT(t, 2*time.Minute)

	phone.waitFor(t, time.Minute, "the connect's seed", func(u UnreadUpdate) bool {
		return u.Cause == UnreadChanges && u.TotalUnread == 0 && len(u.Sessions) == 0
	})
	g1, err := a.CreateGroup(ctx, "unread one", bob)
	if err != nil {
		t.Fatal(err)
	}
	g2, err := a.CreateGroup(ctx, "unread two", bob)
	if err != nil {
		t.Fatal(err)
	}
	send := func(session string, i int) int64 {
		t.Helper()
		ack, err := a.Send(ctx, session, Text(fmt.Sprintf("m%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		return ack.Seq
	}
	var last1 int64
	for i := 1; i <= 3; i++ {
		last1 = send(g1.SessionID, i)
		want := UnreadUpdate{Cause: UnreadEvent, SessionID: g1.SessionID, Unread: int64(i), Seq: last1, TotalUnread: int64(i)}
		phone.waitFor(t, time.Minute, fmt.Sprintf("%+v", want), func(u UnreadUpdate) bool { return reflect.DeepEqual(u, want) })
	}
	for i := 1; i <= 2; i++ {
		seq := send(g2.SessionID, i)
		want := UnreadUpdate{Cause: UnreadEvent, SessionID: g2.SessionID, Unread: int64(i), Seq: seq, TotalUnread: 3 + int64(i)}
		phone.waitFor(t, time.Minute, fmt.Sprintf("%+v", want), func(u UnreadUpdate) bool { return reflect.DeepEqual(u, want) })
	}

	// A device connecting now starts from the store's counts, once the
	// store holds the messages (it trails the push by a persister batch).
	// Asked of the store itself: a connection's changes also counts what
	// it was pushed shortly before, which the store may not hold yet.
	want := map[string]int64{g1.SessionID: 3, g2.SessionID: 2}
	st, err := store.Open(ctx, p.pool, "")
	if err != nil {
		t.Fatal(err)
	}
	waitQuery(t, p, "the store's counts", func() bool {
		ss, err := st.Changes(ctx, bob)
		got := map[string]int64{}
		for _, s := range ss {
			got[s.SessionID] = s.Unread
		}
		return err == nil && maps.Equal(got, want)
	})
	tablet := newUnreadLog()
	p.start(t, bob, "tablet", []string{gw.url}, func(o *Options) { quiet(o); o.OnUnread = tablet.add })
	tablet.waitFor(t, time.Minute, "the connect's seed", func(u UnreadUpdate) bool {
		return u.Cause == UnreadChanges && u.TotalUnread == 5 && maps.Equal(u.Sessions, want)
	})

	// Bob reads the first group on his laptop: his phone and tablet learn
	// it from an unread frame.
	if err := laptop.MarkRead(ctx, g1.SessionID, last1); err != nil {
		t.Fatal(err)
	}
	read := UnreadUpdate{Cause: UnreadRead, SessionID: g1.SessionID, Unread: 0, ReadSeq: last1, TotalUnread: 2}
	for name, l := range map[string]*unreadLog{"phone": phone, "tablet": tablet} {
		t.Logf("%s: %+v", name, l.waitFor(t, time.Minute, fmt.Sprintf("%+v", read), func(u UnreadUpdate) bool { return reflect.DeepEqual(u, read) }))
	}
}
