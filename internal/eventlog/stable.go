package eventlog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// StableEnds waits until partitions ps of topic (nil: all of them) have no
// transaction open that was open at the call (each one's last stable offset
// reaches the high watermark seen at the call) and returns those stable
// offsets: everything below them is decided, committed or aborted, so a
// reader that has applied the committed records below them has seen
// everything written before the call. With ps nil, a topic that does not
// exist has no partitions: an empty map. It gives up at deadline.
func StableEnds(ctx context.Context, adm *kadm.Client, topic string, ps []int32, deadline time.Time) (map[int32]int64, error) {
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("list end offsets of %s: %w", topic, err)
	}
	hwm := map[int32]int64{}
	if ps == nil {
		var missing error
		ends.Each(func(o kadm.ListedOffset) {
			switch {
			case o.Topic != topic:
			case errors.Is(o.Err, kerr.UnknownTopicOrPartition):
				missing = o.Err
			default:
				ps = append(ps, o.Partition)
			}
		})
		if len(ps) == 0 && missing != nil {
			return map[int32]int64{}, nil // no topic: nothing was ever written to it
		}
		if len(ps) == 0 {
			return nil, fmt.Errorf("end offsets of %s: no partitions listed", topic)
		}
	}
	for _, p := range ps {
		o, ok := ends.Lookup(topic, p)
		if !ok || o.Err != nil {
			return nil, fmt.Errorf("end offset of %s/%d: %v", topic, p, o.Err)
		}
		hwm[p] = o.Offset
	}
	for {
		stable, err := adm.ListCommittedOffsets(ctx, topic)
		if err != nil {
			return nil, fmt.Errorf("list stable offsets of %s: %w", topic, err)
		}
		out := make(map[int32]int64, len(ps))
		open := -1
		for _, p := range ps {
			o, ok := stable.Lookup(topic, p)
			if !ok || o.Err != nil {
				return nil, fmt.Errorf("stable offset of %s/%d: %v", topic, p, o.Err)
			}
			if o.Offset < hwm[p] {
				open = int(p)
				break
			}
			out[p] = o.Offset
		}
		if open < 0 {
			return out, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s/%d: a transaction stays open (stable offset below %d) past the deadline", topic, open, hwm[int32(open)])
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
