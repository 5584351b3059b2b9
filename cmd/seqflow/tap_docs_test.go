package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/config"
	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/schemas"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// analyticsDoc is the page whose commands testAnalyticsDoc runs.
const analyticsDoc = "docs/analytics.md"

// docCommand returns the command line of analyticsDoc's code blocks that
// starts with start: the test runs what the page says.
func docCommand(t *testing.T, start string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(config.RepoRoot(), analyticsDoc))
	if err != nil {
		t.Fatal(err)
	}
	inBlock := false
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			inBlock = !inBlock
			continue
		}
		if inBlock && strings.HasPrefix(l, start) {
			return l
		}
	}
	t.Fatalf("%s has no command starting with %q", analyticsDoc, start)
	return ""
}

// needTool makes sure check runs. When it does not and the test runs as
// root with apt-get (CI does), it installs Debian's package pkg first, as
// the stack script installs protoc; otherwise the test fails under the
// test task and is skipped elsewhere, like a missing stack.
func needTool(t *testing.T, pkg string, check ...string) {
	t.Helper()
	if exec.Command(check[0], check[1:]...).Run() == nil {
		return
	}
	if _, err := exec.LookPath("apt-get"); err == nil && os.Geteuid() == 0 {
		install := func() ([]byte, error) {
			cmd := exec.Command("apt-get", "-o", "DPkg::Lock::Timeout=600", "install", "-y", "-q", "--no-install-recommends", pkg)
			cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
			return cmd.CombinedOutput()
		}
		out, err := install()
		if err != nil { // the package lists may be missing or old
			if b, uerr := exec.Command("apt-get", "-o", "DPkg::Lock::Timeout=600", "update", "-q").CombinedOutput(); uerr != nil {
				t.Fatalf("apt-get update: %v\n%s", uerr, b)
			}
			out, err = install()
		}
		if err != nil {
			t.Fatalf("apt-get install %s: %v\n%s", pkg, err, out)
		}
		if exec.Command(check[0], check[1:]...).Run() == nil {
			return
		}
	}
	msg := strings.Join(check, " ") + " fails: install Debian's " + pkg
	if os.Getenv("SEQFLOW_REQUIRE_STACK") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// shell runs a command line of the page in the repository root.
func shell(t *testing.T, ctx context.Context, line string) []byte {
	t.Helper()
	cmd := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", line)
	cmd.Dir = config.RepoRoot()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", line, err, stderr.Bytes())
	}
	return out
}

// testAnalyticsDoc runs the commands of docs/analytics.md against the
// topics under prefix, whose committed records are log.
func testAnalyticsDoc(t *testing.T, ctx context.Context, broker, prefix string, log map[string]logRecords) {
	local := strings.NewReplacer("127.0.0.1:19092", broker, "-t im.", "-t "+prefix+"im.")
	sequenced := log[eventlog.TopicSequenced]
	find := func(m proto.Message) bool {
		for _, r := range sequenced.records {
			if w := sequenced.decoded(r); w != nil && proto.Equal(w, m) {
				return true
			}
		}
		return false
	}

	t.Run("kcat lists headers", func(t *testing.T) {
		needTool(t, "kcat", "kcat", "-V")
		out := shell(t, ctx, local.Replace(docCommand(t, "kcat -C -b 127.0.0.1:19092 -t im.receipts.v1 ")))
		t.Logf("kcat:\n%s", out)
		receipts := log[eventlog.TopicReceipts]
		n := 0
		for _, l := range lines(t, string(out)) {
			n++
			types := map[string]string{"read_receipt": "seqflow.im.v1.ReadReceipt", "delivery_receipt": "seqflow.im.v1.DeliveryReceipt"}
			ok := false
			for et, schema := range types {
				ok = ok || strings.Contains(l, "seqflow-event-type="+et+",seqflow-schema="+schema+",")
			}
			if !strings.HasPrefix(l, "partition ") || !ok {
				t.Errorf("kcat printed %q", l)
			}
		}
		if n != len(receipts.records) {
			t.Fatalf("kcat listed %d receipts, the log holds %d", n, len(receipts.records))
		}
	})

	t.Run("kcat and protoc decode an event", func(t *testing.T) {
		needTool(t, "kcat", "kcat", "-V")
		needTool(t, "protobuf-compiler", "protoc", "--version")
		out := shell(t, ctx, local.Replace(docCommand(t, "kcat -C -b 127.0.0.1:19092 -t im.sequenced.v1 ")))
		t.Logf("kcat | protoc:\n%s", out)
		var ev imv1.SequencedEvent
		if err := prototext.Unmarshal(out, &ev); err != nil {
			t.Fatalf("protoc printed %q: %v", out, err)
		}
		if ev.GetSessionId() == "" || !find(&ev) {
			t.Fatalf("protoc decoded %v, which is no event of the log", &ev)
		}
	})

	t.Run("python consumer", func(t *testing.T) {
		needTool(t, "python3-venv", "python3", "-c", "import ensurepip, venv")
		shell(t, ctx, docCommand(t, "python3 -m venv "))
		shell(t, ctx, docCommand(t, "examples/python-consumer/.venv/bin/pip install "))
		run := strings.NewReplacer("--group analytics-demo", "--group tap-test-"+uuid.NewString()[:8]).
			Replace(docCommand(t, "examples/python-consumer/.venv/bin/python examples/python-consumer/consumer.py ")) +
			" --brokers " + broker + " --topic-prefix " + prefix

		// Twice in one group: the second run resumes after the first.
		pctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		first := pythonLines(t, shell(t, pctx, run+" --max 3 --idle-exit 30"))
		rest := pythonLines(t, shell(t, pctx, run+" --idle-exit 5"))
		if len(first) != 3 {
			t.Fatalf("first run printed %d lines, want 3", len(first))
		}
		t.Logf("python, first line: %s", first[0].raw)
		seen := map[[2]int64]bool{}
		for _, l := range append(first, rest...) {
			at := [2]int64{int64(l.Partition), l.Offset}
			if seen[at] {
				t.Fatalf("record %v printed twice: the second run did not resume", at)
			}
			seen[at] = true
			r := sequenced.at(l.Partition, l.Offset)
			var ev imv1.SequencedEvent
			if err := protojson.Unmarshal(l.Event, &ev); err != nil {
				t.Fatalf("event %s: %v", l.Event, err)
			}
			if r == nil || l.Topic != prefix+eventlog.TopicSequenced || l.Key != string(r.Key) || l.Schema != "seqflow.im.v1.SequencedEvent" ||
				l.Type != eventlog.Header(r, schemas.HeaderEventType) || !proto.Equal(&ev, sequenced.decoded(r)) {
				t.Fatalf("python printed %+v, which does not match the log's record", l)
			}
		}
		if len(seen) != len(sequenced.records) {
			t.Fatalf("python printed %d events in two runs, the log holds %d", len(seen), len(sequenced.records))
		}

		// Receipts: each decoded as the message its header names.
		receipts := log[eventlog.TopicReceipts]
		rl := pythonLines(t, shell(t, pctx, strings.Replace(run, "--topic im.sequenced.v1", "--topic im.receipts.v1", 1)+" --idle-exit 5"))
		if len(rl) != len(receipts.records) {
			t.Fatalf("python printed %d receipts, the log holds %d", len(rl), len(receipts.records))
		}
		for _, l := range rl {
			r := receipts.at(l.Partition, l.Offset)
			if r == nil {
				t.Fatalf("python printed %+v, no record of the log", l)
			}
			want := receipts.decoded(r)
			got := want.ProtoReflect().New().Interface()
			if err := protojson.Unmarshal(l.Event, got); err != nil || !proto.Equal(got, want) || l.Schema != string(want.ProtoReflect().Descriptor().FullName()) {
				t.Fatalf("python printed %s %s for a %s record: %v", l.Schema, l.Event, l.Type, err)
			}
		}
	})
}

// pythonLine is one line of the Python consumer.
type pythonLine struct {
	Topic     string          `json:"topic"`
	Partition int32           `json:"partition"`
	Offset    int64           `json:"offset"`
	Key       string          `json:"key"`
	Type      string          `json:"type"`
	Schema    string          `json:"schema"`
	Event     json.RawMessage `json:"event"`
	raw       string
}

func pythonLines(t *testing.T, out []byte) []pythonLine {
	t.Helper()
	var ls []pythonLine
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		l := pythonLine{raw: sc.Text()}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("python printed %q: %v", sc.Bytes(), err)
		}
		ls = append(ls, l)
	}
	return ls
}
