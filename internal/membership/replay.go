package membership

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/schemas"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// DefaultReplayStall is how long a Replay waits for the next records.
const DefaultReplayStall = 15 * time.Second

// ErrReplayStalled: a Replay read nothing for its stall time.
var ErrReplayStalled = errors.New("membership replay stalled")

// ReplayStats says what a Replay read.
type ReplayStats struct {
	From, Until int64 // the offsets read: [From, Until)
	Records     int   // committed records read
	Applied     int   // membership-changing events applied
	Undecodable int   // records skipped because they did not decode
}

// Replay rebuilds the membership of partition p of topic (im.sequenced.v1)
// from the log: every committed record from the partition's start up to,
// not including, offset until. Pass as until the offset the consumer
// resumes at (its first fetched record), so the result is exactly the
// membership before that record.
//
// The log is read read_committed, keeping control records, so a run that
// ends in transaction markers or aborted data still sees an offset at or
// past until-1 and stops: until must be at or below the partition's last
// stable offset, which it is when it comes from a read_committed fetch.
// opts are the client options (seed brokers, client ID); Replay adds the
// isolation level and consumed partition itself.
//
// A replay that reads nothing for stall (0: DefaultReplayStall) gives up
// with ErrReplayStalled: its caller (the pusher's poll loop) waits for
// it, and a broker that does not answer must not hold that loop for as
// long as ctx lives. A long replay that keeps reading is not cut short.
func Replay(ctx context.Context, opts []kgo.Opt, topic string, p int32, until int64, stall time.Duration) (*Partition, ReplayStats, error) {
	if stall <= 0 {
		stall = DefaultReplayStall
	}
	part := NewPartition()
	st := ReplayStats{Until: until}
	cl, err := kgo.NewClient(append(opts[:len(opts):len(opts)],
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), // the record at until-1 may be a marker
	)...)
	if err != nil {
		return nil, st, fmt.Errorf("membership replay client: %w", err)
	}
	defer cl.Close()
	starts, err := kadm.NewClient(cl).ListStartOffsets(ctx, topic)
	if err != nil {
		return nil, st, fmt.Errorf("list start offsets of %s: %w", topic, err)
	}
	start, ok := starts.Lookup(topic, p)
	if !ok || start.Err != nil {
		return nil, st, fmt.Errorf("start offset of %s/%d: %v", topic, p, start.Err)
	}
	st.From = start.Offset
	if start.Offset >= until {
		return part, st, nil
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().At(start.Offset)}})
	for {
		pctx, cancel := context.WithTimeout(ctx, stall)
		fs := cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			return nil, st, ctx.Err()
		}
		if pctx.Err() != nil && fs.NumRecords() == 0 {
			return nil, st, fmt.Errorf("%w: nothing read from %s/%d for %v (at %d records, until offset %d)", ErrReplayStalled, topic, p, stall, st.Records, until)
		}
		if err := fs.Err0(); err != nil {
			return nil, st, fmt.Errorf("read %s/%d: %w", topic, p, err)
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
			if !Affects(eventlog.Header(r, schemas.HeaderEventType)) {
				return
			}
			var ev imv1.SequencedEvent
			if err := proto.Unmarshal(r.Value, &ev); err != nil {
				st.Undecodable++
				return
			}
			if ev.GetSessionCreate() != nil || ev.GetMembership() != nil {
				part.Apply(&ev)
				st.Applied++
			}
		})
		if done {
			return part, st, nil
		}
	}
}
