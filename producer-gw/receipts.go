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
	defer b.mu.Unlock()
	if b.stopped {
		return
	}
	for _, c := range cs {
		if c.Seq > b.cursors[c.SessionID] {
			b.cursors[c.SessionID] = c.Seq
		}
		b.n++
	}
	if b.n >= b.g.cfg.DeliveredFlushCount {
		b.flushLocked()
		return
	}
	if b.timer == nil {
		b.timer = time.AfterFunc(b.g.cfg.DeliveredFlushInterval, b.flush)
	}
}

func (b *receiptBatch) flush() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.flushLocked()
}

// stop flushes what is left; later adds are ignored.
func (b *receiptBatch) stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.flushLocked()
	b.stopped = true
}

func (b *receiptBatch) flushLocked() {
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	if len(b.cursors) == 0 {
		return
	}
	cursors := b.cursors
	b.cursors, b.n = map[string]int64{}, 0
	g := b.g
	now := g.now().UnixMilli()
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	for session, seq := range cursors {
		if ok, err := g.members.IsMember(ctx, session, b.p.UserID); err != nil || !ok {
			continue
		}
		v, _ := proto.Marshal(&imv1.DeliveryReceipt{SessionId: session, UserId: b.p.UserID, DeviceId: b.p.DeviceID, DeliveredSeq: seq, TsMs: now})
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
