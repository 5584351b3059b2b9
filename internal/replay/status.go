package replay

import (
	"context"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/schemas"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// PartitionStatus is how far the replay of one partition is, as its
// committed records say.
type PartitionStatus struct {
	Partition int32 `json:"partition"`
	From      int64 `json:"from_offset"` // the source range [From, To)
	To        int64 `json:"to_offset"`
	// Next is the source offset the replay goes on from: every matching
	// event before it is in the replay topic, none after it. To once Done.
	Next   int64 `json:"next_offset"`
	Events int64 `json:"events"` // events copied so far
	Done   bool  `json:"done"`   // the end marker is written
}

// Status is how far a replay is.
type Status struct {
	Def        *imv1.ReplayDefinition
	Partitions []PartitionStatus
}

// Done reports whether every partition has its end marker.
func (s *Status) Done() bool { return s.DoneCount() == len(s.Partitions) }

// DoneCount is the number of partitions with their end marker.
func (s *Status) DoneCount() int {
	n := 0
	for _, p := range s.Partitions {
		if p.Done {
			n++
		}
	}
	return n
}

// Events is the number of events copied so far.
func (s *Status) Events() int64 {
	var n int64
	for _, p := range s.Partitions {
		n += p.Events
	}
	return n
}

// Offsets returns the source offsets read so far and in all (the sum of
// the ranges): the replay's progress.
func (s *Status) Offsets() (read, total int64) {
	for _, p := range s.Partitions {
		read += p.Next - p.From
		total += p.To - p.From
	}
	return read, total
}

// ReadStatus reads how far the replay of def is from the last committed
// record of each partition of its topic. It does not fence a running
// replayer: what it sees is what that one committed so far.
func ReadStatus(ctx context.Context, brokers []string, def *imv1.ReplayDefinition) (*Status, error) {
	tl, err := tails(ctx, brokers, def.GetReplayTopic())
	if err != nil {
		return nil, err
	}
	if len(tl) != len(def.GetRanges()) {
		return nil, &InconsistentError{Topic: def.GetReplayTopic(), Partition: -1, Offset: -1,
			Why: fmt.Sprintf("%d partitions, the definition has %d", len(tl), len(def.GetRanges()))}
	}
	st := &Status{Def: def}
	for _, r := range def.GetRanges() {
		t, ok := tl[r.GetPartition()]
		if !ok {
			return nil, &InconsistentError{Topic: def.GetReplayTopic(), Partition: r.GetPartition(), Offset: -1, Why: "partition missing"}
		}
		ps, err := partitionStatus(def, r, t)
		if err != nil {
			return nil, err
		}
		st.Partitions = append(st.Partitions, ps)
	}
	return st, nil
}

// partitionStatus reads the state of one partition from its last
// committed record.
func partitionStatus(def *imv1.ReplayDefinition, r *imv1.ReplayRange, t *tail) (PartitionStatus, error) {
	ps := PartitionStatus{Partition: r.GetPartition(), From: r.GetFromOffset(), To: r.GetToOffset(), Next: r.GetFromOffset()}
	bad := func(off int64, why string, args ...any) (PartitionStatus, error) {
		return ps, &InconsistentError{Topic: def.GetReplayTopic(), Partition: r.GetPartition(), Offset: off, Why: fmt.Sprintf(why, args...)}
	}
	if t.last == nil {
		if t.start > 0 {
			return bad(t.start, "every record before the log start %d was deleted (retention?); the resume point is lost", t.start)
		}
		return ps, nil
	}
	last := t.last
	if IsEnd(last) {
		var end imv1.ReplayEnd
		if err := proto.Unmarshal(last.Value, &end); err != nil {
			return bad(last.Offset, "undecodable end marker: %v", err)
		}
		if end.GetFromOffset() != ps.From || end.GetToOffset() != ps.To || end.GetSourcePartition() != ps.Partition {
			return bad(last.Offset, "end marker for %d [%d, %d), the definition says [%d, %d)",
				end.GetSourcePartition(), end.GetFromOffset(), end.GetToOffset(), ps.From, ps.To)
		}
		ps.Next, ps.Events, ps.Done = ps.To, end.GetEvents(), true
		return ps, nil
	}
	src, count, err := copyHeaders(last)
	if err != nil {
		return bad(last.Offset, "%v", err)
	}
	if src < ps.From || src >= ps.To {
		return bad(last.Offset, "a copy of source offset %d, outside the range [%d, %d)", src, ps.From, ps.To)
	}
	ps.Next, ps.Events = src+1, count
	return ps, nil
}

// copyHeaders reads the replay headers of a copied event.
func copyHeaders(r *kgo.Record) (srcOffset, count int64, err error) {
	src, err1 := strconv.ParseInt(eventlog.Header(r, HeaderSourceOffset), 10, 64)
	n, err2 := strconv.ParseInt(eventlog.Header(r, HeaderCount), 10, 64)
	if err1 != nil || err2 != nil || n < 1 {
		return 0, 0, fmt.Errorf("not a replayed event: headers %s=%q, %s=%q", HeaderSourceOffset,
			eventlog.Header(r, HeaderSourceOffset), HeaderCount, eventlog.Header(r, HeaderCount))
	}
	return src, n, nil
}

// IsEnd reports whether r is an end-of-replay marker.
func IsEnd(r *kgo.Record) bool {
	return eventlog.Header(r, schemas.HeaderEventType) == EventTypeEnd
}

// tail is the committed tail of one partition.
type tail struct {
	start, end int64       // log start and last stable offset
	last       *kgo.Record // the last committed data record, nil when none
}

// tails finds the last committed data record of every partition of
// topic. It reads back from the last stable offset in windows growing
// eightfold: the records at the end may be transaction markers and the
// records of aborted transactions, which a read_committed reader skips.
func tails(ctx context.Context, brokers []string, topic string) (map[int32]*tail, error) {
	cl, err := kgo.NewClient(eventlog.ClientOpts(brokers, "seqflow-replay-status")...)
	if err != nil {
		return nil, fmt.Errorf("create Kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	starts, err := listed(adm.ListStartOffsets(ctx, topic))
	if err != nil {
		return nil, fmt.Errorf("replay topic %s: %w", topic, err)
	}
	stable, err := listed(adm.ListCommittedOffsets(ctx, topic))
	if err != nil {
		return nil, fmt.Errorf("replay topic %s: %w", topic, err)
	}
	out := map[int32]*tail{}
	pending := map[int32]bool{}
	for p, end := range stable {
		out[p] = &tail{start: starts[p], end: end}
		if end > starts[p] {
			pending[p] = true
		}
	}
	for window := int64(64); len(pending) > 0; window *= 8 {
		ranges := map[int32][2]int64{}
		for p := range pending {
			t := out[p]
			ranges[p] = [2]int64{max(t.start, t.end-window), t.end}
		}
		err := readRange(ctx, brokers, topic, ranges, func(r *kgo.Record) error {
			out[r.Partition].last = r
			return nil
		})
		if err != nil {
			return nil, err
		}
		for p := range pending {
			if out[p].last != nil || ranges[p][0] == out[p].start {
				delete(pending, p)
			}
		}
	}
	return out, nil
}

// readRange calls fn for every committed data record of topic in
// [from, to) of each partition (ranges: partition → {from, to}), read
// committed, in log order per partition. to must be at most the last
// stable offset: the record at to-1 is then a data record or a
// transaction marker, never one of an open or aborted transaction, so the
// read sees it (it keeps control records) and knows the partition is
// read.
func readRange(ctx context.Context, brokers []string, topic string, ranges map[int32][2]int64, fn func(*kgo.Record) error) error {
	start := map[int32]kgo.Offset{}
	for p, r := range ranges {
		if r[0] < r[1] {
			start[p] = kgo.NewOffset().At(r[0])
		}
	}
	if len(start) == 0 {
		return nil
	}
	cl, err := kgo.NewClient(append(eventlog.ClientOpts(brokers, "seqflow-replay-reader"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
		kgo.ConsumeResetOffset(kgo.NoResetOffset()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: start}),
	)...)
	if err != nil {
		return fmt.Errorf("create Kafka client: %w", err)
	}
	defer cl.Close()
	for len(start) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if ferr == nil && !eventlog.IsPollDone(err) {
				ferr = fmt.Errorf("read %s/%d: %w", t, p, err)
			}
		})
		if ferr != nil {
			return ferr
		}
		var done []int32
		fs.EachRecord(func(r *kgo.Record) {
			if _, ok := start[r.Partition]; !ok || ferr != nil {
				return
			}
			end, off := ranges[r.Partition][1], r.Offset
			if off < end && !r.Attrs.IsControl() {
				ferr = fn(r)
			}
			if off >= end-1 {
				delete(start, r.Partition)
				done = append(done, r.Partition)
			}
		})
		if ferr != nil {
			return ferr
		}
		if len(done) > 0 {
			cl.PauseFetchPartitions(map[string][]int32{topic: done})
		}
	}
	return nil
}
