package main

import (
	"context"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/auth"
	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/wire"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// receiptBatch collects one connection's delivered cursors and produces
// them as DeliveryReceipts after DeliveredFlushCount updates or
// DeliveredFlushInterval after the first, whichever comes first. The
// client already batches (64 / 100 ms); this longer window is what keeps
// receipts from costing Kafka and the persister a record per message.
// Cursors only move forward, so a receipt Kafka refused is covered by the
// next one.
type receiptBatch struct {
	g *Gateway
	p auth.Principal

	mu      sync.Mutex
	cursors map[string]int64
	n       int
	timer   *time.Timer
	stopped bool
}

func newReceiptBatch(g *Gateway, p auth.Principal) *receiptBatch {
	return &receiptBatch{g: g, p: p, cursors: map[string]int64{}}
}

func (b *receiptBatch) add(cs []wire.Cursor) {
	b.mu.Lock()
	if b.stopped {
		b.mu.Unlock()
		return
	}
	for _, c := range cs {
		if c.Seq > b.cursors[c.SessionID] {
			b.cursors[c.SessionID] = c.Seq
		}
		b.n++
	}
	var due map[string]int64
	if b.n >= b.g.cfg.DeliveredFlushCount {
		due = b.takeLocked()
	} else if b.timer == nil {
		b.timer = time.AfterFunc(b.g.cfg.DeliveredFlushInterval, b.flush)
	}
	b.mu.Unlock()
	b.produce(due)
}

func (b *receiptBatch) flush() {
	b.mu.Lock()
	due := b.takeLocked()
	b.mu.Unlock()
	b.produce(due)
}

// stop flushes what is left; later adds are ignored.
func (b *receiptBatch) stop() {
	b.mu.Lock()
	due := b.takeLocked()
	b.stopped = true
	b.mu.Unlock()
	b.produce(due)
}

// takeLocked stops the timer and hands over the gathered cursors.
func (b *receiptBatch) takeLocked() map[string]int64 {
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	if len(b.cursors) == 0 {
		return nil
	}
	due := b.cursors
	b.cursors, b.n = map[string]int64{}, 0
	return due
}

// produce sends one receipt per session the user is a member of. It runs
// outside the batch's lock: the membership check may ask PostgreSQL, and
// the connection's read loop must not wait behind it to add cursors. Two
// flushes may overlap; the stored cursor only moves forward, so their
// order does not matter.
func (b *receiptBatch) produce(cursors map[string]int64) {
	if len(cursors) == 0 {
		return
	}
	g := b.g
	now := g.now().UnixMilli()
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	for session, seq := range cursors {
		if ok, err := g.members.IsMember(ctx, session, b.p.UserID); err != nil || !ok {
			continue
		}
		v, err := proto.Marshal(&imv1.DeliveryReceipt{SessionId: session, UserId: b.p.UserID, DeviceId: b.p.DeviceID, DeliveredSeq: seq, TsMs: now})
		if err != nil {
			// proto.Marshal refuses only text that is not UTF-8, and a
			// member's session ID and a principal are UTF-8: a bug if
			// reached. Like a receipt Kafka refused, the next one covers it.
			g.log.Error("marshal delivery receipt; not produced", "session_id", session, "user_id", b.p.UserID, "err", err)
			continue
		}
		rec := &kgo.Record{Topic: g.cfg.Topics.Receipts, Key: []byte(session), Value: v,
			Headers: eventlog.Headers("delivery_receipt", "seqflow.im.v1.DeliveryReceipt", service, "")}
		g.kc.Produce(context.Background(), rec, func(_ *kgo.Record, err error) {
			if err != nil {
				g.m.receiptFails.Inc()
				return
			}
			g.m.receipts.WithLabelValues("delivery").Inc()
		})
	}
}
