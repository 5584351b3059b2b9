package eventlog_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seqflow/seqflow/internal/eventlog"
)

// fetchOf builds a fetch of topic t: for each partition, records with
// the given offsets.
func fetchOf(t string, parts map[int32][]int64, err error) kgo.Fetches {
	f := kgo.Fetch{Topics: []kgo.FetchTopic{{Topic: t}}}
	for p := int32(0); p < 8; p++ {
		offs, ok := parts[p]
		if !ok {
			continue
		}
		fp := kgo.FetchPartition{Partition: p, HighWatermark: 100 + int64(p)}
		for _, o := range offs {
			fp.Records = append(fp.Records, &kgo.Record{Topic: t, Partition: p, Offset: o})
		}
		f.Topics[0].Partitions = append(f.Topics[0].Partitions, fp)
	}
	fs := kgo.Fetches{f}
	if err != nil {
		fs = append(fs, kgo.Fetch{Topics: []kgo.FetchTopic{{Partitions: []kgo.FetchPartition{{Partition: -1, Err: err}}}}})
	}
	return fs
}

// layout is "topic/partition:offsets" of every partition of fs, in order.
func layout(fs kgo.Fetches) []string {
	var out []string
	fs.EachPartition(func(fp kgo.FetchTopicPartition) {
		s := fmt.Sprintf("%s/%d:", fp.Topic, fp.Partition)
		for _, r := range fp.Records {
			s += fmt.Sprintf(" %d", r.Offset)
		}
		if fp.Err != nil {
			s += " err"
		}
		out = append(out, s)
	})
	return out
}

func TestMergeFetches(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name string
		a, b kgo.Fetches
		want []string
	}{
		{"disjoint partitions", fetchOf("up", map[int32][]int64{0: {1, 2}}, nil), fetchOf("up", map[int32][]int64{3: {7}}, nil),
			[]string{"up/0: 1 2", "up/3: 7"}},
		{"same partition: one entry, b after a", fetchOf("up", map[int32][]int64{0: {1, 2}, 1: {5}}, nil), fetchOf("up", map[int32][]int64{0: {3, 4}}, nil),
			[]string{"up/0: 1 2 3 4", "up/1: 5"}},
		{"b's wait ran out: its context error is dropped", fetchOf("up", map[int32][]int64{2: {9}}, nil), fetchOf("up", map[int32][]int64{2: {10}}, context.DeadlineExceeded),
			[]string{"up/2: 9 10"}},
		{"other errors of b are kept", fetchOf("up", map[int32][]int64{2: {9}}, nil), fetchOf("up", map[int32][]int64{2: {10}}, boom),
			[]string{"up/2: 9 10", "/-1: err"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := eventlog.MergeFetches(tc.a, tc.b)
			if fmt.Sprint(layout(got)) != fmt.Sprint(tc.want) {
				t.Fatalf("merged %v, want %v", layout(got), tc.want)
			}
			if n, want := got.NumRecords(), tc.a.NumRecords()+tc.b.NumRecords(); n != want {
				t.Fatalf("%d records, want %d", n, want)
			}
		})
	}
}

// TestMergeFetchesDoesNotAliasA: appending b's records must not write into
// the backing array of a's record slice.
func TestMergeFetchesDoesNotAliasA(t *testing.T) {
	a := fetchOf("up", map[int32][]int64{0: {1, 2}}, nil)
	recs := a[0].Topics[0].Partitions[0].Records
	a[0].Topics[0].Partitions[0].Records = append(make([]*kgo.Record, 0, 8), recs...)
	b := fetchOf("up", map[int32][]int64{0: {3}}, nil)
	_ = eventlog.MergeFetches(a, b)
	if got := a[0].Topics[0].Partitions[0].Records; len(got) != 2 || got[:cap(got)][2] != nil {
		t.Fatalf("a's records changed: %v", layout(a))
	}
}
