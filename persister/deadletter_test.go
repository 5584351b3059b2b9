package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/config"
	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/testkit/logcheck"
	"github.com/seqflow/seqflow/schemas"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// TestDeadLettersKeepRecordsByteForByte puts events the persister must
// refuse on im.sequenced.v1, with header keys and values (and a key and
// value) that are not valid UTF-8, runs the persister until its group's
// offset passes them, and reads their dead letters back from the
// dead-letter topic: each parses, and carries the original key, value and
// headers byte for byte. A dead letter that does not parse is a lost
// record, since the offset that passes it is committed.
func TestDeadLettersKeepRecordsByteForByte(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s := "s-" + e.id
	ev := func(seq, id int64, cmid, sender string) []byte {
		v, err := proto.Marshal(&imv1.SequencedEvent{SessionId: s, Seq: seq, MsgId: id, ClientMsgId: cmid, SenderUserId: sender,
			SenderDeviceId: "d", ServerTsMs: time.Now().UnixMilli(),
			Payload: &imv1.SequencedEvent_Message{Message: &imv1.MessageContent{Type: "text", Body: []byte(cmid)}}})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	typ := func(h ...kgo.RecordHeader) []kgo.RecordHeader {
		return append(eventlog.Headers("message", "seqflow.im.v1.SequencedEvent", "test", ""), h...)
	}
	records := []*kgo.Record{
		{Key: []byte(s), Value: ev(1, 100, "a", "alice"), Headers: typ()},
		{Key: []byte("\xff\xfekey"), Value: []byte("\xc3\x28 not protobuf"), // undecodable
			Headers: typ(kgo.RecordHeader{Key: "\xff\xfe", Value: []byte("\xed\xa0\x80")}, kgo.RecordHeader{Key: "ok", Value: []byte("\x80")})},
		{Key: []byte(s), Value: ev(1, 101, "a2", "alice"), // same seq, other message: conflict
			Headers: typ(kgo.RecordHeader{Key: schemas.HeaderTraceparent, Value: []byte("00-33333333333333333333333333333333-3333333333333333-01")},
				kgo.RecordHeader{Key: "bin\xc0\xaf", Value: []byte{0, 1, 2, 0xff}}, kgo.RecordHeader{Key: "bin\xc0\xaf"})},
		{Key: []byte(s), Value: ev(2, 200, "x", "a\x00b"), // text PostgreSQL cannot hold
			Headers: typ(kgo.RecordHeader{Key: "", Value: []byte("\xfe")}, kgo.RecordHeader{Key: "\x00\xff", Value: []byte("")})},
		{Key: []byte(s), Value: ev(3, 300, "b", "alice"), Headers: typ()},
	}
	want := map[int]imv1.ErrorCode{1: imv1.ErrorCode_ERROR_CODE_UNDECODABLE, 2: imv1.ErrorCode_ERROR_CODE_CONSTRAINT,
		3: imv1.ErrorCode_ERROR_CODE_UNDECODABLE}
	tx, err := kgo.NewClient(append(eventlog.ClientOpts(e.st.KafkaBrokers, "persister-dl-test-txn"),
		kgo.TransactionalID("persister-dl-test-"+e.id), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	if err := tx.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for _, r := range records {
		r.Topic, r.Partition = e.topics.Sequenced, 1
	}
	if err := tx.ProduceSync(ctx, records...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := tx.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	sent := map[int64]int{} // offset → index into records
	for i, r := range records {
		sent[r.Offset] = i
	}

	cfg, err := LoadConfig(config.FromMap(map[string]string{
		"SEQFLOW_KAFKA_BROKERS": strings.Join(e.st.KafkaBrokers, ","), "SEQFLOW_PG_URL": e.st.PGURL,
		"SEQFLOW_TOPIC_PREFIX": e.prefix, "PERSISTER_GROUP": "per-" + e.id, "PERSISTER_SCHEMA": e.schema,
		"PERSISTER_ADMIN_ADDR": "127.0.0.1:0", "PERSISTER_RETRY_MIN": "10ms",
	}))
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	runErr := make(chan error, 1)
	go func() { runErr <- New(cfg, slog.New(slog.NewJSONHandler(os.Stderr, nil))).Run(rctx) }()
	// The group's offset passes every record: the dead letters are durable.
	adm := kadm.NewClient(e.cl)
	for {
		offs, err := adm.FetchOffsets(ctx, "per-"+e.id)
		if err == nil {
			if o, _ := offs.Lookup(e.topics.Sequenced, 1); o.At >= int64(len(records)) {
				break
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("group offset never passed the records: %v %v", offs, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	stop()
	if err := <-runErr; err != context.Canceled {
		t.Fatalf("Run returned %v, want context.Canceled", err)
	}

	got := readDeadLetterRecords(ctx, t, e, len(want))
	if len(got) != len(want) {
		t.Errorf("%d dead letters, want %d", len(got), len(want))
	}
	for _, r := range got {
		var dl imv1.DeadLetter
		if err := proto.Unmarshal(r.Value, &dl); err != nil {
			t.Errorf("dead letter at %d does not parse: %v", r.Offset, err)
			continue
		}
		i, ok := sent[dl.OriginalOffset]
		if !ok || dl.OriginalTopic != e.topics.Sequenced || dl.OriginalPartition != 1 {
			t.Errorf("dead letter of %s/%d/%d: not one of the sent records", dl.OriginalTopic, dl.OriginalPartition, dl.OriginalOffset)
			continue
		}
		t.Run(fmt.Sprint("offset ", dl.OriginalOffset), func(t *testing.T) {
			if dl.Code != want[i] || dl.Service != "persister" || dl.Reason == "" {
				t.Errorf("code %s, service %q, reason %q; want %s from the persister with a reason", dl.Code, dl.Service, dl.Reason, want[i])
			}
			if !bytes.Equal(r.Key, records[i].Key) {
				t.Errorf("dead letter's record key %q, want the original %q", r.Key, records[i].Key)
			}
			requireSameRecord(t, &dl, records[i])
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

// readDeadLetterRecords reads the committed records of e's dead-letter
// topic until it has n of them or 20 seconds pass, and a second longer for
// any the test did not expect.
func readDeadLetterRecords(ctx context.Context, t *testing.T, e *env, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(append(eventlog.ClientOpts(e.st.KafkaBrokers, "persister-dl-test"),
		kgo.ConsumeTopics(e.topics.DeadLetter), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
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
	poll(time.Second)
	return out
}
