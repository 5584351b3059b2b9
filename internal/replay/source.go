package replay

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/rebuild"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// Source reads a complete replay topic as the part of the sequenced log
// it was copied from, for rebuild.Replay: each event comes with the
// topic, partition and offset it has in the source, so a store rebuilt
// from it is the store rebuilt from the log, down to each row's log
// offset and the store's offsets.
type Source struct {
	Brokers []string
	Def     *imv1.ReplayDefinition
}

var _ rebuild.EventSource = (*Source)(nil)

// Ends returns the end of each partition's source range, once every
// partition has its end marker (a *NotDoneError before).
func (s *Source) Ends(ctx context.Context) (map[int32]int64, error) {
	st, err := ReadStatus(ctx, s.Brokers, s.Def)
	if err != nil {
		return nil, err
	}
	if !st.Done() {
		read, total := st.Offsets()
		return nil, &NotDoneError{Name: s.Def.GetName(), Done: st.DoneCount(), Of: len(st.Partitions), EventsLeft: total - read}
	}
	ends := map[int32]int64{}
	for _, p := range st.Partitions {
		ends[p.Partition] = p.To
	}
	return ends, nil
}

// Scan calls fn for every event of the replay topic in order per
// partition, as the source record it is a copy of (its Topic and Offset
// rewritten, its replay headers kept). It checks as it goes that nothing
// is missing: the copy counts run 1, 2, 3, ... up to the marker's count,
// the source offsets rise and stay below the partition's end, and every
// partition ends with its marker.
func (s *Source) Scan(ctx context.Context, ends map[int32]int64, fn func(*kgo.Record) error) error {
	tl, err := tails(ctx, s.Brokers, s.Def.GetReplayTopic())
	if err != nil {
		return err
	}
	type seen struct {
		count, src int64
		ended      bool
	}
	state := map[int32]*seen{}
	ranges := map[int32][2]int64{}
	for p, t := range tl {
		state[p] = &seen{src: -1}
		ranges[p] = [2]int64{t.start, t.end}
	}
	topic := s.Def.GetReplayTopic()
	err = readRange(ctx, s.Brokers, topic, ranges, func(r *kgo.Record) error {
		st := state[r.Partition]
		bad := func(why string, args ...any) error {
			return &InconsistentError{Topic: topic, Partition: r.Partition, Offset: r.Offset, Why: fmt.Sprintf(why, args...)}
		}
		if st.ended {
			return bad("a record after the end marker")
		}
		if IsEnd(r) {
			var end imv1.ReplayEnd
			if err := proto.Unmarshal(r.Value, &end); err != nil {
				return bad("undecodable end marker: %v", err)
			}
			if end.GetEvents() != st.count {
				return bad("end marker counts %d events, the partition holds %d", end.GetEvents(), st.count)
			}
			st.ended = true
			return nil
		}
		src, count, err := copyHeaders(r)
		if err != nil {
			return bad("%v", err)
		}
		if count != st.count+1 {
			return bad("copy number %d after %d: copied events are missing (deleted by retention?)", count, st.count)
		}
		if src <= st.src || src >= ends[r.Partition] {
			return bad("source offset %d after %d, end %d", src, st.src, ends[r.Partition])
		}
		st.count, st.src = count, src
		c := *r
		c.Topic, c.Offset = s.Def.GetSourceTopic(), src
		return fn(&c)
	})
	if err != nil {
		return err
	}
	for p, st := range state {
		if !st.ended {
			return &InconsistentError{Topic: topic, Partition: p, Offset: -1, Why: "no end marker"}
		}
	}
	return nil
}
