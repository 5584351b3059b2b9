package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/config"
	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/store"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// TestPersisterKill9UnderLoad kills the persister with SIGKILL twice while
// uplinks flow through the real sequencer, with a pause between each
// database commit and its offset commit so the kills land mid-batch, and
// restarts it: in the end the store holds exactly the log.
func TestPersisterKill9UnderLoad(t *testing.T) {
	e := newEnv(t)
	e.startSequencer(t)
	per := e.startPersister(t, "PERSISTER_DEBUG_COMMIT_DELAY=150ms", "PERSISTER_BATCH_MAX=500")
	const n = 6000
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 2; i++ {
			time.Sleep(2 * time.Second)
			per.Kill()
			time.Sleep(500 * time.Millisecond)
			if err := per.Restart(); err != nil {
				t.Error(err)
			}
		}
	}()
	e.load(ctx, t, sessionIDs(e.id, 40), n, 1000)
	<-done
	rep := e.waitStoreEqualsLog(t, n, 90*time.Second)
	if rep.LogEvents != n || rep.StoreRows != n {
		t.Fatalf("log %d events, store %d rows, want %d each", rep.LogEvents, rep.StoreRows, n)
	}
	t.Logf("restarts that found the store ahead of the group's offsets (killed between the two commits): %d partitions", aheadOfGroup(t, per.Log))
}

// aheadOfGroup counts the partitions a persister resumed where its schema
// held more than its group had committed.
func aheadOfGroup(t *testing.T, logPath string) int {
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		var l struct {
			Msg    string `json:"msg"`
			Group  int64  `json:"group_offset"`
			Stored int64  `json:"stored_offset"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "resuming partition" && l.Group >= 0 && l.Stored > l.Group {
			n++
		}
	}
	return n
}

// TestPersisterPGRestartUnderLoad restarts PostgreSQL (fast shutdown) while
// uplinks flow: the persister recovers by itself and loses nothing.
func TestPersisterPGRestartUnderLoad(t *testing.T) {
	e := newEnv(t)
	e.startSequencer(t)
	per := e.startPersister(t, "PERSISTER_RETRY_MAX=1s")
	const n = 8000 // 8 s of load: it outlasts the pipeline's start and the restart
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Restart once the persister is writing, not at a fixed time: a
		// restart during the services' start would hit no write.
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			var rows int64
			if e.pool.QueryRow(ctx, "SELECT count(*) FROM "+e.schema+".messages").Scan(&rows) == nil && rows > 0 {
				break
			}
		}
		restartPostgres(t, e.st.Root)
	}()
	e.load(ctx, t, sessionIDs(e.id, 30), n, 1000)
	<-done
	rep := e.waitStoreEqualsLog(t, n, 90*time.Second)
	if rep.StoreRows != n {
		t.Fatalf("store %d rows, want %d", rep.StoreRows, n)
	}
	if !per.Running() {
		t.Fatal("persister exited instead of waiting out the restart")
	}
	if !per.LogContains("database write failed; retrying") {
		t.Fatal("no write failed: the restart did not hit the persister, so the test proved nothing")
	}
}

// TestPersisterDeadLettersAndDuplicates writes im.sequenced.v1 itself, with
// a transactional franz-go producer as the sequencer would (so it can put
// garbage, repeats and contradictions in the log), and receipts, and runs
// the persister in process: valid events are stored once, each poison
// record goes to the dead-letter topic with its origin, and the group's
// offsets reach the end of every partition.
func TestPersisterDeadLettersAndDuplicates(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// A constraint the store's own validation does not know: PostgreSQL
	// refuses the row, and the persister must find it in its batch.
	if _, err := e.pool.Exec(ctx, "ALTER TABLE "+e.schema+".messages ADD CONSTRAINT no_poison CHECK (client_msg_id <> 'poison')"); err != nil {
		t.Fatal(err)
	}
	s := "s-" + e.id
	ev := func(seq, id int64, cmid string) []byte {
		v, _ := proto.Marshal(&imv1.SequencedEvent{SessionId: s, Seq: seq, MsgId: id, ClientMsgId: cmid, SenderUserId: "alice",
			SenderDeviceId: "d", ServerTsMs: time.Now().UnixMilli(),
			Payload: &imv1.SequencedEvent_Message{Message: &imv1.MessageContent{Type: "text", Body: []byte(cmid)}}})
		return v
	}
	nul, _ := proto.Marshal(&imv1.SequencedEvent{SessionId: s, Seq: 6, MsgId: 600, ClientMsgId: "x", SenderUserId: "a\x00b",
		Payload: &imv1.SequencedEvent_Message{Message: &imv1.MessageContent{Type: "text"}}})
	read, _ := proto.Marshal(&imv1.ReadReceipt{SessionId: s, UserId: "bob", ReadSeq: 2})
	deliv, _ := proto.Marshal(&imv1.DeliveryReceipt{SessionId: s, UserId: "bob", DeviceId: "phone", DeliveredSeq: 4})
	seqRec := func(v []byte) *kgo.Record {
		return &kgo.Record{Topic: e.topics.Sequenced, Partition: 1, Key: []byte(s), Value: v,
			Headers: eventlog.Headers("message", "seqflow.im.v1.SequencedEvent", "test", "")}
	}
	rcpt := func(typ string, v []byte) *kgo.Record {
		return &kgo.Record{Topic: e.topics.Receipts, Partition: 1, Key: []byte(s), Value: v,
			Headers: eventlog.Headers(typ, "seqflow.im.v1.Receipt", "test", "")}
	}
	records := []*kgo.Record{
		seqRec(ev(1, 100, "a")),
		seqRec([]byte("\xff\xfe not protobuf")), // undecodable
		seqRec(ev(2, 200, "b")),
		seqRec(ev(2, 200, "b")),      // exact repeat: a no-op
		seqRec(ev(2, 201, "b2")),     // same seq, other message: conflict
		seqRec(ev(3, 300, "poison")), // refused by PostgreSQL
		seqRec(nul),                  // text PostgreSQL cannot hold
		seqRec(ev(4, 400, "d")),
		rcpt("read_receipt", read),
		rcpt("delivery_receipt", deliv),
		rcpt("mystery_receipt", read), // unknown type
	}
	tx, err := kgo.NewClient(append(eventlog.ClientOpts(e.st.KafkaBrokers, "persister-test-txn"),
		kgo.TransactionalID("persister-test-"+e.id), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	if err := tx.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := tx.ProduceSync(ctx, records...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := tx.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
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

	// The group's offsets reach the end of both topics' partition 1.
	adm := kadm.NewClient(e.cl)
	for {
		offs, err := adm.FetchOffsets(ctx, "per-"+e.id)
		if err == nil {
			a, _ := offs.Lookup(e.topics.Sequenced, 1)
			b, _ := offs.Lookup(e.topics.Receipts, 1)
			// One past each topic's last record (its commit marker follows).
			if a.At >= int64(len(records)-3) && b.At >= 3 {
				break
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("group offsets never reached the end: %v %v", offs, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	stop()
	if err := <-runErr; err != context.Canceled {
		t.Fatalf("Run returned %v, want context.Canceled", err)
	}

	st, err := store.Open(ctx, e.pool, e.schema)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := st.MessagesAfter(ctx, s, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range msgs {
		got = append(got, string(m.Body))
	}
	if strings.Join(got, ",") != "a,b,d" {
		t.Fatalf("stored bodies %v, want a,b,d", got)
	}
	state, ok, err := st.Session(ctx, s, "bob")
	if err != nil || !ok {
		t.Fatalf("session: %v %v", ok, err)
	}
	if state.ReadSeq != 2 || state.MaxSeq != 4 {
		t.Fatalf("session state %+v, want read seq 2, max seq 4", state)
	}
	var delivered int64
	if err := e.pool.QueryRow(ctx, "SELECT delivered_seq FROM "+e.schema+".delivery_cursors WHERE session_id = $1", s).Scan(&delivered); err != nil || delivered != 4 {
		t.Fatalf("delivered seq %d (%v), want 4", delivered, err)
	}

	// The dead letters: which offsets, with which code.
	want := map[string]imv1.ErrorCode{
		"sequenced/1": imv1.ErrorCode_ERROR_CODE_UNDECODABLE, "sequenced/4": imv1.ErrorCode_ERROR_CODE_CONSTRAINT,
		"sequenced/5": imv1.ErrorCode_ERROR_CODE_CONSTRAINT, "sequenced/6": imv1.ErrorCode_ERROR_CODE_UNDECODABLE,
		"receipts/2": imv1.ErrorCode_ERROR_CODE_UNDECODABLE,
	}
	got2 := readDeadLetters(ctx, t, e, len(want))
	for k, code := range want {
		dl, ok := got2[k]
		if !ok {
			t.Errorf("no dead letter for %s (have %v)", k, keys(got2))
			continue
		}
		if dl.Code != code || dl.Service != "persister" || dl.OriginalPartition != 1 || dl.Reason == "" {
			t.Errorf("dead letter for %s: %v", k, dl)
		}
		t.Logf("%s: %s %s", k, dl.Code, dl.Reason)
	}
	if len(got2) != len(want) {
		t.Errorf("%d dead letters, want %d: %v", len(got2), len(want), keys(got2))
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func readDeadLetters(ctx context.Context, t *testing.T, e *env, n int) map[string]*imv1.DeadLetter {
	t.Helper()
	cl, err := kgo.NewClient(append(eventlog.ClientOpts(e.st.KafkaBrokers, "persister-test-dl"),
		kgo.ConsumeTopics(e.topics.DeadLetter), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	out := map[string]*imv1.DeadLetter{}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for len(out) < n+1 && rctx.Err() == nil {
		cl.PollFetches(rctx).EachRecord(func(r *kgo.Record) {
			var dl imv1.DeadLetter
			if err := proto.Unmarshal(r.Value, &dl); err != nil {
				t.Errorf("dead letter does not decode: %v", err)
				return
			}
			src := "sequenced"
			if dl.OriginalTopic == e.topics.Receipts {
				src = "receipts"
			}
			out[src+"/"+strconv.FormatInt(dl.OriginalOffset, 10)] = &dl
		})
		if len(out) >= n {
			break
		}
	}
	return out
}

func TestLoadConfig(t *testing.T) {
	base := map[string]string{"SEQFLOW_KAFKA_BROKERS": "127.0.0.1:1", "SEQFLOW_PG_URL": "postgres://x"}
	for _, c := range []struct {
		name, key, value, wantErr string
	}{
		{"defaults", "", "", ""},
		{"no brokers", "SEQFLOW_KAFKA_BROKERS", " ", "SEQFLOW_KAFKA_BROKERS is required"},
		{"batch too big", "PERSISTER_BATCH_MAX", "1000000", "PERSISTER_BATCH_MAX"},
		{"batch not a number", "PERSISTER_BATCH_MAX", "lots", "PERSISTER_BATCH_MAX"},
		{"bad wait", "PERSISTER_BATCH_WAIT", "soon", "PERSISTER_BATCH_WAIT"},
		{"no writers", "PERSISTER_WRITERS", "0", "PERSISTER_WRITERS"},
		{"bad schema", "PERSISTER_SCHEMA", "Robert'); DROP", "PERSISTER_SCHEMA"},
		{"retry bounds crossed", "PERSISTER_RETRY_MIN", "10s", "PERSISTER_RETRY_MIN 10s is above"},
		{"bad bool", "PERSISTER_MIGRATE", "perhaps", "PERSISTER_MIGRATE"},
		{"bad debug bool", "PERSISTER_KAFKA_DEBUG", "verbose", "PERSISTER_KAFKA_DEBUG"},
		{"unknown codec", "SEQFLOW_KAFKA_COMPRESSION", "gzip", `SEQFLOW_KAFKA_COMPRESSION="gzip": want one of snappy, lz4, zstd, none`},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := map[string]string{}
			for k, v := range base {
				m[k] = v
			}
			if c.key != "" {
				m[c.key] = c.value
			}
			cfg, err := LoadConfig(config.FromMap(m))
			if c.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if cfg.Group != "seqflow-persister" || cfg.Schema != "public" || cfg.AdminAddr != "127.0.0.1:9102" || cfg.BatchMax != 5000 || !cfg.Migrate {
					t.Fatalf("defaults: %+v", cfg)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("error %v, want one mentioning %q", err, c.wantErr)
			}
		})
	}
	t.Run("empty admin address disables it", func(t *testing.T) {
		cfg, err := LoadConfig(config.FromMap(map[string]string{"SEQFLOW_KAFKA_BROKERS": "127.0.0.1:1", "SEQFLOW_PG_URL": "postgres://x", "PERSISTER_ADMIN_ADDR": ""}))
		if err != nil || cfg.AdminAddr != "" {
			t.Fatalf("admin address %q (err %v), want none", cfg.AdminAddr, err)
		}
	})
}

// FuzzDecode feeds arbitrary record values (outside input: anything can
// write a topic) to the decoder: it must never panic, and whatever it
// accepts must be storable text.
func FuzzDecode(f *testing.F) {
	v, _ := proto.Marshal(&imv1.SequencedEvent{SessionId: "s", Seq: 1, MsgId: 1, SenderUserId: "u",
		Payload: &imv1.SequencedEvent_Message{Message: &imv1.MessageContent{Type: "text", Body: []byte("hi")}}})
	f.Add(v, false, "message")
	r, _ := proto.Marshal(&imv1.ReadReceipt{SessionId: "s", UserId: "u", ReadSeq: 3})
	f.Add(r, true, "read_receipt")
	f.Add([]byte{0xff, 0x01}, false, "")
	topics := eventlog.Names("")
	f.Fuzz(func(t *testing.T, value []byte, receipts bool, typ string) {
		topic := topics.Sequenced
		if receipts {
			topic = topics.Receipts
		}
		e := decode(&kgo.Record{Topic: topic, Value: value, Headers: []kgo.RecordHeader{{Key: "seqflow-event-type", Value: []byte(typ)}}}, topics)
		if e.bad != nil {
			if e.bad.Reason == "" {
				t.Fatal("dead letter without a reason")
			}
			return
		}
		if row := e.item.Row; row != nil {
			if row.SessionID == "" || row.Seq <= 0 || strings.ContainsRune(row.SenderUserID, 0) {
				t.Fatalf("accepted an unstorable row %+v", row)
			}
		}
	})
}
