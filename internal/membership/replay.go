package membership

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/schemas"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// DefaultReplayStall is how long a Replay waits for the next records.
const DefaultReplayStall = 15 * time.Second

// ErrReplayStalled: a Replay read nothing for its stall time.
var ErrReplayStalled = eventlog.ErrReadStalled

// ReplayStats says what a Replay read.
type ReplayStats struct {
	From, Until int64 // the offsets read: [From, Until)
	Records     int   // committed records read
	Applied     int   // membership-changing events applied
	Undecodable int   // records skipped because they did not decode
}

// Replay rebuilds the membership of partition p of topic (im.sequenced.v1)
// from the log: every committed record from the partition's start up to,
// not including, offset until (eventlog.ReadCommitted says what until may
// be). Pass as until the offset the consumer resumes at (its first fetched
// record), so the result is exactly the membership before that record.
// opts are the client options (seed brokers, client ID).
//
// A replay that reads nothing for stall (0: DefaultReplayStall) gives up
// with ErrReplayStalled: its caller (the pusher's poll loop) waits for
// it, and a broker that does not answer must not hold that loop for as
// long as ctx lives.
func Replay(ctx context.Context, opts []kgo.Opt, topic string, p int32, until int64, stall time.Duration) (*Partition, ReplayStats, error) {
	return ReplayFrom(ctx, opts, topic, p, NewPartition(), -1, until, stall)
}

// ReplayFrom is Replay starting from part, the membership as of offset
// from (a snapshot, see FromGroups), reading only [from, until).
func ReplayFrom(ctx context.Context, opts []kgo.Opt, topic string, p int32, part *Partition, from, until int64, stall time.Duration) (*Partition, ReplayStats, error) {
	if stall <= 0 {
		stall = DefaultReplayStall
	}
	var st ReplayStats
	rs, err := eventlog.ReadCommitted(ctx, opts, topic, p, from, until, stall, func(r *kgo.Record) {
		if !Affects(eventlog.Header(r, schemas.HeaderEventType)) {
			return
		}
		var ev imv1.SequencedEvent
		if err := proto.Unmarshal(r.Value, &ev); err != nil {
			st.Undecodable++
			return
		}
		if ev.GetSessionCreate() != nil || ev.GetMembership() != nil || ev.GetGroup().GetJoin() != nil {
			part.Apply(&ev)
			st.Applied++
		}
	})
	st.From, st.Until, st.Records = rs.From, rs.Until, rs.Records
	if err != nil {
		return nil, st, err
	}
	return part, st, nil
}
