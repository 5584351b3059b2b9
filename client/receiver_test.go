package client

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/seqflow/seqflow/internal/wire"
)

// fakeStore is an in-process stand-in for the gateway's sync (this is a
// unit test of the receiver; the real sync is exercised by TestSDK): a
// session log with gaps in its seqs, of which the store holds a prefix
// that grows as time passes, like the persister lagging the log.
type fakeStore struct {
	mu     sync.Mutex
	log    []wire.Message
	stored int // how much of log the store holds
	pages  int // sync pages asked for
}

// testRecovery is the receiver's recovery with the client's defaults but
// the gap timeout.
func testRecovery(gapTimeout time.Duration) recovery {
	return recovery{gapTimeout: gapTimeout, gapWait: 250 * time.Millisecond, pagesPerSecond: 10}
}

func (f *fakeStore) sync(_ context.Context, session string, after int64) ([]wire.Message, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pages++
	const limit = 4
	var out []wire.Message
	for _, m := range f.log[:f.stored] {
		if m.Seq > after {
			if len(out) == limit {
				return out, true, nil
			}
			out = append(out, m)
		}
	}
	return out, false, nil
}

// pagesAsked returns how many sync pages were asked for.
func (f *fakeStore) pagesAsked() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pages
}

func (f *fakeStore) grow() {
	f.mu.Lock()
	f.stored = min(f.stored+1, len(f.log))
	f.mu.Unlock()
}

// TestReceiverDeliversTheLogOnceInOrder pushes a log with seq gaps through
// a lossy, repeating, reordering push path and checks that the app sees
// exactly the log, in order, once.
func TestReceiverDeliversTheLogOnceInOrder(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3, 4, 5} {
		t.Run("seed "+string(rune('0'+seed)), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := rand.New(rand.NewPCG(seed, 99))
				store := &fakeStore{}
				seq := int64(0)
				for range 60 {
					seq += 1 + int64(r.IntN(10)/9) // about one gap in ten
					store.log = append(store.log, ev("s", seq))
				}
				var mu sync.Mutex
				var got []int64
				st := &counters{}
				rc := newReceiver(newTracker(nil, false), store.sync, testRecovery(time.Hour), st,
					func(e Event) { mu.Lock(); got = append(got, e.Seq); mu.Unlock() }, func(string, int64) {})
				ctx, cancel := context.WithCancel(context.Background())
				rc.begin(ctx)
				done := make(chan struct{})
				go func() { rc.run(ctx); close(done) }()

				for i, m := range store.log {
					store.grow()
					switch x := r.IntN(10); {
					case x == 0: // lost
					case x == 1: // repeated
						rc.push(m)
						rc.push(m)
					case x == 2 && i > 0: // an old one again
						rc.push(store.log[r.IntN(i)])
						rc.push(m)
					default:
						rc.push(m)
					}
					time.Sleep(time.Millisecond)
				}
				// The last push may be lost: a resync (as after a reconnect or on
				// the resync interval) finds it.
				rc.catchUp([]wire.SessionChange{{SessionID: "s", MaxSeq: seq}})
				time.Sleep(5 * time.Second)
				cancel()
				<-done
				mu.Lock()
				defer mu.Unlock()
				if len(got) != len(store.log) {
					t.Fatalf("got %d events, want %d: %v", len(got), len(store.log), got)
				}
				for i, m := range store.log {
					if got[i] != m.Seq {
						t.Fatalf("event %d is seq %d, want %d", i, got[i], m.Seq)
					}
				}
				if st.GapTimeouts.Load() != 0 {
					t.Fatalf("gap timeouts: %d", st.GapTimeouts.Load())
				}
			})
		})
	}
}

// TestReceiverGivesUpOnAStoreThatNeverCatchesUp: after the gap timeout the
// held events go out past the hole, in order, and the timeout is counted.
func TestReceiverGivesUpOnAStoreThatNeverCatchesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &fakeStore{log: []wire.Message{ev("s", 1)}, stored: 1}
		var got []int64
		var mu sync.Mutex
		st := &counters{}
		rc := newReceiver(newTracker(nil, false), store.sync, testRecovery(3*time.Second), st,
			func(e Event) { mu.Lock(); got = append(got, e.Seq); mu.Unlock() }, func(string, int64) {})
		ctx, cancel := context.WithCancel(context.Background())
		rc.begin(ctx)
		done := make(chan struct{})
		go func() { rc.run(ctx); close(done) }()
		rc.push(ev("s", 3))
		rc.push(ev("s", 4))
		time.Sleep(2 * time.Second)
		synctest.Wait()
		mu.Lock()
		early := append([]int64(nil), got...)
		mu.Unlock()
		time.Sleep(2 * time.Second)
		cancel()
		<-done
		if len(early) != 1 || early[0] != 1 {
			t.Fatalf("before the timeout: %v, want [1]", early)
		}
		if len(got) != 3 || got[1] != 3 || got[2] != 4 || st.GapTimeouts.Load() != 1 {
			t.Fatalf("after the timeout: %v (timeouts %d), want [1 3 4] and 1", got, st.GapTimeouts.Load())
		}
	})
}

// appLog is an app handler that keeps what it was handed.
type appLog struct {
	mu  sync.Mutex
	got []int64
}

func (r *appLog) handle(e Event) { r.mu.Lock(); r.got = append(r.got, e.Seq); r.mu.Unlock() }

func (r *appLog) seqs() []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int64(nil), r.got...)
}

// startReceiver runs rc until the test ends.
func startReceiver(t *testing.T, rc *receiver) {
	ctx, cancel := context.WithCancel(context.Background())
	rc.begin(ctx)
	done := make(chan struct{})
	go func() { rc.run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// TestReceiverWaitsForPushesInFlight: a gap that the pushes behind it
// close within the gap wait costs no sync; one they do not close is
// filled once the wait is over.
func TestReceiverWaitsForPushesInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &fakeStore{log: []wire.Message{ev("s", 1), ev("s", 2), ev("s", 3), ev("s", 4), ev("s", 5), ev("s", 6)}, stored: 6}
		app := &appLog{}
		rc := newReceiver(newTracker(nil, false), store.sync, testRecovery(time.Hour), &counters{}, app.handle, func(string, int64) {})
		startReceiver(t, rc)
		rc.push(ev("s", 1))
		rc.push(ev("s", 3)) // 2 is behind it on the push path
		time.Sleep(100 * time.Millisecond)
		rc.push(ev("s", 2))
		time.Sleep(time.Second)
		synctest.Wait()
		if got := app.seqs(); !slices.Equal(got, []int64{1, 2, 3}) || store.pagesAsked() != 0 {
			t.Fatalf("a gap closed by a push in flight: handed %v with %d sync pages, want [1 2 3] and none", got, store.pagesAsked())
		}
		rc.push(ev("s", 6)) // 4 and 5 were lost
		time.Sleep(200 * time.Millisecond)
		synctest.Wait()
		if store.pagesAsked() != 0 {
			t.Fatalf("a fill started %d pages before the gap wait was over", store.pagesAsked())
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if got := app.seqs(); !slices.Equal(got, []int64{1, 2, 3, 4, 5, 6}) || store.pagesAsked() == 0 {
			t.Fatalf("a gap no push closed: handed %v with %d sync pages, want [1 .. 6] by a fill", got, store.pagesAsked())
		}
	})
}

// membership returns a membership event of session at seq that adds or
// removes user.
func membership(session string, seq int64, action, user string) wire.Message {
	return wire.Message{SessionID: session, Seq: seq, Kind: wire.KindMembership, Action: action, UserIDs: []string{user}}
}

// TestReceiverResumesAtReAdd: a member removed and added back is handed
// its removal, then its re-add and what follows, never the events of its
// absence, whether the re-add comes pushed (no sync at all) or in a fill.
func TestReceiverResumesAtReAdd(t *testing.T) {
	log := []wire.Message{ev("s", 1), membership("s", 2, wire.ActionRemove, "me")}
	for seq := int64(3); seq < 40; seq++ {
		log = append(log, ev("s", seq))
	}
	log = append(log, membership("s", 40, wire.ActionAdd, "me"), ev("s", 41))
	want := []int64{1, 2, 40, 41}
	t.Run("pushed", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			store := &fakeStore{log: log, stored: len(log)}
			app := &appLog{}
			tr := newTracker(nil, false)
			tr.self = "me"
			rc := newReceiver(tr, store.sync, testRecovery(time.Hour), &counters{}, app.handle, func(string, int64) {})
			startReceiver(t, rc)
			rc.push(log[0])
			rc.push(log[1])
			rc.push(log[len(log)-2]) // nothing is pushed to a non-member
			rc.push(log[len(log)-1])
			time.Sleep(2 * time.Second)
			synctest.Wait()
			if got := app.seqs(); !slices.Equal(got, want) || store.pagesAsked() != 0 {
				t.Fatalf("handed %v with %d sync pages, want %v and none", got, store.pagesAsked(), want)
			}
		})
	})
	t.Run("filled", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			store := &fakeStore{log: log, stored: len(log)}
			app := &appLog{}
			tr := newTracker(map[string]int64{"s": 0}, false)
			tr.self = "me"
			rc := newReceiver(tr, store.sync, testRecovery(time.Hour), &counters{}, app.handle, func(string, int64) {})
			startReceiver(t, rc)
			rc.catchUp([]wire.SessionChange{{SessionID: "s", MaxSeq: 41}}) // offline through it all
			time.Sleep(5 * time.Second)
			synctest.Wait()
			if got := app.seqs(); !slices.Equal(got, want) {
				t.Fatalf("handed %v, want %v", got, want)
			}
		})
	})
	t.Run("another user's removal", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			store := &fakeStore{log: log, stored: len(log)}
			app := &appLog{}
			tr := newTracker(nil, false)
			tr.self = "someone else"
			rc := newReceiver(tr, store.sync, testRecovery(time.Hour), &counters{}, app.handle, func(string, int64) {})
			startReceiver(t, rc)
			rc.catchUp([]wire.SessionChange{{SessionID: "s", MaxSeq: 41}})
			time.Sleep(10 * time.Second)
			synctest.Wait()
			if got := app.seqs(); len(got) != len(log) {
				t.Fatalf("handed %d events, want all %d", len(got), len(log))
			}
		})
	})
}

// TestReceiverKeepsToTheSyncBudget: however many sessions need a fill at
// once (a reconnect after a long absence), the sync pages stay within the
// budget, and every session is still filled.
func TestReceiverKeepsToTheSyncBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const sessions = 60
		stores := map[string]*fakeStore{}
		var changes []wire.SessionChange
		for i := range sessions {
			id := fmt.Sprintf("s%02d", i)
			st := &fakeStore{}
			for seq := int64(1); seq <= 10; seq++ {
				st.log = append(st.log, ev(id, seq))
			}
			st.stored = len(st.log)
			stores[id] = st
			changes = append(changes, wire.SessionChange{SessionID: id, MaxSeq: 10})
		}
		var mu sync.Mutex
		var pages []time.Time
		sync := func(ctx context.Context, session string, after int64) ([]wire.Message, bool, error) {
			mu.Lock()
			pages = append(pages, time.Now())
			mu.Unlock()
			return stores[session].sync(ctx, session, after)
		}
		app := &appLog{}
		st := &counters{}
		rc := newReceiver(newTracker(nil, false), sync, testRecovery(time.Hour), st, app.handle, func(string, int64) {})
		startReceiver(t, rc)
		start := time.Now()
		rc.catchUp(changes)
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		// Each session's 10 events take 3 pages of 4: 180 pages at 10 a
		// second after a burst of 20.
		if got := len(app.seqs()); got != sessions*10 {
			t.Fatalf("handed %d events, want %d", got, sessions*10)
		}
		mu.Lock()
		defer mu.Unlock()
		for _, w := range []time.Duration{time.Second, 5 * time.Second, 10 * time.Second} {
			n := 0
			for _, p := range pages {
				if p.Sub(start) < w {
					n++
				}
			}
			if limit := 20 + int(10*w.Seconds()); n > limit {
				t.Fatalf("%d sync pages in the first %s, budget %d", n, w, limit)
			}
		}
		if st.SyncsPaced.Load() == 0 {
			t.Fatalf("no page waited for the budget")
		}
	})
}
