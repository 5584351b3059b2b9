package main

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/apierr"
	"github.com/seqflow/seqflow/internal/auth"
	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/wire"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// receiptProducer is the Kafka client as receipts use it (a *kgo.Client).
// Produce buffers r and returns (it blocks only while the client holds its
// maximum of buffered records); promise runs once with Kafka's answer.
// ProduceSync blocks until Kafka answers or ctx ends.
type receiptProducer interface {
	Produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error))
	ProduceSync(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults
}

// receipts produces clients' receipts to im.receipts.v1, keyed by
// session: a read receipt at once, delivery receipts gathered per
// connection (batch), each only for a session the user is a member of.
type receipts struct {
	cfg     Config
	kafka   receiptProducer
	members memberChecker
	log     *slog.Logger
	m       *metrics
	now     func() time.Time
	// cursors shows delivery cursors to the other members once Kafka has
	// the receipt; nil: not shown.
	cursors cursorSink
	// seqs bounds cursors by the sessions' last seqs (bound).
	seqs lastSeqs
}

// lastSeqs is the store as bound uses it (a *store.Store): the last seq it
// holds of each session, one query.
type lastSeqs interface {
	LastSeqs(ctx context.Context, sessionIDs []string) (map[string]int64, error)
}

// cursorBoundWait is how long bound waits for a cursor's seq to become
// known before lowering it: the store trails the log by the persister's
// batch, and a client may read a message (its own, acked; or pushed to
// another of its connections) before the store or this connection has it.
const cursorBoundWait = 1500 * time.Millisecond

// bound lowers each cursor of cursors (session → seq) to its session's
// last seq: a read or delivered seq beyond it would show messages not yet
// sent as read or delivered (seen_by, delivery ticks) and is no position
// in the session at all. The last seq is the larger of known(session), the
// seq this gateway last pushed of it to the cursor's connection (nil: 0),
// and the store's, asked only when the cursor passes known. A cursor
// beyond both is given cursorBoundWait to become known (the store asked
// again at growing intervals, 25 to 400 ms, so a hostile cursor costs a
// few queries) and then lowered (counted); one bounded to 0 (the gateway
// knows no event of its session) is dropped.
func (r *receipts) bound(ctx context.Context, cursors map[string]int64, known func(session string) int64) error {
	knownSeq := func(session string) int64 {
		if known == nil {
			return 0
		}
		return known(session)
	}
	deadline := time.Now().Add(cursorBoundWait)
	delay := 25 * time.Millisecond
	for {
		var ask []string
		for session, seq := range cursors {
			if seq > knownSeq(session) {
				ask = append(ask, session)
			}
		}
		if len(ask) == 0 {
			return nil
		}
		last, err := r.seqs.LastSeqs(ctx, ask)
		if err != nil {
			return err
		}
		over := map[string]int64{}
		for _, session := range ask {
			if b := max(last[session], knownSeq(session)); cursors[session] > b {
				over[session] = b
			}
		}
		if len(over) == 0 {
			return nil
		}
		wait := min(delay, time.Until(deadline))
		if wait <= 0 {
			for session, b := range over {
				r.m.cursorsBounded.Inc()
				if cursors[session] = b; b <= 0 {
					delete(cursors, session)
				}
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		delay = min(2*delay, 400*time.Millisecond)
	}
}

func newReceipts(cfg Config, kafka receiptProducer, members memberChecker, log *slog.Logger, m *metrics, now func() time.Time) *receipts {
	return &receipts{cfg: cfg, kafka: kafka, members: members, log: log, m: m, now: now}
}

// cursorSink takes the cursor of a receipt once Kafka has it (signals), to
// show the other members. It does not block.
type cursorSink interface {
	cursor(user, session, kind string, seq int64, shown bool)
}

// read produces the read receipt of f, its seq bounded by the session's
// last seq (bound, with known: nil over HTTP), and waits for Kafka's
// answer, within ctx and ProduceTimeout. It returns the seq produced, 0
// when there was nothing to mark read.
func (r *receipts) read(ctx context.Context, p auth.Principal, f *wire.ClientFrame, known func(string) int64) (wire.OK, int64, *apierr.Error) {
	if err := requireMember(ctx, r.members, r.log, f.SessionID, p.UserID); err != nil {
		return wire.OK{}, 0, err
	}
	cursor := map[string]int64{f.SessionID: f.Seq}
	if err := r.bound(ctx, cursor, known); err != nil {
		r.log.Warn("bound read cursor", "session_id", f.SessionID, "err", err)
		return wire.OK{}, 0, apierr.New(imv1.ErrorCode_ERROR_CODE_UNAVAILABLE, "the message store did not answer")
	}
	seq := cursor[f.SessionID]
	if seq <= 0 {
		return wire.OK{Op: wire.OpResult, ReqID: f.ReqID}, 0, nil
	}
	rr := &imv1.ReadReceipt{SessionId: f.SessionID, UserId: p.UserID, DeviceId: p.DeviceID, ReadSeq: seq, TsMs: r.now().UnixMilli()}
	if err := r.produceSync(ctx, f.SessionID, "read_receipt", "seqflow.im.v1.ReadReceipt", rr); err != nil {
		return wire.OK{}, 0, produceError(err)
	}
	r.m.receipts.WithLabelValues("read").Inc()
	return wire.OK{Op: wire.OpResult, ReqID: f.ReqID}, seq, nil
}

// produceSync produces one receipt and waits for Kafka's answer.
func (r *receipts) produceSync(ctx context.Context, session, eventType, schema string, m proto.Message) error {
	v, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	rec := &kgo.Record{Topic: r.cfg.Topics.Receipts, Key: []byte(session), Value: v,
		Headers: eventlog.Headers(eventType, schema, service, "")}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.ProduceTimeout)
	defer cancel()
	return r.kafka.ProduceSync(ctx, rec).FirstErr()
}

// receiptBatch collects one connection's delivered cursors and produces
// them as DeliveryReceipts after DeliveredFlushCount updates or
// DeliveredFlushInterval after the first, whichever comes first. The
// client already batches (64 / 100 ms); this longer window is what keeps
// receipts from costing Kafka and the persister a record per message.
// Cursors only move forward, so a receipt Kafka refused is covered by the
// next one.
type receiptBatch struct {
	r *receipts
	p auth.Principal
	// known is the seq the connection was last pushed of a session (bound);
	// nil over HTTP.
	known func(session string) int64

	mu      sync.Mutex
	cursors map[string]int64
	n       int
	timer   *time.Timer
	stopped bool
}

// batch starts gathering the delivery receipts of p's connection.
func (r *receipts) batch(p auth.Principal) *receiptBatch {
	return &receiptBatch{r: r, p: p, cursors: map[string]int64{}}
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
	if b.n >= b.r.cfg.DeliveredFlushCount {
		due = b.takeLocked()
	} else if b.timer == nil {
		b.timer = time.AfterFunc(b.r.cfg.DeliveredFlushInterval, b.flush)
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
	r := b.r
	now := r.now().UnixMilli()
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	for session := range cursors {
		if ok, err := r.members.IsMember(ctx, session, b.p.UserID); err != nil || !ok {
			delete(cursors, session)
		}
	}
	if err := r.bound(ctx, cursors, b.known); err != nil {
		// Like a receipt Kafka refused: the next one covers them.
		r.log.Warn("bound delivery cursors; not produced", "user_id", b.p.UserID, "sessions", len(cursors), "err", err)
		return
	}
	for session, seq := range cursors {
		v, err := proto.Marshal(&imv1.DeliveryReceipt{SessionId: session, UserId: b.p.UserID, DeviceId: b.p.DeviceID, DeliveredSeq: seq, TsMs: now})
		if err != nil {
			// proto.Marshal refuses only text that is not UTF-8, and a
			// member's session ID and a principal are UTF-8: a bug if
			// reached. Like a receipt Kafka refused, the next one covers it.
			r.log.Error("marshal delivery receipt; not produced", "session_id", session, "user_id", b.p.UserID, "err", err)
			continue
		}
		rec := &kgo.Record{Topic: r.cfg.Topics.Receipts, Key: []byte(session), Value: v,
			Headers: eventlog.Headers("delivery_receipt", "seqflow.im.v1.DeliveryReceipt", service, "")}
		r.kafka.Produce(context.Background(), rec, func(_ *kgo.Record, err error) {
			if err != nil {
				r.m.receiptFails.Inc()
				return
			}
			r.m.receipts.WithLabelValues("delivery").Inc()
			if r.cursors != nil {
				r.cursors.cursor(b.p.UserID, session, wire.ReceiptDelivered, seq, true)
			}
		})
	}
}

var _ receiptProducer = (*kgo.Client)(nil)
