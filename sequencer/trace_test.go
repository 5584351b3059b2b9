package main

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/schemas"
)

// TestTraceparentCarried checks the per-record trace propagation: a
// sequenced event carries its uplink's traceparent unchanged, a duplicate
// ACK the retry's, and a dead letter the bad uplink's.
func TestTraceparentCarried(t *testing.T) {
	h := newHarness(t, 2)
	h.start("seq-a")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const (
		first = "00-11111111111111111111111111111111-1111111111111111-01"
		retry = "00-22222222222222222222222222222222-2222222222222222-01"
		bad   = "00-33333333333333333333333333333333-3333333333333333-01"
	)
	s := h.session(1)
	for _, u := range []struct {
		tp    string
		value []byte
	}{{first, uplinkValue(s, "c1", "hi")}, {retry, uplinkValue(s, "c1", "hi")}, {bad, []byte("not an uplink")}} {
		rec := &kgo.Record{Topic: h.topics.Uplink, Key: []byte(s), Value: u.value,
			Headers: []kgo.RecordHeader{{Key: schemas.HeaderTraceparent, Value: []byte(u.tp)}}}
		if err := h.cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct{ name, topic, want string }{
		{"sequenced event", h.topics.Sequenced, first},
		{"duplicate ack", h.topics.Duplicates, retry},
		{"dead letter", h.topics.DeadLetter, bad},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := firstRecord(ctx, t, h, c.topic)
			if got := eventlog.Header(r, schemas.HeaderTraceparent); got != c.want {
				t.Fatalf("traceparent %q, want %q", got, c.want)
			}
		})
	}
}

// firstRecord returns the first committed record of topic.
func firstRecord(ctx context.Context, t *testing.T, h *harness, topic string) *kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(append(eventlog.ClientOpts(h.st.KafkaBrokers, "seq-trace-test"),
		kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for ctx.Err() == nil {
		if it := cl.PollFetches(ctx).RecordIter(); !it.Done() {
			return it.Next()
		}
	}
	t.Fatalf("no record on %s: %v", topic, ctx.Err())
	return nil
}
