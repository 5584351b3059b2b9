package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/deadletter"
	"github.com/seqflow/seqflow/internal/dedup"
	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/groups"
	"github.com/seqflow/seqflow/internal/msgid"
	"github.com/seqflow/seqflow/internal/segment"
	"github.com/seqflow/seqflow/schemas"
	"github.com/seqflow/seqflow/schemas/imv1"
)

const service = "sequencer"

// item is one uplink record and what the batch decided for it.
type item struct {
	rec   *kgo.Record
	up    *imv1.Uplink
	bad   *deadletter.Error
	dupOf *dedup.Entry // the committed entry a retry repeats
	first int          // index of the batch's first copy of this client message, or -1
	entry dedup.Entry  // what a new message got
	// refused: the session's rules refused the command (internal/groups);
	// it gets a Refusal on im.duplicates.v1 instead of a seq.
	refused *groups.Refusal
}

// partBatch is the records of one partition in a batch.
type partBatch struct {
	p       int32
	st      *partState
	items   []item
	demand  map[string]int
	touched []string
	out     []*kgo.Record
	fresh   int // new messages sequenced
	dups    int
	bad     int
	refused int
	decided bool // classify ran the rules: groups holds this batch's changes
	hwm     int64
	next    int64
	began   bool // assign took seqs from the book
}

// batch is one poll's records, one transaction.
type batch struct {
	nowMs int64
	parts []*partBatch
	ended time.Time // when its transaction's End returned, committed
}

// prepare decodes and classifies every record, per partition in parallel,
// and reserves the segments the batch is short of in one round trip.
func (s *Sequencer) prepare(ctx context.Context, fetches kgo.Fetches) (*batch, error) {
	b := &batch{nowMs: time.Now().UnixMilli()}
	fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
		if fp.Topic == s.cfg.Topics.Uplink && len(fp.Records) > 0 {
			b.parts = append(b.parts, &partBatch{p: fp.Partition, items: make([]item, len(fp.Records)),
				demand: make(map[string]int, len(fp.Records)), hwm: fp.HighWatermark, next: fp.Records[len(fp.Records)-1].Offset + 1})
			for i, r := range fp.Records {
				b.parts[len(b.parts)-1].items[i] = item{rec: r, first: -1}
			}
		}
	})
	g, gctx := errgroup.WithContext(ctx)
	for _, pb := range b.parts {
		g.Go(func() error {
			st, err := s.state(gctx, pb.p)
			if err != nil {
				return err
			}
			pb.st = st
			pb.classify(s.cfg.MaxUplinkBytes, b.nowMs)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		b.rewind()
		return nil, err
	}
	var reqs []segment.Request
	owner := map[string]*partBatch{}
	for _, pb := range b.parts {
		for _, r := range pb.st.book.Shortfall(pb.demand) {
			if _, dup := owner[r.SessionID]; dup {
				// One session in two partitions: only while partitions are
				// being added. Serve it next batch rather than mix books.
				b.rewind()
				return nil, &SplitSessionError{SessionID: r.SessionID, Partitions: [2]int32{owner[r.SessionID].p, pb.p}}
			}
			owner[r.SessionID] = pb
			reqs = append(reqs, r)
		}
	}
	if len(reqs) > 0 {
		grants, err := s.reserve(ctx, "shortfall", reqs)
		if err != nil {
			b.rewind()
			return nil, err
		}
		if err := addGrants(owner, grants); err != nil {
			b.rewind()
			return nil, err
		}
	}
	return b, nil
}

func addGrants(owner map[string]*partBatch, grants []segment.Grant) error {
	for _, gr := range grants {
		pb := owner[gr.SessionID]
		if pb == nil || pb.st.dropped.Load() {
			continue
		}
		if err := pb.st.book.Add([]segment.Grant{gr}); err != nil {
			return err
		}
	}
	return nil
}

func (s *Sequencer) reserve(ctx context.Context, kind string, reqs []segment.Request) ([]segment.Grant, error) {
	start := time.Now()
	grants, err := s.store.Reserve(ctx, reqs)
	s.m.renewSeconds.WithLabelValues(kind).Observe(time.Since(start).Seconds())
	if err != nil {
		s.m.renewErrors.Inc()
		return nil, err
	}
	s.m.renewals.WithLabelValues(kind).Add(float64(len(grants)))
	return grants, nil
}

type dkey struct{ session, sender, clientMsgID string }

// classify decodes each record and decides: dead letter, retry of a
// committed message, retry of a message earlier in this batch, refused by
// the session's rules, or new. The rules see the commands in uplink
// order, each accepted one applied before the next is decided; the
// partition's group state records the changes until commit or rewind.
func (pb *partBatch) classify(maxBytes int, nowMs int64) {
	seen := make(map[dkey]int, len(pb.items))
	pb.st.groups.Begin()
	pb.decided = true
	for i := range pb.items {
		it := &pb.items[i]
		it.up, it.bad = decodeUplink(it.rec.Key, it.rec.Value, maxBytes)
		if it.bad != nil {
			continue
		}
		k := dkey{it.up.SessionId, it.up.SenderUserId, it.up.ClientMsgId}
		if e, ok := pb.st.window.Get(k.session, k.sender, k.clientMsgID, nowMs); ok {
			if e.Refused != imv1.ErrorCode_ERROR_CODE_UNSPECIFIED {
				// A retry of a refused command: refused alike, whatever
				// changed since (the first answer may have reached the
				// client already).
				it.refused = &groups.Refusal{Code: e.Refused, Reason: e.Reason}
				pb.refused++
				continue
			}
			it.dupOf = &e
			continue
		}
		if j, ok := seen[k]; ok {
			if r := pb.items[j].refused; r != nil {
				it.refused = r // a copy of a refused command: refused alike
				pb.refused++
				continue
			}
			it.first = j
			continue
		}
		seen[k] = i
		if it.refused = pb.st.groups.Sequence(it.up, nowMs); it.refused != nil {
			pb.refused++
			continue
		}
		if pb.demand[k.session] == 0 {
			pb.touched = append(pb.touched, k.session)
		}
		pb.demand[k.session]++
		pb.fresh++
	}
}

// assign gives every new message its seq and message ID and builds the
// output records, per partition in parallel, in uplink order.
func (b *batch) assign(ctx context.Context, s *Sequencer, gen *msgid.Generator) error {
	g, _ := errgroup.WithContext(ctx)
	for _, pb := range b.parts {
		g.Go(func() error { return pb.assign(s.cfg.Topics, s.instanceHeader, gen, b.nowMs) })
	}
	return g.Wait()
}

func (pb *partBatch) assign(t eventlog.Topics, instance kgo.RecordHeader, gen *msgid.Generator, nowMs int64) error {
	pb.st.book.Begin()
	pb.began = true
	ids := make([]int64, pb.fresh)
	if err := gen.NextN(ids); err != nil {
		return fmt.Errorf("issue message ids: %w", err)
	}
	// The events' records, headers and values are cut from one allocation
	// each per partition: per-record allocations were most of assign's CPU.
	n := len(pb.items)
	recs := make([]kgo.Record, 0, pb.fresh)
	hdrs := make([]kgo.RecordHeader, 0, pb.fresh*maxEventHeaders)
	valueBytes := 0
	for i := range pb.items {
		valueBytes += len(pb.items[i].rec.Value) + eventOverhead
	}
	buf := make([]byte, 0, valueBytes)
	ts := time.UnixMilli(nowMs)
	var events eventBuilder
	pb.out = make([]*kgo.Record, 0, n)
	for i := range pb.items {
		it := &pb.items[i]
		switch {
		case it.bad != nil:
			pb.bad++
			r, err := deadletter.Record(t.DeadLetter, service, it.rec, it.bad, ts)
			if err != nil {
				return err
			}
			pb.out = append(pb.out, r)
		case it.refused != nil:
			it.entry = dedup.Entry{ServerTsMs: nowMs, Refused: it.refused.Code, Reason: it.refused.Reason}
			r, err := refusalRecord(t.Duplicates, pb.p, it, nowMs)
			if err != nil {
				return err
			}
			pb.out = append(pb.out, r)
		case it.dupOf != nil || it.first >= 0:
			pb.dups++
			e := it.dupOf
			if e == nil {
				e = &pb.items[it.first].entry
			}
			r, err := duplicateAck(t.Duplicates, pb.p, it, *e, nowMs)
			if err != nil {
				return err
			}
			pb.out = append(pb.out, r)
		default:
			seq, ok := pb.st.book.Take(it.up.SessionId)
			if !ok {
				return fmt.Errorf("session %s: no reserved seq left (reservation accounting bug)", it.up.SessionId)
			}
			it.entry = dedup.Entry{Seq: seq, MsgID: ids[0], ServerTsMs: nowMs}
			ids = ids[1:]
			ev := events.sequenced(it.up, seq, it.entry.MsgID, nowMs, pb.p, it.rec.Offset)
			start := len(buf)
			var err error
			if buf, err = appendEvent(buf, ev); err != nil {
				return fmt.Errorf("marshal sequenced event: %w", err)
			}
			h := len(hdrs)
			hdrs = append(hdrs, eventHeaders[eventType(it.up)]...)
			if tp := headerValue(it.rec, schemas.HeaderTraceparent); len(tp) > 0 {
				hdrs = append(hdrs, kgo.RecordHeader{Key: schemas.HeaderTraceparent, Value: tp})
			}
			hdrs = append(hdrs, instance)
			recs = append(recs, kgo.Record{
				Topic: t.Sequenced, Partition: pb.p, Key: it.rec.Key, Value: buf[start:len(buf):len(buf)],
				Timestamp: ts, Headers: hdrs[h:len(hdrs):len(hdrs)],
			})
			pb.out = append(pb.out, &recs[len(recs)-1])
		}
	}
	return nil
}

// appendEvent appends ev's wire form to buf with the generated
// MarshalToSizedBufferVT (half of proto.Marshal's CPU). Its strings come
// from an uplink decodeUplink checked to be UTF-8, the one check
// proto.Marshal makes that it does not.
func appendEvent(buf []byte, ev *imv1.SequencedEvent) ([]byte, error) {
	n := ev.SizeVT()
	start := len(buf)
	buf = slices.Grow(buf, n)[:start+n]
	if _, err := ev.MarshalToSizedBufferVT(buf[start:]); err != nil {
		return buf[:start], err
	}
	return buf, nil
}

// eventOverhead bounds how many bytes a sequenced event adds to its
// uplink's (seq, msg_id, timestamps, partition, offset), to size the value
// buffer; a larger event only costs a reallocation.
const eventOverhead = 64

// maxEventHeaders is how many headers a sequenced event carries at most:
// eventHeaders' four, the traceparent and the instance.
const maxEventHeaders = 6

// eventHeaders is, per event type, what eventlog.Headers gives a sequenced
// event without a traceparent, built once; records share the values, which
// nothing writes to.
var eventHeaders = func() map[string][]kgo.RecordHeader {
	m := map[string][]kgo.RecordHeader{}
	for _, typ := range []string{"message", "session_create", "membership", "edit", "recall", "group", "unknown"} {
		m[typ] = eventlog.Headers(typ, "seqflow.im.v1.SequencedEvent", service, "")
	}
	return m
}()

// headerValue is the value of r's first header named key, or nil; unlike
// eventlog.Header it does not copy.
func headerValue(r *kgo.Record, key string) []byte {
	for _, h := range r.Headers {
		if h.Key == key {
			return h.Value
		}
	}
	return nil
}

// duplicateAck answers a retried uplink; it carries the retry's
// traceparent, so the sender's trace shows the duplicate answer.
func duplicateAck(topic string, p int32, it *item, e dedup.Entry, nowMs int64) (*kgo.Record, error) {
	u := it.up
	v, err := proto.Marshal(duplicateOf(u, e, nowMs))
	if err != nil {
		return nil, fmt.Errorf("marshal duplicate ack: %w", err)
	}
	return &kgo.Record{
		Topic: topic, Partition: p, Key: []byte(u.SessionId), Value: v,
		Timestamp: time.UnixMilli(nowMs),
		Headers:   eventlog.Headers("duplicate", "seqflow.im.v1.DuplicateAck", service, eventlog.Header(it.rec, schemas.HeaderTraceparent)),
	}, nil
}

// refusalRecord is the durable answer to a refused uplink, on
// im.duplicates.v1 with the uplink's traceparent.
func refusalRecord(topic string, p int32, it *item, nowMs int64) (*kgo.Record, error) {
	v, err := proto.Marshal(refusalOf(it, nowMs))
	if err != nil {
		return nil, fmt.Errorf("marshal refusal: %w", err)
	}
	return &kgo.Record{
		Topic: topic, Partition: p, Key: []byte(it.up.SessionId), Value: v,
		Timestamp: time.UnixMilli(nowMs),
		Headers:   eventlog.Headers("refusal", "seqflow.im.v1.Refusal", service, eventlog.Header(it.rec, schemas.HeaderTraceparent)),
	}, nil
}

// refusalOf is the Refusal answering it, refused at nowMs: on
// im.duplicates.v1 and in direct ACKs.
func refusalOf(it *item, nowMs int64) *imv1.Refusal {
	u := it.up
	return &imv1.Refusal{
		SessionId: u.SessionId, ClientMsgId: u.ClientMsgId, SenderUserId: u.SenderUserId, SenderDeviceId: u.SenderDeviceId,
		GatewayId: u.GatewayId, Code: it.refused.Code, Reason: it.refused.Reason, ServerTsMs: nowMs,
		UplinkPartition: it.rec.Partition, UplinkOffset: it.rec.Offset,
	}
}

// duplicateOf is the DuplicateAck answering u, a retry of the message
// that got e, seen at nowMs: on im.duplicates.v1 and in direct ACKs.
func duplicateOf(u *imv1.Uplink, e dedup.Entry, nowMs int64) *imv1.DuplicateAck {
	return &imv1.DuplicateAck{
		SessionId: u.SessionId, ClientMsgId: u.ClientMsgId, Seq: e.Seq, MsgId: e.MsgID,
		SenderUserId: u.SenderUserId, SenderDeviceId: u.SenderDeviceId, GatewayId: u.GatewayId,
		OriginalServerTsMs: e.ServerTsMs, ServerTsMs: nowMs,
	}
}

// batchProducerOpts makes the transactional producer send a transaction's
// records at the flush that ends produce, all partitions in one request,
// instead of a first request with the first few records and the rest
// behind it: under transactions v2 every produce request that brings
// partitions into the transaction costs the broker a write to the
// transaction log before it answers. No record waits for a linger: produce
// flushes right after buffering them. A transaction buffers at most
// maxPollRecords records (one output per uplink), which the buffer bound
// must hold, or Produce would fail with ErrMaxBuffered.
func batchProducerOpts(maxPollRecords int) []kgo.Opt {
	return []kgo.Opt{kgo.ManualFlushing(), kgo.MaxBufferedRecords(max(maxPollRecords, 10_000))}
}

// produce hands every output record to the transactional producer, each
// partition's records in order, and waits until all are acknowledged.
func (b *batch) produce(ctx context.Context, sess *kgo.GroupTransactSession) error {
	var mu sync.Mutex
	var first error
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			mu.Lock()
			if first == nil {
				first = err
			}
			mu.Unlock()
		}
	}
	for _, pb := range b.parts {
		for _, r := range pb.out {
			sess.Produce(ctx, r, promise)
		}
	}
	if err := sess.Client().Flush(ctx); err != nil {
		return fmt.Errorf("flush sequenced events: %w", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if first != nil {
		return fmt.Errorf("produce sequenced events: %w", first)
	}
	return nil
}

type topUpResult struct {
	owner  map[string]*partBatch
	grants []segment.Grant
	err    error
}

// startTopUp reserves, concurrently with the transaction commit, the next
// segment of every session that ran low, so later batches need no round
// trip on their hot path.
func (s *Sequencer) startTopUp(ctx context.Context, b *batch) <-chan topUpResult {
	owner := map[string]*partBatch{}
	var reqs []segment.Request
	for _, pb := range b.parts {
		for _, r := range pb.st.book.Low(pb.touched) {
			owner[r.SessionID] = pb
			reqs = append(reqs, r)
		}
	}
	ch := make(chan topUpResult, 1)
	if len(reqs) == 0 {
		ch <- topUpResult{}
		return ch
	}
	go func() {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		grants, err := s.reserve(rctx, "prefetch", reqs)
		ch <- topUpResult{owner: owner, grants: grants, err: err}
	}()
	return ch
}

func (b *batch) installTopUp(s *Sequencer, r topUpResult) {
	if r.err != nil {
		if !errors.Is(r.err, context.Canceled) {
			s.log.Warn("segment prefetch failed; the next batch reserves synchronously", "err", r.err)
		}
		return
	}
	if err := addGrants(r.owner, r.grants); err != nil {
		s.log.Error("install prefetched segments", "err", err)
	}
}

// commit records, after the transaction committed, what its messages got.
func (b *batch) commit(s *Sequencer) {
	n := 0
	for _, pb := range b.parts {
		n += len(pb.items)
		pb.st.book.Commit()
		pb.st.groups.Commit()
		if last := pb.lastSequenced(s.cfg.Topics.Sequenced); last >= 0 {
			pb.st.groupsNext = last + 1
		}
		s.groupSnapshot(pb.p, pb.st)
		before := pb.st.window.Evicted
		for i := range pb.items {
			it := &pb.items[i]
			if it.up != nil && it.dupOf == nil && it.first < 0 {
				pb.st.window.Put(it.up.SessionId, it.up.SenderUserId, it.up.ClientMsgId, it.entry, b.nowMs)
			}
		}
		s.m.dedupEvicted.Add(float64(pb.st.window.Evicted - before))
		s.m.records.WithLabelValues("sequenced").Add(float64(pb.fresh))
		s.m.records.WithLabelValues("duplicate").Add(float64(pb.dups))
		s.m.records.WithLabelValues("dead_letter").Add(float64(pb.bad))
		s.m.records.WithLabelValues("refused").Add(float64(pb.refused))
		s.m.lag.WithLabelValues(strconv.Itoa(int(pb.p))).Set(float64(max(0, pb.hwm-pb.next)))
	}
	s.m.batchSize.Observe(float64(n))
}

// rewind gives back the seqs of an aborted batch: its events were never
// committed, so nobody saw them. b is nil when prepare failed (a
// partition's state could not be built, e.g. PostgreSQL was down): nothing
// was taken then.
func (b *batch) rewind() {
	if b == nil {
		return
	}
	for _, pb := range b.parts {
		if pb.began {
			pb.st.book.Rewind()
		}
		if pb.decided {
			pb.st.groups.Rollback()
			pb.decided = false
		}
	}
}
