package export

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seqflow/seqflow/internal/config"
	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/testkit/logcheck"
	"github.com/seqflow/seqflow/internal/testkit/proc"
	"github.com/seqflow/seqflow/internal/testkit/stack"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// TestExportSurvivesKill9 runs `seqflow export` as a real process on a log
// of 24,000 events over three hours, kills it -9 twice — once while it
// writes a file, once between a file's commit and the offset commit —
// restarts it with -until-end, and then queries the files with DuckDB: per
// session the count, the seq range and the message IDs in seq order must
// be those of the log, each (partition, offset) once, every row under the
// date and hour of its server_ts_ms.
//
// "dir" exports to a local directory. "s3" exports to an S3-compatible
// server named by SEQFLOW_TEST_S3_ENDPOINT and SEQFLOW_TEST_S3_BUCKET
// (an existing bucket; credentials from AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY) and is skipped without them: the local stack has
// no S3 server. docs/export.md says against which server it was run.
func TestExportSurvivesKill9(t *testing.T) {
	t.Run("dir", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "export")
		testKill9(t, target{
			args:  []string{"-dir", dir},
			store: &Dir{Root: dir},
			temps: func() []string { m, _ := filepath.Glob(filepath.Join(dir, tmpDir, "*")); return m },
			local: func(*testing.T) string { return dir },
		})
	})
	t.Run("s3", func(t *testing.T) {
		endpoint, bucket := os.Getenv("SEQFLOW_TEST_S3_ENDPOINT"), os.Getenv("SEQFLOW_TEST_S3_BUCKET")
		if endpoint == "" || bucket == "" {
			t.Skip("no S3-compatible server: set SEQFLOW_TEST_S3_ENDPOINT and SEQFLOW_TEST_S3_BUCKET (and AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)")
		}
		url := "s3://" + bucket + "/kill9-" + uuid.NewString()[:8]
		spool := t.TempDir()
		s, err := NewS3(context.Background(), S3Config{URL: url, Endpoint: endpoint, PathStyle: true, SpoolDir: spool})
		if err != nil {
			t.Fatal(err)
		}
		testKill9(t, target{
			args:  []string{"-s3", url, "-s3-endpoint", endpoint, "-spool-dir", spool},
			store: s,
			temps: func() []string { m, _ := filepath.Glob(filepath.Join(spool, "*")); return m },
			local: func(t *testing.T) string { return download(t, s) },
		})
	})
}

// target is where a kill test exports to.
type target struct {
	args  []string                  // the destination flags of seqflow export
	store Store                     // to list the visible files
	temps func() []string           // the unfinished uploads
	local func(t *testing.T) string // a local directory with the visible files, for DuckDB
}

func testKill9(t *testing.T, to target) {
	st := stack.Require(t, "kafka")
	py := duckdbPython(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	prefix := "export-" + uuid.NewString()[:8] + "."
	topics := eventlog.Names(prefix)
	adm := newAdmin(t, st.KafkaBrokers)
	if err := eventlog.EnsureTopics(ctx, adm, eventlog.Specs(topics, 4), 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		adm.DeleteTopics(context.Background(), topics.Uplink, topics.Sequenced, topics.Duplicates, topics.Receipts, topics.Offline, topics.DeadLetter) //nolint:errcheck
	})
	const sessions, perSession = 60, 400
	// In the past: the broker refuses timestamps more than an hour ahead.
	start := time.Now().UTC().Add(-4 * time.Hour).Truncate(time.Hour).Add(40 * time.Minute)
	produceLog(ctx, t, st.KafkaBrokers, topics.Sequenced, start, sessions, perSession)

	bin := proc.Build(t, "./cmd/seqflow")
	run := func(name string, extra ...string) *proc.Proc {
		t.Helper()
		args := append([]string{"export", "-topic-prefix", prefix, "-group", prefix + "export", "-max-rows", "1000", "-session-timeout", "6s", "-v"}, to.args...)
		p := &proc.Proc{Name: name, Bin: bin, Log: filepath.Join(t.TempDir(), name+".log"),
			Env:  []string{"SEQFLOW_KAFKA_BROKERS=" + strings.Join(st.KafkaBrokers, ",")},
			Args: append(args, extra...)}
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			p.Kill()
			if t.Failed() {
				b, _ := os.ReadFile(p.Log)
				t.Logf("--- log of %s (last 3000 bytes) ---\n%s", name, tail(b, 3000))
			}
		})
		return p
	}
	visible := func() []string {
		var names []string
		if err := to.store.List(ctx, func(n string) error { names = append(names, n); return nil }); err != nil {
			t.Fatal(err)
		}
		return names
	}
	temps := to.temps
	waitFor := func(what string, p *proc.Proc, cond func() bool) {
		t.Helper()
		for !cond() {
			if !p.Running() {
				t.Fatalf("%s exited (%v) before %s", p.Name, p.Err(), what)
			}
			if ctx.Err() != nil {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	// 1: kill -9 while a file is being written. Slowed down so that it is.
	p1 := run("export-1", "-debug-row-delay", "100us")
	waitFor("4 files and one being written", p1, func() bool { return len(visible()) >= 4 && len(temps()) > 0 })
	p1.Kill()
	left := temps()
	t.Logf("killed export-1 with %d files visible, %d unfinished", len(visible()), len(left))
	if len(left) == 0 {
		t.Fatalf("no unfinished file at the kill: the test did not kill mid-file")
	}

	// 2: kill -9 after files were renamed, before their offsets were committed.
	before := len(visible())
	p2 := run("export-2", "-debug-commit-delay", "5s")
	waitFor("files committed and the offset commit pending", p2, func() bool {
		return p2.LogContains("offset commit delayed") && len(visible()) > before
	})
	p2.Kill()
	committed := groupOffsets(ctx, t, adm, prefix+"export", topics.Sequenced)
	ahead := ProgressOf(visible()).Next
	behind := false
	for part, next := range ahead {
		behind = behind || committed[part] < next
	}
	t.Logf("killed export-2: files end at %v, group committed %v", ahead, committed)
	if !behind {
		t.Fatalf("the group's offsets are not behind the files: the kill missed the window it tests")
	}

	// 3: run to the end of the log.
	p3 := run("export-3", "-until-end")
	if !p3.Wait(2 * time.Minute) {
		t.Fatal("export -until-end did not finish in 2 minutes")
	}
	if err := p3.Err(); err != nil {
		t.Fatalf("export -until-end: %v", err)
	}
	if got := temps(); len(got) != 0 {
		t.Errorf("unfinished files left after a clean run: %v", got)
	}
	prog := ProgressOf(visible())
	if len(prog.Overlaps) > 0 {
		t.Errorf("files with overlapping offset ranges: %v", prog.Overlaps)
	}

	// The log, read back by the audit reader, against DuckDB's view of the files.
	l, err := logcheck.Read(ctx, st.KafkaBrokers, topics)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]*sessionSummary{}
	for _, ev := range l.Events {
		s := want[ev.SessionID]
		if s == nil {
			s = &sessionSummary{MinSeq: ev.Seq, MaxSeq: ev.Seq}
			want[ev.SessionID] = s
		}
		s.Count++
		s.MinSeq, s.MaxSeq = min(s.MinSeq, ev.Seq), max(s.MaxSeq, ev.Seq)
		s.MsgIDs = append(s.MsgIDs, ev.MsgID) // log order is seq order within a session
	}
	if len(l.Events) != sessions*perSession || len(want) != sessions {
		t.Fatalf("the log holds %d events of %d sessions, want %d of %d", len(l.Events), len(want), sessions*perSession, sessions)
	}
	got := queryDuckDB(t, py, to.local(t))
	t.Logf("DuckDB: %d rows in %d files, %d distinct (partition, offset), %d under the wrong date or hour, types %v",
		got.Rows, prog.Files, got.DistinctOffsets, got.WrongHour, got.Types)
	if got.Rows != int64(len(l.Events)) || got.DistinctOffsets != got.Rows {
		t.Errorf("DuckDB reads %d rows, %d distinct (partition, offset); the log has %d events", got.Rows, got.DistinctOffsets, len(l.Events))
	}
	if got.WrongHour != 0 {
		t.Errorf("%d rows are not under the date and hour of their server_ts_ms", got.WrongHour)
	}
	if got.Hours < 3 {
		t.Errorf("rows under %d date/hour directories, want the log's 3 hours or more", got.Hours)
	}
	for id, w := range want {
		g := got.Sessions[id]
		if g == nil {
			t.Errorf("session %s: missing from the export", id)
			continue
		}
		if g.Count != w.Count || g.MinSeq != w.MinSeq || g.MaxSeq != w.MaxSeq || !slices.Equal(g.MsgIDs, w.MsgIDs) {
			t.Errorf("session %s: export has %d events, seq %d..%d; the log %d, seq %d..%d (message IDs equal: %v)",
				id, g.Count, g.MinSeq, g.MaxSeq, w.Count, w.MinSeq, w.MaxSeq, slices.Equal(g.MsgIDs, w.MsgIDs))
		}
	}
	for id := range got.Sessions {
		if want[id] == nil {
			t.Errorf("session %s is in the export, not in the log (an aborted transaction?)", id)
		}
	}
	if got.BadText != 0 {
		t.Errorf("%d rows have body_text that is not their body, or a binary body with body_text", got.BadText)
	}
}

type sessionSummary struct {
	Count          int64   `json:"count"`
	MinSeq, MaxSeq int64   `json:"-"`
	MsgIDs         []int64 `json:"msg_ids"`
}

// duckdbResult is what duckdbQuery prints.
type duckdbResult struct {
	Rows            int64            `json:"rows"`
	DistinctOffsets int64            `json:"distinct_offsets"`
	WrongHour       int64            `json:"wrong_hour"`
	Hours           int64            `json:"hours"`
	BadText         int64            `json:"bad_text"`
	Types           map[string]int64 `json:"types"`
	Sessions        map[string]*struct {
		Count  int64   `json:"count"`
		MinSeq int64   `json:"min_seq"`
		MaxSeq int64   `json:"max_seq"`
		MsgIDs []int64 `json:"msg_ids"`
	} `json:"sessions"`
}

// duckdbQuery reads every file of the export (argv[1]) the way an analyst
// would, with hive partitioning, and prints the checks as JSON.
const duckdbQuery = `
import duckdb, json, sys
con = duckdb.connect()
glob = (sys.argv[1] + "/**/*.parquet").replace("'", "''")
con.execute(f"create view ev as select * from read_parquet('{glob}', hive_partitioning = true)")
one = lambda q: con.execute(q).fetchone()[0]
out = {
    "rows": one("select count(*) from ev"),
    "distinct_offsets": one("select count(distinct (kafka_partition, kafka_offset)) from ev"),
    "wrong_hour": one("""select count(*) from ev where date <> date '1970-01-01' + cast(server_ts_ms // 86400000 as integer)
                         or hour <> (server_ts_ms // 3600000) % 24"""),
    "hours": one("select count(distinct (date, hour)) from ev"),
    "bad_text": one("""select count(*) from ev where (body_text is not null and encode(body_text) <> body)
                       or (content_type = 'image' and body_text is not null)"""),
    "types": dict(con.execute("select event_type, count(*) from ev group by all").fetchall()),
    "sessions": {s: {"count": n, "min_seq": lo, "max_seq": hi, "msg_ids": ids} for s, n, lo, hi, ids in con.execute(
        "select session_id, count(*), min(seq), max(seq), list(msg_id order by seq) from ev group by session_id").fetchall()},
}
json.dump(out, sys.stdout)
`

func queryDuckDB(t *testing.T, py, dir string) duckdbResult {
	t.Helper()
	script := filepath.Join(t.TempDir(), "query.py")
	if err := os.WriteFile(script, []byte(duckdbQuery), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(py, script, dir).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("duckdb query: %v\n%s", err, stderr)
	}
	var r duckdbResult
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("duckdb output: %v\n%s", err, tail(out, 2000))
	}
	return r
}

// duckdbPython finds the Python with DuckDB that infra/local/install-duckdb.sh
// installs (or SEQFLOW_DUCKDB_PYTHON). Without it the test is skipped,
// except under the test task (SEQFLOW_REQUIRE_STACK=1), which runs the
// script (idempotent, seconds) and fails if that does not help.
func duckdbPython(t *testing.T) string {
	t.Helper()
	py := os.Getenv("SEQFLOW_DUCKDB_PYTHON")
	if py == "" {
		py = filepath.Join(config.RepoRoot(), ".data", "duckdb", "venv", "bin", "python")
	}
	err := exec.Command(py, "-c", "import duckdb").Run()
	if err != nil && os.Getenv("SEQFLOW_REQUIRE_STACK") == "1" && os.Getenv("SEQFLOW_DUCKDB_PYTHON") == "" {
		out, ierr := exec.Command("bash", filepath.Join(config.RepoRoot(), "infra", "local", "install-duckdb.sh")).CombinedOutput()
		t.Logf("DuckDB was not installed; install-duckdb.sh: %v\n%s", ierr, tail(out, 2000))
		err = exec.Command(py, "-c", "import duckdb").Run()
	}
	if err != nil {
		msg := fmt.Sprintf("no Python with DuckDB at %s (%v): run infra/local/install-duckdb.sh", py, err)
		if os.Getenv("SEQFLOW_REQUIRE_STACK") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return py
}

// produceLog writes sessions × perSession sequenced events, in Kafka
// transactions, with server_ts_ms from start over three hours; plus one
// aborted transaction, which no reader may see.
func produceLog(ctx context.Context, t *testing.T, brokers []string, topic string, start time.Time, sessions, perSession int) {
	t.Helper()
	cl, err := kgo.NewClient(append(append(eventlog.ClientOpts(brokers, "export-test"), eventlog.ProducerOpts()...),
		kgo.TransactionalID("export-test-"+uuid.NewString()), kgo.DefaultProduceTopic(topic))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	total := sessions * perSession
	step := (3 * time.Hour).Milliseconds() / int64(total)
	msgID := int64(1 << 40)
	txn := func(recs []*kgo.Record, commit kgo.TransactionEndTry) {
		t.Helper()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := cl.EndTransaction(ctx, commit); err != nil {
			t.Fatal(err)
		}
	}
	var batch []*kgo.Record
	for i := range total {
		s, seq := i%sessions, int64(i/sessions+1)
		ev := &imv1.SequencedEvent{SessionId: fmt.Sprintf("session-%03d", s), Seq: seq * 2, MsgId: msgID,
			ClientMsgId: fmt.Sprintf("c-%d-%d", s, seq), SenderUserId: fmt.Sprintf("user-%d", seq%5), SenderDeviceId: "d1",
			GatewayId: "gw-1", ServerTsMs: start.UnixMilli() + int64(i)*step, GatewayTsMs: start.UnixMilli() + int64(i)*step - 3}
		msgID += 1 + int64(i%3)
		switch {
		case seq == 1:
			ev.Payload = &imv1.SequencedEvent_SessionCreate{SessionCreate: &imv1.SessionCreate{Kind: imv1.SessionKind_SESSION_KIND_GROUP, Title: "room", MemberUserIds: []string{"user-1", "user-2"}}}
		case seq%50 == 0:
			ev.Payload = &imv1.SequencedEvent_Membership{Membership: &imv1.MembershipChange{Op: imv1.MembershipChange_OP_ADD, UserIds: []string{"user-9"}}}
		case seq%23 == 0:
			ev.Payload = &imv1.SequencedEvent_Edit{Edit: &imv1.Edit{TargetSeq: seq*2 - 2, Content: &imv1.MessageContent{Type: "text", Body: []byte("edited ✓")}}}
		case seq%29 == 0:
			ev.Payload = &imv1.SequencedEvent_Recall{Recall: &imv1.Recall{TargetSeq: seq*2 - 2}}
		case seq%7 == 0:
			ev.Payload = &imv1.SequencedEvent_Message{Message: &imv1.MessageContent{Type: "image", Body: []byte{0x89, 'P', 'N', 'G', 0xff, byte(seq)}}}
		default:
			ev.Payload = &imv1.SequencedEvent_Message{Message: &imv1.MessageContent{Type: "text", Body: fmt.Appendf(nil, "hello %d from %d", seq, s)}}
		}
		v, err := ev.MarshalVT()
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, &kgo.Record{Key: []byte(ev.SessionId), Value: v, Timestamp: time.UnixMilli(ev.ServerTsMs),
			Headers: eventlog.Headers("message", "seqflow.im.v1.SequencedEvent", "export-test", "")})
		if len(batch) == 500 || i == total-1 {
			txn(batch, kgo.TryCommit)
			batch = nil
		}
		if i == total/2 {
			aborted := make([]*kgo.Record, 50)
			for j := range aborted {
				v, _ := (&imv1.SequencedEvent{SessionId: "aborted", Seq: int64(j + 1), ServerTsMs: ev.ServerTsMs}).MarshalVT()
				aborted[j] = &kgo.Record{Key: []byte("aborted"), Value: v}
			}
			txn(aborted, kgo.TryAbort)
		}
	}
}

func newAdmin(t *testing.T, brokers []string) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(eventlog.ClientOpts(brokers, "export-test-admin")...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

func groupOffsets(ctx context.Context, t *testing.T, adm *kadm.Client, group, topic string) map[int32]int64 {
	t.Helper()
	offs, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	offs.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic {
			out[o.Partition] = o.At
		}
	})
	return out
}

// download copies the visible files of s into a temp directory.
func download(t *testing.T, s *S3) string {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	err := s.List(ctx, func(name string) error {
		out, err := s.Client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.Bucket, Key: aws.String(s.Prefix + name)})
		if err != nil {
			return err
		}
		defer out.Body.Close()
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		f, err := os.Create(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(f, out.Body)
		return err
	})
	if err != nil {
		t.Fatalf("download the export: %v", err)
	}
	return dir
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
