package client

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/seqflow/seqflow/internal/wire"
)

type frameLog struct {
	mu     sync.Mutex
	frames [][]wire.Cursor
	fail   bool
}

func (l *frameLog) write(_ context.Context, cs []wire.Cursor) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fail {
		return errors.New("no connection")
	}
	l.frames = append(l.frames, append([]wire.Cursor(nil), cs...))
	return nil
}

func (l *frameLog) get() [][]wire.Cursor {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([][]wire.Cursor(nil), l.frames...)
}

func TestReceiptsBatching(t *testing.T) {
	cases := []struct {
		name   string
		adds   int
		wait   time.Duration
		frames int
		last   int64
	}{
		{name: "nothing before the interval", adds: 3, wait: 50 * time.Millisecond, frames: 0},
		{name: "flushed after the interval", adds: 3, wait: 150 * time.Millisecond, frames: 1, last: 3},
		{name: "flushed at the count without waiting", adds: 64, wait: 0, frames: 1, last: 64},
		{name: "count then interval for the rest", adds: 70, wait: 150 * time.Millisecond, frames: 2, last: 70},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := &frameLog{}
				b := newReceipts(64, 100*time.Millisecond, l.write)
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				go func() { b.run(ctx); close(done) }()
				for i := 1; i <= c.adds; i++ {
					b.add("s", int64(i))
					synctest.Wait()
				}
				time.Sleep(c.wait)
				synctest.Wait()
				got := l.get()
				cancel()
				<-done
				if len(got) != c.frames {
					t.Fatalf("%d frames, want %d: %v", len(got), c.frames, got)
				}
				if c.frames > 0 {
					last := got[len(got)-1]
					if len(last) != 1 || last[0].SessionID != "s" || last[0].Seq != c.last {
						t.Fatalf("last frame %v, want s at %d", last, c.last)
					}
				}
			})
		})
	}
}

func TestReceiptsKeptWhileDisconnected(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &frameLog{fail: true}
		b := newReceipts(64, 100*time.Millisecond, l.write)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go b.run(ctx)
		b.add("a", 5)
		b.add("b", 2)
		time.Sleep(200 * time.Millisecond)
		synctest.Wait()
		l.mu.Lock()
		l.fail = false
		l.mu.Unlock()
		b.add("a", 6)
		time.Sleep(200 * time.Millisecond)
		synctest.Wait()
		got := l.get()
		if len(got) != 1 || len(got[0]) != 2 || got[0][0] != (wire.Cursor{SessionID: "a", Seq: 6}) || got[0][1] != (wire.Cursor{SessionID: "b", Seq: 2}) {
			t.Fatalf("frames %v, want one with a@6 and b@2", got)
		}
	})
}
