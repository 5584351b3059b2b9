package replay

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/schemas"
	"github.com/seqflow/seqflow/schemas/imv1"
)

func TestPacer(t *testing.T) {
	t0 := time.Unix(1000, 0)
	type step struct {
		at    time.Duration // since t0
		want  int           // asked for
		spend int           // taken after asking
		n     int
		wait  time.Duration
	}
	for _, tc := range []struct {
		name  string
		rate  float64
		steps []step
	}{
		{"no cap", 0, []step{{0, 5000, 5000, 5000, 0}, {0, 7, 7, 7, 0}}},
		{"a tenth of a second's worth at a time", 1000, []step{
			{0, 5000, 100, 100, 0},
			{0, 5000, 0, 0, 100 * time.Millisecond},
			{50 * time.Millisecond, 5000, 0, 0, 50 * time.Millisecond}, // half a bucket: wait for the rest
			{100 * time.Millisecond, 5000, 100, 100, 0},
			{time.Second, 5000, 0, 100, 0},                 // saved up: at most the bucket
			{time.Second, 30, 30, 30, 0},                   // less wanted than the bucket holds
			{time.Second, 90, 0, 0, 20 * time.Millisecond}, // 70 left, 90 wanted
		}},
		{"slow rates get whole records", 2, []step{
			{0, 10, 1, 1, 0},
			{0, 10, 0, 0, 500 * time.Millisecond},
			{250 * time.Millisecond, 10, 0, 0, 250 * time.Millisecond},
			{500 * time.Millisecond, 10, 1, 1, 0},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPacer(tc.rate, t0)
			for i, s := range tc.steps {
				n, wait := p.budget(t0.Add(s.at), s.want)
				if n != s.n || wait != s.wait {
					t.Fatalf("step %d at %s: budget %d, wait %s; want %d, %s", i, s.at, n, wait, s.n, s.wait)
				}
				p.spend(s.spend)
			}
		})
	}
}

func TestFilter(t *testing.T) {
	ev := func(session, sender string) *kgo.Record {
		v, _ := proto.Marshal(&imv1.SequencedEvent{SessionId: session, Seq: 1, MsgId: 1, SenderUserId: sender})
		return &kgo.Record{Key: []byte(session), Value: v}
	}
	for _, tc := range []struct {
		name string
		req  *imv1.ReplayRequest
		rec  *kgo.Record
		want bool
	}{
		{"no filter", NewRequest(), ev("s1", "u1"), true},
		{"no filter, undecodable", NewRequest(), &kgo.Record{Key: []byte("s1"), Value: []byte{0xff}}, true},
		{"session in", &imv1.ReplayRequest{SessionIds: []string{"s0", "s1"}}, ev("s1", "u1"), true},
		{"session out", &imv1.ReplayRequest{SessionIds: []string{"s0"}}, ev("s1", "u1"), false},
		{"sender in", &imv1.ReplayRequest{SenderUserIds: []string{"u1"}}, ev("s1", "u1"), true},
		{"sender out", &imv1.ReplayRequest{SenderUserIds: []string{"u2"}}, ev("s1", "u1"), false},
		{"sender filter, undecodable", &imv1.ReplayRequest{SenderUserIds: []string{"u1"}}, &kgo.Record{Key: []byte("s1"), Value: []byte{0xff}}, false},
		{"both must match", &imv1.ReplayRequest{SessionIds: []string{"s1"}, SenderUserIds: []string{"u2"}}, ev("s1", "u1"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := newFilter(tc.req).match(tc.rec); got != tc.want {
				t.Fatalf("match = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCheckName(t *testing.T) {
	for name, ok := range map[string]bool{
		"rebuild-2026_12": true, "a": true, "": false, "a.b": false, "a b": false, "ä": false,
		string(make([]byte, 101)): false,
	} {
		if err := CheckName(name); (err == nil) != ok {
			t.Errorf("CheckName(%q) = %v, want ok %v", name, err, ok)
		}
	}
}

func TestRequestEqualityAndWords(t *testing.T) {
	a := &imv1.ReplayRequest{FromOffset: -1, ToOffset: -1, SessionIds: []string{"b", "a", "b"}}
	b := &imv1.ReplayRequest{FromOffset: -1, ToOffset: -1, SessionIds: []string{"a", "b"}}
	if !proto.Equal(normalize(a), normalize(b)) {
		t.Fatalf("normalize(%v) != normalize(%v)", a, b)
	}
	if Full(a) || !Full(NewRequest()) {
		t.Fatalf("Full: a filtered request is full, or the empty one is not")
	}
	for _, tc := range []struct {
		req  *imv1.ReplayRequest
		want string
	}{
		{NewRequest(), "whole log"},
		{&imv1.ReplayRequest{FromOffset: 5, ToOffset: -1}, "from offset 5"},
		{&imv1.ReplayRequest{FromOffset: -1, ToOffset: -1, PartitionRanges: []*imv1.ReplayRange{{Partition: 1, FromOffset: 2, ToOffset: -1}}}, "offsets 1:2-end"},
		{&imv1.ReplayRequest{FromOffset: -1, ToOffset: -1, FromTsMs: 1000, SenderUserIds: []string{"u"}}, "from 1970-01-01T00:00:01Z, senders u"},
	} {
		if got := Describe(tc.req); got != tc.want {
			t.Errorf("Describe(%v) = %q, want %q", tc.req, got, tc.want)
		}
	}
}

func TestPartitionStatusFromTail(t *testing.T) {
	def := &imv1.ReplayDefinition{Name: "r", ReplayTopic: "im.replay.r.v1", SourceTopic: "im.sequenced.v1"}
	rg := &imv1.ReplayRange{Partition: 2, FromOffset: 10, ToOffset: 100}
	copied := copyOf(&kgo.Record{Partition: 2, Offset: 41, Key: []byte("s")}, def.ReplayTopic, 7)
	endV, _ := proto.Marshal(&imv1.ReplayEnd{SourcePartition: 2, FromOffset: 10, ToOffset: 100, Events: 9})
	end := &kgo.Record{Value: endV, Headers: []kgo.RecordHeader{{Key: schemas.HeaderEventType, Value: []byte(EventTypeEnd)}}}
	badEndV, _ := proto.Marshal(&imv1.ReplayEnd{SourcePartition: 2, FromOffset: 10, ToOffset: 99})
	badEnd := &kgo.Record{Value: badEndV, Headers: end.Headers}
	foreign := &kgo.Record{Headers: []kgo.RecordHeader{{Key: schemas.HeaderEventType, Value: []byte("message")}}}
	outside := copyOf(&kgo.Record{Partition: 2, Offset: 100}, def.ReplayTopic, 1)
	for _, tc := range []struct {
		name string
		tail *tail
		want PartitionStatus
		bad  bool
	}{
		{"empty topic: from the start", &tail{}, PartitionStatus{Partition: 2, From: 10, To: 100, Next: 10}, false},
		{"only aborted records", &tail{end: 50}, PartitionStatus{Partition: 2, From: 10, To: 100, Next: 10}, false},
		{"after the last copy", &tail{end: 60, last: copied}, PartitionStatus{Partition: 2, From: 10, To: 100, Next: 42, Events: 7}, false},
		{"done", &tail{end: 60, last: end}, PartitionStatus{Partition: 2, From: 10, To: 100, Next: 100, Events: 9, Done: true}, false},
		{"copies deleted by retention", &tail{start: 30, end: 30}, PartitionStatus{}, true},
		{"marker of another range", &tail{end: 60, last: badEnd}, PartitionStatus{}, true},
		{"a record the replayer did not write", &tail{end: 60, last: foreign}, PartitionStatus{}, true},
		{"a copy outside the range", &tail{end: 60, last: outside}, PartitionStatus{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := partitionStatus(def, rg, tc.tail)
			if tc.bad {
				if _, ok := err.(*InconsistentError); !ok {
					t.Fatalf("err = %v, want *InconsistentError", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestIsRetryable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&InconsistentError{}, false},
		{&DefinitionMismatchError{}, false},
		{ErrNotFound, false},
		{fmt.Errorf("commit transaction: %w", kerr.ProducerFenced), false},
		{context.Canceled, false},
		{fmt.Errorf("produce: %w", kerr.NotLeaderForPartition), true},
	} {
		if got := IsRetryable(tc.err); got != tc.want {
			t.Errorf("IsRetryable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
