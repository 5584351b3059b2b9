package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/store"
	"github.com/seqflow/seqflow/internal/testkit/stack"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// TestVerifyFailsWhenStoreDiffers builds a store from a small log with
// `seqflow replay`, checks that `seqflow verify` passes, then removes,
// alters and adds rows: verify must name each and fail.
func TestVerifyFailsWhenStoreDiffers(t *testing.T) {
	st := stack.Require(t, "kafka", "pg")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id := strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	prefix, schema := "t-"+id+".", "v_"+id
	topics := eventlog.Names(prefix)
	cl, err := kgo.NewClient(append(eventlog.ClientOpts(st.KafkaBrokers, "verify-test"),
		kgo.TransactionalID("verify-test-"+id), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if err := eventlog.EnsureTopics(ctx, adm, eventlog.Specs(topics, 2), 0); err != nil {
		t.Fatal(err)
	}
	pool, err := store.NewPool(ctx, st.PGURL, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
		pool.Close()
		_, _ = adm.DeleteTopics(context.Background(), topics.Uplink, topics.Sequenced, topics.Duplicates, topics.Receipts, topics.Offline, topics.DeadLetter)
	})
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for i := int64(1); i <= 6; i++ {
		s := fmt.Sprintf("s%d", i%2)
		v, _ := proto.Marshal(&imv1.SequencedEvent{SessionId: s, Seq: i, MsgId: 1000 + i, SenderUserId: "u",
			Payload: &imv1.SequencedEvent_Message{Message: &imv1.MessageContent{Type: "text", Body: []byte(fmt.Sprint("m", i))}}})
		cl.Produce(ctx, &kgo.Record{Topic: topics.Sequenced, Partition: int32(i % 2), Key: []byte(s), Value: v}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	if err := runReplay(ctx, []string{"-schema", schema, "-topic-prefix", prefix, "-quiet"}); err != nil {
		t.Fatalf("replay: %v", err)
	}
	verify := func() error { return runVerify(ctx, []string{"-schema", schema, "-topic-prefix", prefix}) }
	if err := verify(); err != nil {
		t.Fatalf("verify of a faithful store: %v", err)
	}
	for _, q := range []string{
		"DELETE FROM %s.messages WHERE session_id = 's1' AND seq = 3",
		"UPDATE %s.messages SET body = 'tampered' WHERE session_id = 's0' AND seq = 4",
		"INSERT INTO %s.messages (session_id, seq, msg_id, client_msg_id, sender_user_id, sender_device_id, kind, server_ts_ms, log_partition, log_offset) VALUES ('s9', 1, 9, '', 'u', '', 'message', 0, 0, 0)",
	} {
		if _, err := pool.Exec(ctx, fmt.Sprintf(q, schema)); err != nil {
			t.Fatal(err)
		}
	}
	if err := verify(); err == nil || !strings.Contains(err.Error(), "differs from the log in 3 sessions") {
		t.Fatalf("verify of a tampered store: %v, want a failure naming 3 sessions", err)
	}
	rep, err := verifySchema(ctx, st.KafkaBrokers, topics, pool, schema, false)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, d := range rep.Differences {
		got[d.SessionID] = fmt.Sprint(d.Missing, d.Extra, d.Mismatched)
	}
	want := map[string]string{"s0": "[] [] [4]", "s1": "[3] [] []", "s9": "[] [1] []"}
	for s, w := range want {
		if got[s] != w {
			t.Errorf("session %s: missing/extra/mismatched %s, want %s", s, got[s], w)
		}
	}
}
