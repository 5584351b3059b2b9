package export

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/parquet-go/parquet-go"

	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/testkit/logcheck"
	"github.com/seqflow/seqflow/internal/testkit/stack"
)

// TestExportersShareTheGroup runs two exporters in one group: the second
// joins while the first writes, the partitions move (the first commits the
// open files of those it gives up, the second resumes them from the
// files), more events come, both stop; the files then hold each event of
// the log once.
func TestExportersShareTheGroup(t *testing.T) {
	st := stack.Require(t, "kafka")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	prefix := "export-group-" + uuid.NewString()[:8] + "."
	topics := eventlog.Names(prefix)
	adm := newAdmin(t, st.KafkaBrokers)
	if err := eventlog.EnsureTopics(ctx, adm, eventlog.Specs(topics, 4), 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		adm.DeleteTopics(context.Background(), topics.Uplink, topics.Sequenced, topics.Duplicates, topics.Receipts, topics.Offline, topics.DeadLetter) //nolint:errcheck
	})
	start := time.Now().UTC().Add(-3 * time.Hour)
	produceLog(ctx, t, st.KafkaBrokers, topics.Sequenced, start, 20, 300)

	root := filepath.Join(t.TempDir(), "export")
	var logOut io.Writer = io.Discard
	if testing.Verbose() {
		logOut = os.Stderr
	}
	newExporter := func(name string, untilEnd bool) *Exporter {
		e, err := New(Config{Brokers: st.KafkaBrokers, Topic: topics.Sequenced, Group: prefix + "export", Store: &Dir{Root: root},
			MaxRows: 500, MaxAge: time.Second, SessionTimeout: 6 * time.Second, UntilEnd: untilEnd,
			Log: slog.New(slog.NewTextHandler(logOut, nil)).With("exporter", name), DebugRowDelay: 50 * time.Microsecond})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	run := func(e *Exporter) (stop func() error) {
		rctx, rcancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- e.Run(rctx) }()
		return func() error { rcancel(); return <-done }
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			if ctx.Err() != nil {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	a := newExporter("a", false)
	stopA := run(a)
	waitFor("a's first files", func() bool { return a.Stats().Files >= 2 })
	b := newExporter("b", false)
	stopB := run(b)
	waitFor("b's assignment", func() bool { b.mu.Lock(); defer b.mu.Unlock(); return len(b.parts) > 0 })
	produceLog(ctx, t, st.KafkaBrokers, topics.Sequenced, start.Add(time.Hour), 20, 300)
	waitFor("b's first file", func() bool { return b.Stats().Files >= 1 })
	if err := stopB(); err != context.Canceled {
		t.Fatalf("b: %v", err)
	}
	if err := stopA(); err != context.Canceled {
		t.Fatalf("a: %v", err)
	}
	c := newExporter("c", true)
	if err := c.Run(ctx); err != nil {
		t.Fatalf("c: %v", err)
	}
	t.Logf("files: a %d, b %d, c (to the end) %d", a.Stats().Files, b.Stats().Files, c.Stats().Files)

	var names []string
	(&Dir{Root: root}).List(ctx, func(n string) error { names = append(names, n); return nil })
	if prog := ProgressOf(names); len(prog.Overlaps) > 0 {
		t.Fatalf("overlapping files: %v", prog.Overlaps)
	}
	type key struct {
		part int32
		off  int64
	}
	seen := map[key]int{}
	for _, n := range names {
		rows, err := parquet.ReadFile[Row](filepath.Join(root, n))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			seen[key{r.KafkaPartition, r.KafkaOffset}]++
		}
	}
	l, err := logcheck.Read(ctx, st.KafkaBrokers, topics)
	if err != nil {
		t.Fatal(err)
	}
	var missing, twice []key
	for _, ev := range l.Events {
		k := key{ev.Partition, ev.Offset}
		switch seen[k] {
		case 0:
			missing = append(missing, k)
		case 1:
		default:
			twice = append(twice, k)
		}
		delete(seen, k)
	}
	if len(missing) > 0 || len(twice) > 0 || len(seen) > 0 {
		t.Fatalf("%d events of the log missing (first %v), %d in two files, %d rows not in the log",
			len(missing), missing[:min(len(missing), 3)], len(twice), len(seen))
	}
	if len(l.Events) != 2*20*300 {
		t.Fatalf("the log holds %d events, want %d", len(l.Events), 2*20*300)
	}
	if a.Stats().Files == 0 || b.Stats().Files == 0 {
		t.Fatalf("the partitions were not shared")
	}
}
