package main

import (
	"context"
	"errors"
	"hash/fnv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/seqflow/seqflow/internal/deadletter"
	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/store"
	"github.com/seqflow/seqflow/internal/telemetry"
	"github.com/seqflow/seqflow/schemas"
)

// entry is one consumed record and what becomes of it: an item to store,
// or a reason to dead-letter it.
type entry struct {
	rec  *kgo.Record
	item store.Item
	bad  *deadletter.Error
}

func (e *entry) storable() bool { return e.bad == nil }

// decode classifies one record.
func decode(r *kgo.Record, t eventlog.Topics) *entry {
	src := store.FromSequenced
	if r.Topic == t.Receipts {
		src = store.FromReceipts
	}
	it, err := store.Decode(src, eventlog.Header(r, schemas.HeaderEventType), r.Value, r.Partition, r.Offset)
	if err != nil {
		return &entry{rec: r, bad: undecodable(err)}
	}
	return &entry{rec: r, item: it}
}

// process writes one poll batch: every writer's share in its own database
// transaction, in parallel; then the dead letters; then the offsets. It
// returns an error when ctx ended before the batch was durable, or a dead
// letter could not be built, and then commits nothing.
func (p *Persister) process(ctx context.Context, w *store.Writer, cl *kgo.Client, recs []*kgo.Record) error {
	p.m.batchSize.Observe(float64(len(recs)))
	// One span per batch, linked to the events' traces.
	ctx, span := telemetry.StartBatch(ctx, p.tracer, "persister.batch", telemetry.Records(recs))
	defer span.End()
	shards := make([][]*entry, p.cfg.Writers)
	var all []*entry
	for _, r := range recs {
		e := decode(r, p.cfg.Topics)
		i := shardOf(r, p.cfg.Writers)
		shards[i] = append(shards[i], e)
		all = append(all, e)
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, sh := range shards {
		if len(sh) > 0 {
			g.Go(func() error { return p.write(gctx, w, sh) })
		}
	}
	if err := g.Wait(); err != nil {
		return err
	}
	// Only now does the schema hold everything up to these offsets.
	if err := p.writeOffsets(ctx, w, all); err != nil {
		return err
	}
	if err := p.deadLetter(ctx, cl, all); err != nil {
		return err
	}
	if p.cfg.CommitDelay > 0 && !sleep(ctx, p.cfg.CommitDelay) {
		return ctx.Err()
	}
	// The records' effects are durable: commit even if shutdown began.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := cl.CommitRecords(cctx, recs...); err != nil {
		p.m.commitErrors.Inc()
		p.log.Warn("offset commit failed; the batch will be written again as no-ops", "records", len(recs), "err", err)
	}
	return nil
}

// shardOf spreads records over writers by key (the session): a session's
// events stay in order in one writer, and every writer gets a share of
// every partition.
func shardOf(r *kgo.Record, writers int) int {
	if writers == 1 {
		return 0
	}
	h := fnv.New32a()
	h.Write(r.Key)
	return int(h.Sum32() % uint32(writers))
}

// writeOffsets records in the schema, after every share of the batch
// committed, the next offset of each partition in the batch: the schema now
// holds everything before it.
func (p *Persister) writeOffsets(ctx context.Context, w *store.Writer, es []*entry) error {
	b := &store.Batch{Offsets: offsetsOf(es)}
	return retry(ctx, p.cfg.RetryMin, p.cfg.RetryMax, 0, func() error {
		wctx, cancel := context.WithTimeout(ctx, p.cfg.WriteTimeout)
		defer cancel()
		_, err := w.Write(wctx, b)
		if err != nil && ctx.Err() == nil {
			p.m.retries.WithLabelValues(retryClass(err)).Inc()
			p.log.Warn("write stored offsets failed; retrying", "err", err)
		}
		return err
	})
}

// write stores es (one writer's share, in log order per session) in one
// transaction, retrying with backoff until it commits or ctx ends: no
// record is skipped. When PostgreSQL refuses the data itself, the share is
// split in halves, written in order, down to the one record at fault, which
// is marked for the dead-letter topic.
func (p *Persister) write(ctx context.Context, w *store.Writer, es []*entry) error {
	b, rowEntry := batchOf(es)
	wait := p.cfg.RetryMin
	for attempt := 1; ; attempt++ {
		wctx, cancel := context.WithTimeout(ctx, p.cfg.WriteTimeout)
		start := time.Now()
		res, err := w.Write(wctx, b)
		cancel()
		if err == nil {
			p.m.writeSeconds.WithLabelValues("ok").Observe(time.Since(start).Seconds())
			p.applied(es, b, rowEntry, res)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if store.IsPoison(err) {
			p.m.writeSeconds.WithLabelValues("poison").Observe(time.Since(start).Seconds())
			return p.isolate(ctx, w, es, err)
		}
		p.m.writeSeconds.WithLabelValues("retry").Observe(time.Since(start).Seconds())
		class := retryClass(err)
		p.m.retries.WithLabelValues(class).Inc()
		level := p.log.Warn
		if class != "transient" {
			level = p.log.Error
		}
		level("database write failed; retrying", "class", class, "attempt", attempt, "records", len(es), "retry_in", wait.String(), "err", err)
		if !sleep(ctx, wait) {
			return ctx.Err()
		}
		wait = min(2*wait, p.cfg.RetryMax)
	}
}

// isolate finds the records of es that PostgreSQL refuses.
func (p *Persister) isolate(ctx context.Context, w *store.Writer, es []*entry, cause error) error {
	var live []*entry
	for _, e := range es {
		if e.storable() {
			live = append(live, e)
		}
	}
	if len(live) == 1 {
		reason := cause.Error()
		var pe *pgconn.PgError
		if errors.As(cause, &pe) {
			reason = pe.Code + " " + pe.Message
			if pe.Detail != "" {
				reason += ": " + pe.Detail
			}
		}
		live[0].bad = constraint(reason)
		p.log.Warn("record refused by the database; dead-lettering it", "topic", live[0].rec.Topic,
			"partition", live[0].rec.Partition, "offset", live[0].rec.Offset, "reason", reason, telemetry.RecordTraceID(live[0].rec))
		return nil
	}
	if len(live) == 0 {
		return cause // only offsets left: nothing to isolate; the caller retries the batch
	}
	// Split where half of the storable entries lie on each side, so both
	// halves make progress.
	mid := 0
	for mid < len(es) && es[mid] != live[len(live)/2] {
		mid++
	}
	if err := p.write(ctx, w, es[:mid]); err != nil {
		return err
	}
	return p.write(ctx, w, es[mid:])
}

// batchOf builds the store batch of es, and for each row the entry it
// came from.
func batchOf(es []*entry) (*store.Batch, []int) {
	b := &store.Batch{}
	var rowEntry []int
	for i, e := range es {
		if e.storable() && b.Add(e.item) >= 0 {
			rowEntry = append(rowEntry, i)
		}
	}
	return b, rowEntry
}

// offsetsOf is the next offset of each topic partition of es, dead letters
// included.
func offsetsOf(es []*entry) []store.Offset {
	type tp struct {
		t string
		p int32
	}
	next := map[tp]int64{}
	var order []tp
	for _, e := range es {
		k := tp{e.rec.Topic, e.rec.Partition}
		if _, ok := next[k]; !ok {
			order = append(order, k)
		}
		next[k] = max(next[k], e.rec.Offset+1)
	}
	out := make([]store.Offset, 0, len(order))
	for _, k := range order {
		out = append(out, store.Offset{Topic: k.t, Partition: k.p, Next: next[k]})
	}
	return out
}

func (p *Persister) applied(es []*entry, b *store.Batch, rowEntry []int, res store.Result) {
	for _, c := range res.Conflicts {
		e := es[rowEntry[c.Index]]
		e.bad = constraint(c.Reason)
		p.log.Warn("event contradicts the store; dead-lettering it", "session_id", b.Rows[c.Index].SessionID,
			"seq", b.Rows[c.Index].Seq, "partition", e.rec.Partition, "offset", e.rec.Offset, "reason", c.Reason,
			telemetry.RecordTraceID(e.rec))
	}
	p.m.records.WithLabelValues("inserted").Add(float64(res.Inserted))
	p.m.records.WithLabelValues("duplicate").Add(float64(res.Duplicates))
	p.m.records.WithLabelValues("receipt").Add(float64(len(b.Reads) + len(b.Deliveries)))
	now := time.Now().UnixMilli()
	for i := range b.Rows {
		p.m.eventAge.Observe(float64(max(now-b.Rows[i].ServerTsMs, 0)) / 1000)
	}
}

// deadLetter produces a DeadLetter for every refused entry and waits until
// all are acknowledged, retrying until then: the offsets that pass them are
// committed only afterwards.
func (p *Persister) deadLetter(ctx context.Context, cl *kgo.Client, es []*entry) error {
	var bad []*entry
	for _, e := range es {
		if e.bad != nil {
			bad = append(bad, e)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	now := time.Now()
	recs := make([]*kgo.Record, len(bad))
	for i, e := range bad {
		r, err := deadletter.Record(p.cfg.Topics.DeadLetter, service, e.rec, e.bad, now)
		if err != nil {
			return err
		}
		recs[i] = r
	}
	err := retry(ctx, p.cfg.RetryMin, p.cfg.RetryMax, 0, func() error {
		err := cl.ProduceSync(ctx, recs...).FirstErr()
		if err != nil {
			p.log.Warn("produce dead letters failed; retrying", "records", len(recs), "err", err)
		}
		return err
	})
	if err != nil {
		return err
	}
	for _, e := range bad {
		p.m.deadLetters.WithLabelValues(e.bad.Code.String()).Inc()
		p.m.records.WithLabelValues("dead_letter").Inc()
	}
	return nil
}
