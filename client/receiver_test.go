package client

import (
	"context"
	"math/rand/v2"
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
}

func (f *fakeStore) sync(_ context.Context, session string, after int64) ([]wire.Message, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
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
				rc := newReceiver(newTracker(nil, false), store.sync, time.Hour, st,
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
		rc := newReceiver(newTracker(nil, false), store.sync, 3*time.Second, st,
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
