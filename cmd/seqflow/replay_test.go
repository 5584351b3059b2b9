package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/migrate"
	"github.com/seqflow/seqflow/internal/rebuild"
	"github.com/seqflow/seqflow/internal/replay"
	"github.com/seqflow/seqflow/internal/store"
	"github.com/seqflow/seqflow/internal/testkit/proc"
	"github.com/seqflow/seqflow/internal/testkit/stack"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// rebuildEnv is a fresh topic prefix and a home schema for a persister.
type rebuildEnv struct {
	st     stack.Stack
	id     string
	prefix string
	topics eventlog.Topics
	home   string
	pool   *pgxpool.Pool
	tx     *kgo.Client // transactional, manual partitions
	idBase int64
}

func newRebuildEnv(t *testing.T) *rebuildEnv {
	t.Helper()
	st := stack.Require(t, "kafka", "pg")
	id := strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	e := &rebuildEnv{st: st, id: id, prefix: "t-" + id + ".", home: "rt_" + id, idBase: time.Now().UnixNano() >> 12 << 20}
	e.topics = eventlog.Names(e.prefix)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(append(eventlog.ClientOpts(st.KafkaBrokers, "replay-rebuild-test"),
		kgo.TransactionalID("replay-rebuild-test-"+id), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	e.tx = cl
	adm := kadm.NewClient(cl)
	if err := eventlog.EnsureTopics(ctx, adm, eventlog.Specs(e.topics, 4), 0); err != nil {
		t.Fatal(err)
	}
	if e.pool, err = store.NewPool(ctx, st.PGURL, 4); err != nil {
		t.Fatal(err)
	}
	if _, err := migrate.Up(ctx, e.pool, e.home); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		rows, err := e.pool.Query(ctx, `SELECT nspname FROM pg_namespace WHERE nspname LIKE $1`, "rt_"+id+"%")
		if err == nil {
			var schemas []string
			for rows.Next() {
				var s string
				if rows.Scan(&s) == nil {
					schemas = append(schemas, s)
				}
			}
			rows.Close()
			for _, s := range schemas {
				_, _ = e.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+s+" CASCADE")
			}
		}
		e.pool.Close()
		if all, err := adm.ListTopics(ctx); err == nil {
			var mine []string
			for _, n := range all.Names() {
				if strings.HasPrefix(n, e.prefix) {
					mine = append(mine, n)
				}
			}
			_, _ = adm.DeleteTopics(ctx, mine...)
		}
		cl.Close()
	})
	return e
}

// writeLog writes perSession events of every kind per session (session
// creates, membership changes, edits, recalls, messages) and receipts, in
// transactions, the way the sequencer and the gateway would. It returns
// the number of sequenced events.
func (e *rebuildEnv) writeLog(ctx context.Context, t *testing.T, sessions []string, perSession int) int {
	t.Helper()
	var recs []*kgo.Record
	part := func(s string) int32 {
		h := fnv.New32a()
		h.Write([]byte(s))
		return int32(h.Sum32() % 4)
	}
	add := func(topic, typ, s string, m proto.Message) {
		v, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, &kgo.Record{Topic: topic, Partition: part(s), Key: []byte(s), Value: v,
			Headers: eventlog.Headers(typ, string(m.ProtoReflect().Descriptor().FullName()), "test", "")})
	}
	users := []string{"alice", "bob", "carol"}
	n := 0
	for si, s := range sessions {
		for seq := int64(1); seq <= int64(perSession); seq++ {
			e.idBase++
			ev := &imv1.SequencedEvent{SessionId: s, Seq: seq * 2, MsgId: e.idBase, ClientMsgId: fmt.Sprintf("c%d", seq),
				SenderUserId: users[seq%3], SenderDeviceId: "d", ServerTsMs: time.Now().UnixMilli()}
			switch {
			case seq == 1:
				ev.Payload = &imv1.SequencedEvent_SessionCreate{SessionCreate: &imv1.SessionCreate{Kind: imv1.SessionKind_SESSION_KIND_GROUP, Title: "room " + s, MemberUserIds: users[1:]}}
			case seq%13 == 0:
				ev.Payload = &imv1.SequencedEvent_Membership{Membership: &imv1.MembershipChange{Op: imv1.MembershipChange_OP_ADD, UserIds: []string{"dave"}}}
			case seq%7 == 0:
				ev.SenderUserId = users[(seq-3)%3]
				ev.Payload = &imv1.SequencedEvent_Edit{Edit: &imv1.Edit{TargetSeq: (seq - 3) * 2, Content: &imv1.MessageContent{Type: "text", Body: []byte(fmt.Sprintf("edited %d", seq-3))}}}
			case seq%11 == 0:
				ev.SenderUserId = users[(seq-1)%3]
				ev.Payload = &imv1.SequencedEvent_Recall{Recall: &imv1.Recall{TargetSeq: (seq - 1) * 2}}
			default:
				ev.Payload = &imv1.SequencedEvent_Message{Message: &imv1.MessageContent{Type: "text", Body: []byte(fmt.Sprintf("message %d of %s (%d)", seq, s, si))}}
			}
			add(e.topics.Sequenced, "message", s, ev)
			n++
			if seq%5 == 0 {
				add(e.topics.Receipts, "read_receipt", s, &imv1.ReadReceipt{SessionId: s, UserId: "bob", DeviceId: "p", ReadSeq: seq * 2})
				add(e.topics.Receipts, "delivery_receipt", s, &imv1.DeliveryReceipt{SessionId: s, UserId: "bob", DeviceId: "p", DeliveredSeq: seq * 2})
			}
		}
	}
	for i := 0; len(recs) > 0; i++ {
		chunk := recs[:min(len(recs), 300)]
		recs = recs[len(chunk):]
		if err := e.tx.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := e.tx.ProduceSync(ctx, chunk...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := e.tx.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// waitStored waits until schema holds exactly the log's events (and at
// least want of them) and a delivery cursor per session.
func (e *rebuildEnv) waitStored(ctx context.Context, t *testing.T, schema string, want, sessions int) {
	t.Helper()
	for {
		var rep *rebuild.Report
		l, err := rebuild.ReadLog(ctx, e.st.KafkaBrokers, e.topics.Sequenced, nil)
		if err == nil {
			rep, err = rebuild.Compare(ctx, e.pool, schema, l)
		}
		var cursors int
		_ = e.pool.QueryRow(ctx, "SELECT count(*) FROM "+schema+".delivery_cursors").Scan(&cursors)
		if err == nil && rep.Equal() && rep.LogEvents >= want && cursors >= sessions {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the store never held the log: %+v, %v", rep, err)
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// replayStoreTables are compared whole between the live and the rebuilt
// store (the cursors without their update times).
var replayStoreTables = map[string]string{
	"messages":         "*",
	"message_ids":      "*",
	"sessions":         "*",
	"session_members":  "*",
	"read_cursors":     "session_id, user_id, read_seq",
	"delivery_cursors": "session_id, user_id, device_id, delivered_seq",
}

func (e *rebuildEnv) tableDiff(ctx context.Context, t *testing.T, a, b string) []string {
	t.Helper()
	var out []string
	for table, cols := range replayStoreTables {
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

func (e *rebuildEnv) replayTopic(ctx context.Context, t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	if args[0] == "create" || args[0] == "resume" {
		args = append(args, "-nice", "0") // in the test's own process: keep its priority
	}
	err := replayTopicCmd(ctx, append(args, "-brokers", strings.Join(e.st.KafkaBrokers, ","), "-topic-prefix", e.prefix), &out, &errOut)
	return out.String() + errOut.String(), err
}

// TestReplayFromReplayTopicMatchesLiveStoreAndSwitches builds the store
// live with a persister process, copies the whole log into a replay topic
// and rebuilds the store from that topic with `seqflow replay
// -from-replay-topic -switch`: the rebuilt store must equal the live one
// table by table (and the log, which the command checks itself), and the
// running persister must move over to it and write new events there
// only. A filtered replay is refused as a rebuild source; list, describe
// and delete show and remove the replays.
func TestReplayFromReplayTopicMatchesLiveStoreAndSwitches(t *testing.T) {
	e := newRebuildEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sessions := make([]string, 16)
	for i := range sessions {
		sessions[i] = fmt.Sprintf("s-%s-%d", e.id, i)
	}
	n := e.writeLog(ctx, t, sessions, 60)
	proc.Start(t, "persister", proc.Build(t, "./persister"),
		"SEQFLOW_KAFKA_BROKERS="+strings.Join(e.st.KafkaBrokers, ","), "SEQFLOW_PG_URL="+e.st.PGURL, "SEQFLOW_TOPIC_PREFIX="+e.prefix,
		"PERSISTER_GROUP=per-"+e.id, "PERSISTER_INSTANCE_ID=per-"+e.id, "PERSISTER_SCHEMA="+e.home, "PERSISTER_ADMIN_ADDR=127.0.0.1:0")
	e.waitStored(ctx, t, e.home, n, len(sessions))

	if out, err := e.replayTopic(ctx, t, "create", "full", "-rate", "0"); err != nil || !strings.Contains(out, "replay full complete: "+fmt.Sprint(n)+" events") {
		t.Fatalf("create full: %v\n%s", err, out)
	}
	if out, err := e.replayTopic(ctx, t, "create", "part", "-sessions", sessions[0], "-quiet"); err != nil {
		t.Fatalf("create part: %v\n%s", err, out)
	}

	rebuilt := e.home + "_r"
	args := []string{"-schema", rebuilt, "-home", e.home, "-topic-prefix", e.prefix, "-quiet"}
	if err := runReplay(ctx, append(args, "-from-replay-topic", "part")); err == nil || !strings.Contains(err.Error(), "part of the log") {
		t.Fatalf("rebuild from a filtered replay: %v, want it refused", err)
	}
	if err := runReplay(ctx, append(args, "-from-replay-topic", "full", "-switch")); err != nil {
		t.Fatalf("rebuild from the replay topic: %v", err)
	}
	if d := e.tableDiff(ctx, t, e.home, rebuilt); len(d) > 0 {
		t.Fatalf("the store rebuilt from the replay topic differs from the live one: %v", d)
	}

	// The running persister moved over: new events land in the rebuilt schema only.
	after := []string{"after-" + e.id}
	more := e.writeLog(ctx, t, after, 12)
	for {
		var inNew, inOld int
		_ = e.pool.QueryRow(ctx, "SELECT count(*) FROM "+rebuilt+".messages WHERE session_id = $1", after[0]).Scan(&inNew)
		_ = e.pool.QueryRow(ctx, "SELECT count(*) FROM "+e.home+".messages WHERE session_id = $1", after[0]).Scan(&inOld)
		if inOld != 0 {
			t.Fatalf("%d events written to the old schema after the switch", inOld)
		}
		if inNew == more {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("events after the switch never reached the rebuilt schema (%d of %d)", inNew, more)
		case <-time.After(200 * time.Millisecond):
		}
	}
	e.waitStored(ctx, t, rebuilt, n+more, len(sessions)+1)

	out, err := e.replayTopic(ctx, t, "list")
	if err != nil || !strings.Contains(out, "full") || !strings.Contains(out, "part") || strings.Count(out, " done ") != 2 {
		t.Fatalf("list: %v\n%s", err, out)
	}
	out, err = e.replayTopic(ctx, t, "describe", "full", "-json")
	var ri replayInfo
	if err != nil || json.Unmarshal([]byte(out), &ri) != nil || !ri.Done || ri.Events != int64(n) || len(ri.PerPartition) != 4 || ri.Retention != "168h0m0s after the copy" {
		t.Fatalf("describe -json: %v\n%s", err, out)
	}
	if out, err = e.replayTopic(ctx, t, "describe", "part"); err != nil || !strings.Contains(out, "sessions "+sessions[0]) || !strings.Contains(out, "PARTITION") {
		t.Fatalf("describe: %v\n%s", err, out)
	}
	if out, err = e.replayTopic(ctx, t, "delete", "part"); err != nil {
		t.Fatalf("delete: %v\n%s", err, out)
	}
	if out, err = e.replayTopic(ctx, t, "describe", "part"); err == nil || !strings.Contains(err.Error(), replay.ErrNotFound.Error()) {
		t.Fatalf("describe after delete: %v\n%s", err, out)
	}
	if out, err = e.replayTopic(ctx, t, "list"); err != nil || strings.Contains(out, "part") {
		t.Fatalf("list after delete: %v\n%s", err, out)
	}
}
