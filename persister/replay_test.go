package main

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/config"
	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/rebuild"
	"github.com/seqflow/seqflow/internal/store"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// writeLog writes a sequenced log with every kind of event, and receipts,
// the way the sequencer would (transactions, key = session, one partition
// per session). It writes it itself because the test needs edits, recalls
// and membership changes in known places. It returns the number of events.
func writeLog(ctx context.Context, t *testing.T, e *env, sessions []string, perSession int) int {
	t.Helper()
	tx, err := kgo.NewClient(append(eventlog.ClientOpts(e.st.KafkaBrokers, "persister-test-log"),
		kgo.TransactionalID("persister-test-log-"+e.id+"-"+fmt.Sprint(time.Now().UnixNano())),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	n := 0
	var recs []*kgo.Record
	add := func(topic, typ, s string, m proto.Message) {
		v, _ := proto.Marshal(m)
		h := fnv.New32a()
		h.Write([]byte(s))
		recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(h.Sum32() % 4), Key: []byte(s), Value: v,
			Headers: eventlog.Headers(typ, "test", "test", "")})
	}
	for _, s := range sessions {
		h := fnv.New64a()
		h.Write([]byte(s))
		idBase := int64(h.Sum64()>>24) << 20 // distinct message IDs per session
		users := []string{"alice", "bob", "carol"}
		base := &imv1.SequencedEvent{SessionId: s, SenderDeviceId: "d", ServerTsMs: time.Now().UnixMilli()}
		for seq := int64(1); seq <= int64(perSession); seq++ {
			ev := proto.Clone(base).(*imv1.SequencedEvent)
			ev.Seq, ev.MsgId, ev.ClientMsgId = seq*2, idBase|seq, fmt.Sprintf("c%d", seq) // gaps in seq
			ev.SenderUserId = users[seq%3]
			switch {
			case seq == 1:
				ev.Payload = &imv1.SequencedEvent_SessionCreate{SessionCreate: &imv1.SessionCreate{Kind: imv1.SessionKind_SESSION_KIND_GROUP, Title: "room " + s, MemberUserIds: users[1:]}}
			case seq%17 == 0:
				ev.Payload = &imv1.SequencedEvent_Membership{Membership: &imv1.MembershipChange{Op: imv1.MembershipChange_OP_REMOVE, UserIds: []string{"carol"}}}
			case seq%17 == 1:
				ev.Payload = &imv1.SequencedEvent_Membership{Membership: &imv1.MembershipChange{Op: imv1.MembershipChange_OP_ADD, UserIds: []string{"carol", "dave"}}}
			case seq%7 == 0:
				ev.SenderUserId = users[(seq-3)%3] // the sender of seq-3
				ev.Payload = &imv1.SequencedEvent_Edit{Edit: &imv1.Edit{TargetSeq: (seq - 3) * 2, Content: &imv1.MessageContent{Type: "text", Body: []byte(fmt.Sprintf("edited %d", seq-3))}}}
			case seq%11 == 0:
				ev.Payload = &imv1.SequencedEvent_Recall{Recall: &imv1.Recall{TargetSeq: (seq - 1) * 2}} // often another sender's: no effect
			default:
				ev.Payload = &imv1.SequencedEvent_Message{Message: &imv1.MessageContent{Type: "text", Body: []byte(fmt.Sprintf("message %d of %s", seq, s))}}
			}
			add(e.topics.Sequenced, "message", s, ev)
			n++
			if seq%5 == 0 {
				add(e.topics.Receipts, "read_receipt", s, &imv1.ReadReceipt{SessionId: s, UserId: "bob", DeviceId: "p", ReadSeq: seq * 2})
				add(e.topics.Receipts, "delivery_receipt", s, &imv1.DeliveryReceipt{SessionId: s, UserId: "bob", DeviceId: "p", DeliveredSeq: seq * 2})
			}
		}
	}
	for len(recs) > 0 {
		chunk := recs[:min(len(recs), 2000)]
		recs = recs[len(chunk):]
		if err := tx.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := tx.ProduceSync(ctx, chunk...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := tx.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// storeTables are compared whole between the live and the replayed store.
var storeTables = map[string]string{
	"messages":         "*",
	"message_ids":      "*",
	"sessions":         "*",
	"session_members":  "*",
	"read_cursors":     "session_id, user_id, read_seq",
	"delivery_cursors": "session_id, user_id, device_id, delivered_seq",
}

func tableDiff(ctx context.Context, t *testing.T, e *env, a, b string) []string {
	t.Helper()
	var out []string
	for table, cols := range storeTables {
		var n, rows int
		q := fmt.Sprintf(`SELECT (SELECT count(*) FROM ((SELECT %[3]s FROM %[1]s.%[4]s EXCEPT ALL SELECT %[3]s FROM %[2]s.%[4]s)
			UNION ALL (SELECT %[3]s FROM %[2]s.%[4]s EXCEPT ALL SELECT %[3]s FROM %[1]s.%[4]s)) d), (SELECT count(*) FROM %[1]s.%[4]s)`, a, b, cols, table)
		if err := e.pool.QueryRow(ctx, q).Scan(&n, &rows); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			out = append(out, fmt.Sprintf("%s: %d rows differ (of %d)", table, n, rows))
		}
		if rows == 0 {
			out = append(out, table+": empty, the test compares nothing")
		}
	}
	return out
}

// TestReplayMatchesLiveStoreAndSwitches builds the store live with the
// persister, replays the log into a fresh schema and compares every table;
// then switches the running persister over to the replayed schema and
// checks that new events land there.
func TestReplayMatchesLiveStoreAndSwitches(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sessions := sessionIDs(e.id, 24)
	n := writeLog(ctx, t, e, sessions, 80)

	cfg, err := LoadConfig(config.FromMap(map[string]string{
		"SEQFLOW_KAFKA_BROKERS": strings.Join(e.st.KafkaBrokers, ","), "SEQFLOW_PG_URL": e.st.PGURL,
		"SEQFLOW_TOPIC_PREFIX": e.prefix, "PERSISTER_GROUP": "per-" + e.id, "PERSISTER_SCHEMA": e.schema,
		"PERSISTER_ADMIN_ADDR": "127.0.0.1:0", "PERSISTER_BATCH_MAX": "700",
	}))
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	runErr := make(chan error, 1)
	go func() { runErr <- New(cfg, slog.New(slog.NewJSONHandler(os.Stderr, nil))).Run(rctx) }()
	defer func() {
		stop()
		<-runErr
	}()
	e.waitStoreEqualsLog(t, n, time.Minute)
	waitReceipts(ctx, t, e, e.schema, len(sessions))

	replayed := e.schema + "_r"
	t.Cleanup(func() { _, _ = e.pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+replayed+" CASCADE") })
	var last rebuild.Progress
	res, err := rebuild.Replay(ctx, rebuild.ReplayConfig{Brokers: e.st.KafkaBrokers, Topics: e.topics, Pool: e.pool,
		Schema: replayed, BatchMax: 1000, Progress: func(p rebuild.Progress) { last = p }})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("replayed %d records in %s (%.0f/s), last progress %+v", res.Records, res.Elapsed, float64(res.Records)/res.Elapsed.Seconds(), last)
	if res.Inserted != n || last.Records != res.Records {
		t.Fatalf("replay inserted %d rows (want %d), progress saw %d of %d records", res.Inserted, n, last.Records, res.Records)
	}
	if d := tableDiff(ctx, t, e, e.schema, replayed); len(d) > 0 {
		t.Fatalf("replayed store differs from the live one: %v", d)
	}
	if _, err := rebuild.Replay(ctx, rebuild.ReplayConfig{Brokers: e.st.KafkaBrokers, Topics: e.topics, Pool: e.pool, Schema: replayed}); err != rebuild.ErrNotFresh {
		t.Fatalf("replay into a used schema: %v, want ErrNotFresh", err)
	}

	// Switch the running persister over; new events go to the new schema.
	if err := store.Switch(ctx, e.pool, e.schema, replayed); err != nil {
		t.Fatal(err)
	}
	more := writeLog(ctx, t, e, []string{"after-switch-" + e.id}, 10)
	for {
		var inNew, inOld int
		_ = e.pool.QueryRow(ctx, "SELECT count(*) FROM "+replayed+".messages WHERE session_id = $1", "after-switch-"+e.id).Scan(&inNew)
		_ = e.pool.QueryRow(ctx, "SELECT count(*) FROM "+e.schema+".messages WHERE session_id = $1", "after-switch-"+e.id).Scan(&inOld)
		if inOld != 0 {
			t.Fatalf("%d events written to the old schema after the switch", inOld)
		}
		if inNew == more {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("events after the switch never reached the new schema (%d of %d)", inNew, more)
		case <-time.After(200 * time.Millisecond):
		}
	}
	l, err := rebuild.ReadLog(ctx, e.st.KafkaBrokers, e.topics.Sequenced, nil)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := rebuild.Compare(ctx, e.pool, replayed, l)
	if err != nil || !rep.Equal() || rep.LogEvents != n+more {
		t.Fatalf("switched store vs log: %+v %v", rep, err)
	}
}

// waitReceipts waits until every session's receipts are stored.
func waitReceipts(ctx context.Context, t *testing.T, e *env, schema string, want int) {
	t.Helper()
	for {
		var n int
		_ = e.pool.QueryRow(ctx, "SELECT count(*) FROM "+schema+".delivery_cursors").Scan(&n)
		if n >= want {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("receipts stored for %d of %d sessions", n, want)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
