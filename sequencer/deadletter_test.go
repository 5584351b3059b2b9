package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/testkit/logcheck"
	"github.com/seqflow/seqflow/schemas"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// TestDeadLettersKeepRecordsByteForByte sends uplinks the sequencer must
// refuse, with header keys and values (and a key and value) that are not
// valid UTF-8, and reads their dead letters back from the dead-letter
// topic: each parses, and carries the original key, value and headers byte
// for byte. A dead letter that does not parse is a lost record, since the
// uplink's offset is committed with it; a good uplink behind them proves
// the partition moved on.
func TestDeadLettersKeepRecordsByteForByte(t *testing.T) {
	h := newHarness(t, 1)
	h.start("a")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s := h.session(1)
	bad := []struct {
		name string
		code imv1.ErrorCode
		rec  *kgo.Record
	}{
		{"undecodable, nothing UTF-8", imv1.ErrorCode_ERROR_CODE_UNDECODABLE, &kgo.Record{
			Key: []byte("\xff\xfekey"), Value: []byte("\xc3\x28 not a protobuf"),
			Headers: []kgo.RecordHeader{{Key: "\xff\xfe", Value: []byte("\xed\xa0\x80")}, {Key: "ok", Value: []byte("\x80")}}}},
		{"wrong key, binary headers", imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, &kgo.Record{
			Key: []byte("other-key\xff"), Value: uplinkValue(s, "wrong-key", "x"),
			Headers: []kgo.RecordHeader{{Key: schemas.HeaderTraceparent, Value: []byte("00-33333333333333333333333333333333-3333333333333333-01")},
				{Key: "bin\xc0\xaf", Value: []byte{0, 1, 2, 0xff}}, {Key: "bin\xc0\xaf", Value: nil}}}},
		{"missing field, empty header key", imv1.ErrorCode_ERROR_CODE_MISSING_FIELD, &kgo.Record{
			Key: []byte(s), Value: mustMarshal(t, &imv1.Uplink{SessionId: s, SenderUserId: "u",
				Command: &imv1.Uplink_Message{Message: &imv1.MessageContent{Type: "text"}}}),
			Headers: []kgo.RecordHeader{{Key: "", Value: []byte("\xfe")}, {Key: "\x00\xff", Value: []byte("")}}}},
	}
	sent := map[int64]int{} // uplink offset → index into bad
	for i, b := range bad {
		b.rec.Topic = h.topics.Uplink
		if err := h.cl.ProduceSync(ctx, b.rec).FirstErr(); err != nil {
			t.Fatalf("produce %s: %v", b.name, err)
		}
		sent[b.rec.Offset] = i
	}
	if err := h.send(ctx, s, "good"); err != nil {
		t.Fatal(err)
	}
	firstRecord(ctx, t, h, h.topics.Sequenced) // the good uplink behind the bad ones

	got := readDeadLetters(ctx, t, h.st.KafkaBrokers, h.topics.DeadLetter, len(bad))
	if len(got) != len(bad) {
		t.Fatalf("%d dead letters, want %d", len(got), len(bad))
	}
	for _, r := range got {
		var dl imv1.DeadLetter
		if err := proto.Unmarshal(r.Value, &dl); err != nil {
			t.Errorf("dead letter at %d does not parse: %v", r.Offset, err)
			continue
		}
		i, ok := sent[dl.OriginalOffset]
		if !ok || dl.OriginalTopic != h.topics.Uplink || dl.OriginalPartition != 0 {
			t.Errorf("dead letter of %s/%d/%d: not one of the sent records", dl.OriginalTopic, dl.OriginalPartition, dl.OriginalOffset)
			continue
		}
		b := bad[i]
		t.Run(b.name, func(t *testing.T) {
			if dl.Code != b.code || dl.Service != "sequencer" || dl.Reason == "" {
				t.Errorf("code %s, service %q, reason %q; want %s from the sequencer with a reason", dl.Code, dl.Service, dl.Reason, b.code)
			}
			if !bytes.Equal(r.Key, b.rec.Key) {
				t.Errorf("dead letter's record key %q, want the original %q", r.Key, b.rec.Key)
			}
			requireSameRecord(t, &dl, b.rec)
		})
	}
}

// requireSameRecord fails unless dl carries rec byte for byte.
func requireSameRecord(t *testing.T, dl *imv1.DeadLetter, rec *kgo.Record) {
	t.Helper()
	for _, d := range logcheck.DeadLetterDiff(dl, rec) {
		t.Error(d)
	}
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	v, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// readDeadLetters reads the committed records of the dead-letter topic
// until it has n of them or 20 seconds pass, and waits a little longer
// for any it did not expect.
func readDeadLetters(ctx context.Context, t *testing.T, brokers []string, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(append(eventlog.ClientOpts(brokers, "seq-dl-test"),
		kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	poll := func(d time.Duration) {
		pctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		cl.PollFetches(pctx).EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	for deadline := time.Now().Add(20 * time.Second); len(out) < n && time.Now().Before(deadline); {
		poll(time.Until(deadline))
	}
	poll(time.Second) // any the test did not expect
	return out
}
