package client

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/seqflow/seqflow/internal/wire"
)

// maxCursorsPerFrame is the gateway's bound on one delivered frame.
const maxCursorsPerFrame = 256

// receipts batches delivered receipts: it remembers the highest seq the
// app was handed per session and flushes them after count events or
// interval, whichever comes first (seed 004's window: 64 or 100 ms). A
// flush that cannot be written (no connection) keeps its cursors for the
// next one; cursors only move forward, so sending one twice is harmless.
type receipts struct {
	count    int
	interval time.Duration
	write    func(ctx context.Context, cursors []wire.Cursor) error

	mu      sync.Mutex
	dirty   map[string]int64
	pending int
	kick    chan struct{}
}

func newReceipts(count int, interval time.Duration, write func(context.Context, []wire.Cursor) error) *receipts {
	return &receipts{count: count, interval: interval, write: write, dirty: map[string]int64{}, kick: make(chan struct{}, 1)}
}

// add records that the app holds session up to seq. It wakes run only
// when that changes what run does: the first event since a flush starts
// the interval, the count-th flushes; the ones between wake nothing.
func (b *receipts) add(session string, seq int64) {
	b.mu.Lock()
	if seq > b.dirty[session] {
		b.dirty[session] = seq
	}
	b.pending++
	wake := b.pending == 1 || b.pending == b.count
	b.mu.Unlock()
	if wake {
		b.signal()
	}
}

// signal wakes run, which flushes when count events are pending and
// otherwise starts the interval timer if it is not running.
func (b *receipts) signal() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// retry asks for a flush of whatever is dirty (after a reconnect).
func (b *receipts) retry() {
	b.mu.Lock()
	n := len(b.dirty)
	b.mu.Unlock()
	if n > 0 {
		b.signal()
	}
}

func (b *receipts) run(ctx context.Context) {
	var timer *time.Timer
	var tc <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return
		case <-b.kick:
			b.mu.Lock()
			full, any := b.pending >= b.count, len(b.dirty) > 0
			b.mu.Unlock()
			switch {
			case full:
				b.flush(ctx)
				if timer != nil {
					timer.Stop()
					timer, tc = nil, nil
				}
			case any && timer == nil:
				timer = time.NewTimer(b.interval)
				tc = timer.C
			}
		case <-tc:
			timer, tc = nil, nil
			b.flush(ctx)
		}
	}
}

func (b *receipts) flush(ctx context.Context) {
	b.mu.Lock()
	if len(b.dirty) == 0 {
		b.pending = 0
		b.mu.Unlock()
		return
	}
	cs := make([]wire.Cursor, 0, len(b.dirty))
	for s, seq := range b.dirty {
		cs = append(cs, wire.Cursor{SessionID: s, Seq: seq})
	}
	clear(b.dirty)
	b.pending = 0
	b.mu.Unlock()
	slices.SortFunc(cs, func(a, c wire.Cursor) int {
		if a.SessionID < c.SessionID {
			return -1
		}
		if a.SessionID > c.SessionID {
			return 1
		}
		return 0
	})
	for i := 0; i < len(cs); i += maxCursorsPerFrame {
		part := cs[i:min(i+maxCursorsPerFrame, len(cs))]
		if err := b.write(ctx, part); err != nil {
			b.mu.Lock()
			for _, c := range cs[i:] {
				if c.Seq > b.dirty[c.SessionID] {
					b.dirty[c.SessionID] = c.Seq
				}
			}
			b.mu.Unlock()
			return
		}
	}
}
