package rebuild

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/migrate"
	"github.com/seqflow/seqflow/internal/store"
	"github.com/seqflow/seqflow/schemas"
)

// Progress is how far a replay is.
type Progress struct {
	Records int64 // records read so far (both topics)
	Total   int64 // records to read, about (end offsets include transaction markers)
	Elapsed time.Duration
}

// Rate is records per second so far.
func (p Progress) Rate() float64 {
	if p.Elapsed <= 0 {
		return 0
	}
	return float64(p.Records) / p.Elapsed.Seconds()
}

// ETA estimates the time left at the rate so far.
func (p Progress) ETA() time.Duration {
	r := p.Rate()
	if r == 0 || p.Records >= p.Total {
		return 0
	}
	return time.Duration(float64(p.Total-p.Records) / r * float64(time.Second))
}

// EventSource is where Replay reads the sequenced events from, when not
// from the sequenced topic itself: a copy of it, such as a replay topic
// (internal/replay).
type EventSource interface {
	// Ends returns, per partition of the sequenced topic, the offset
	// before which the source holds every committed event: what the
	// rebuilt store will say it holds (store_offsets).
	Ends(ctx context.Context) (map[int32]int64, error)
	// Scan calls fn for every event before ends, in log order per
	// partition, each record with the topic, partition and offset it has
	// in the sequenced topic, so the rows and offsets the store keeps are
	// those of the log.
	Scan(ctx context.Context, ends map[int32]int64, fn func(*kgo.Record) error) error
}

// ReplayConfig says what to rebuild where.
type ReplayConfig struct {
	Brokers []string
	Topics  eventlog.Topics
	// Events, when set, is where the sequenced events come from instead
	// of Topics.Sequenced; receipts always come from Topics.Receipts.
	Events EventSource
	Pool   *pgxpool.Pool // set up by store.ConfigurePool
	Schema string        // must not hold a store yet; created and migrated
	// BatchMax is records per database transaction, default 5000.
	BatchMax int
	// Progress, when set, is called after every batch.
	Progress func(Progress)
}

// ReplayResult is what a replay built.
type ReplayResult struct {
	Ends     map[string]map[int32]int64 // per topic: the offsets the schema holds everything before
	Records  int64
	Inserted int
	Skipped  int // records that cannot be stored (undecodable, or refused): the persister dead-lettered them
	Elapsed  time.Duration
}

// ErrNotFresh means the replay target already holds a store.
var ErrNotFresh = errors.New("replay target schema already holds a store; choose a new schema name")

// Replay rebuilds the store in a fresh schema from offset 0 of the
// sequenced and receipts topics up to their stable offsets at start (or
// from cfg.Events up to its ends), with the persister's writer: the result
// is what the persister would have built. The schema's store_offsets
// record the ends, so a persister switched to it continues from there.
func Replay(ctx context.Context, cfg ReplayConfig) (*ReplayResult, error) {
	if cfg.BatchMax <= 0 {
		cfg.BatchMax = 5000
	}
	start := time.Now()
	var exists bool
	if err := cfg.Pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, pgx.Identifier{cfg.Schema, "messages"}.Sanitize()).Scan(&exists); err != nil {
		return nil, fmt.Errorf("check replay schema: %w", err)
	}
	if exists {
		return nil, ErrNotFresh
	}
	if _, err := migrate.Up(ctx, cfg.Pool, cfg.Schema); err != nil {
		return nil, err
	}
	w := store.NewWriter(cfg.Pool, cfg.Schema)
	if err := w.HasStagingTable(ctx); err != nil {
		return nil, err
	}
	res := &ReplayResult{Ends: map[string]map[int32]int64{}}
	var total int64
	for _, topic := range []string{cfg.Topics.Sequenced, cfg.Topics.Receipts} {
		var end map[int32]int64
		var err error
		if topic == cfg.Topics.Sequenced && cfg.Events != nil {
			end, err = cfg.Events.Ends(ctx)
		} else {
			end, err = CurrentEnds(ctx, cfg.Brokers, topic)
		}
		if err != nil {
			return nil, err
		}
		res.Ends[topic] = end
		for _, e := range end {
			total += e
		}
	}
	for _, src := range []struct {
		topic string
		kind  store.Source
	}{{cfg.Topics.Sequenced, store.FromSequenced}, {cfg.Topics.Receipts, store.FromReceipts}} {
		var items []store.Item
		var offs []store.Offset
		flush := func() error {
			if len(items) == 0 && len(offs) == 0 {
				return nil
			}
			n, skipped, err := writeAll(ctx, w, items, offs)
			if err != nil {
				return err
			}
			res.Inserted += n
			res.Skipped += skipped
			items, offs = items[:0], offs[:0]
			if cfg.Progress != nil {
				cfg.Progress(Progress{Records: res.Records, Total: total, Elapsed: time.Since(start)})
			}
			return nil
		}
		scan := func(ends map[int32]int64, fn func(*kgo.Record) error) error {
			return Scan(ctx, cfg.Brokers, src.topic, ends, fn)
		}
		if src.kind == store.FromSequenced && cfg.Events != nil {
			scan = func(ends map[int32]int64, fn func(*kgo.Record) error) error { return cfg.Events.Scan(ctx, ends, fn) }
		}
		err := scan(res.Ends[src.topic], func(r *kgo.Record) error {
			res.Records++
			offs = append(offs, store.Offset{Topic: r.Topic, Partition: r.Partition, Next: r.Offset + 1})
			it, err := store.Decode(src.kind, eventlog.Header(r, schemas.HeaderEventType), r.Value, r.Partition, r.Offset)
			if err != nil {
				res.Skipped++
			} else {
				items = append(items, it)
			}
			if len(offs) >= cfg.BatchMax {
				return flush()
			}
			return nil
		})
		if err == nil {
			err = flush()
		}
		if err != nil {
			return nil, err
		}
		// Offsets end at the stable offset, past any final transaction marker.
		var last []store.Offset
		for p, e := range res.Ends[src.topic] {
			last = append(last, store.Offset{Topic: src.topic, Partition: p, Next: e})
		}
		if _, _, err := writeAll(ctx, w, nil, last); err != nil {
			return nil, err
		}
	}
	res.Elapsed = time.Since(start)
	return res, nil
}

// writeAll writes items in one transaction, retrying transient failures;
// when PostgreSQL refuses the data it writes them one by one and skips the
// refused ones (the live persister dead-lettered those already).
func writeAll(ctx context.Context, w *store.Writer, items []store.Item, offs []store.Offset) (inserted, skipped int, err error) {
	b := &store.Batch{Offsets: offs}
	for _, it := range items {
		b.Add(it)
	}
	res, err := writeRetrying(ctx, w, b)
	if err == nil {
		return res.Inserted, len(res.Conflicts), nil
	}
	if !store.IsPoison(err) {
		return 0, 0, err
	}
	for _, it := range items {
		one := &store.Batch{}
		one.Add(it)
		res, err := writeRetrying(ctx, w, one)
		switch {
		case err == nil:
			inserted += res.Inserted
			skipped += len(res.Conflicts)
		case store.IsPoison(err):
			skipped++
		default:
			return inserted, skipped, err
		}
	}
	_, err = writeRetrying(ctx, w, &store.Batch{Offsets: offs})
	return inserted, skipped, err
}

func writeRetrying(ctx context.Context, w *store.Writer, b *store.Batch) (store.Result, error) {
	wait := 100 * time.Millisecond
	for {
		res, err := w.Write(ctx, b)
		if err == nil || store.IsPoison(err) || ctx.Err() != nil {
			return res, err
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}
