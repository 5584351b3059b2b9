package eventlog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrReadStalled: ReadCommitted read nothing for its stall time.
var ErrReadStalled = errors.New("partition read stalled")

// ReadStats says what ReadCommitted read.
type ReadStats struct {
	From, Until int64 // the offsets read: [From, Until)
	Records     int   // committed data records handed to the callback
}

// ReadCommitted hands fn every committed data record of partition p of
// topic from offset from (negative: the partition's start) up to, not
// including, until, in offset order: how a projection (membership, group
// state) is rebuilt from the log.
//
// The log is read read_committed, keeping control records, so a run that
// ends in transaction markers or aborted data still sees an offset at or
// past until-1 and stops: until must be at or below the partition's last
// stable offset (it is when it comes from a read_committed fetch, or from
// ListCommittedOffsets once no transaction is open). opts are the client
// options (seed brokers, client ID).
//
// A read that gets nothing for stall gives up with ErrReadStalled, so a
// broker that does not answer does not hold the caller for as long as ctx
// lives; a long read that keeps reading is not cut short.
func ReadCommitted(ctx context.Context, opts []kgo.Opt, topic string, p int32, from, until int64, stall time.Duration, fn func(*kgo.Record)) (ReadStats, error) {
	st := ReadStats{From: from, Until: until}
	cl, err := kgo.NewClient(append(opts[:len(opts):len(opts)],
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), // the record at until-1 may be a marker
	)...)
	if err != nil {
		return st, fmt.Errorf("read client: %w", err)
	}
	defer cl.Close()
	if from < 0 {
		starts, err := kadm.NewClient(cl).ListStartOffsets(ctx, topic)
		if err != nil {
			return st, fmt.Errorf("list start offsets of %s: %w", topic, err)
		}
		start, ok := starts.Lookup(topic, p)
		if !ok || start.Err != nil {
			return st, fmt.Errorf("start offset of %s/%d: %v", topic, p, start.Err)
		}
		st.From = start.Offset
	}
	if st.From >= until {
		return st, nil
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().At(st.From)}})
	for {
		pctx, cancel := context.WithTimeout(ctx, stall)
		fs := cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			return st, ctx.Err()
		}
		if pctx.Err() != nil && fs.NumRecords() == 0 {
			return st, fmt.Errorf("%w: nothing read from %s/%d for %v (at %d records, until offset %d)", ErrReadStalled, topic, p, stall, st.Records, until)
		}
		if err := fs.Err0(); err != nil {
			return st, fmt.Errorf("read %s/%d: %w", topic, p, err)
		}
		done := false
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= until-1 {
				done = true
			}
			if r.Attrs.IsControl() || r.Offset >= until {
				return
			}
			st.Records++
			fn(r)
		})
		if done {
			return st, nil
		}
	}
}
