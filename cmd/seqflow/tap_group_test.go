package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/testkit/stack"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// testTopics creates the topics of eventlog.Topics under a fresh prefix,
// deleted when the test ends.
func testTopics(t *testing.T, brokers []string, partitions int32) (string, eventlog.Topics) {
	t.Helper()
	prefix := "t-" + uuid.NewString()[:8] + "."
	topics := eventlog.Names(prefix)
	cl, err := kgo.NewClient(eventlog.ClientOpts(brokers, "tap-test-admin")...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := eventlog.EnsureTopics(ctx, adm, eventlog.Specs(topics, partitions), 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = adm.DeleteTopics(ctx, topics.Uplink, topics.Sequenced, topics.Duplicates, topics.Receipts, topics.Offline, topics.DeadLetter)
	})
	return prefix, topics
}

// failingWriter refuses every write, as a closed pipe does.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

// TestTapGroup: tap -group reads only committed transactions, commits
// after writing, resumes where it stopped, and prints again what it could
// not write (at least once); without -group it remembers nothing.
func TestTapGroup(t *testing.T) {
	st := stack.Require(t, "kafka")
	prefix, topics := testTopics(t, st.KafkaBrokers, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// Sequenced events in transactions, as the sequencer writes them (its
	// headers), one session so they share a partition and an order. The
	// second transaction aborts: its events must never show.
	pr, err := kgo.NewClient(append(eventlog.ClientOpts(st.KafkaBrokers, "tap-test"), append(eventlog.ProducerOpts(),
		kgo.TransactionalID("tap-test-"+prefix), kgo.DefaultProduceTopic(topics.Sequenced))...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	session := "s-" + uuid.NewString()[:8]
	seq := int64(0)
	txn := func(n int, commit bool) {
		t.Helper()
		if err := pr.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for range n {
			seq++
			v, _ := proto.Marshal(&imv1.SequencedEvent{SessionId: session, Seq: seq, MsgId: 1000 + seq, SenderUserId: "alice",
				Payload: &imv1.SequencedEvent_Message{Message: &imv1.MessageContent{Type: "text", Body: []byte(fmt.Sprintf("m%d", seq))}}})
			r := &kgo.Record{Key: []byte(session), Value: v, Headers: eventlog.Headers("message", "seqflow.im.v1.SequencedEvent", "sequencer", "")}
			if err := pr.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := pr.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	txn(3, true)  // seqs 1-3
	txn(2, false) // seqs 4-5, aborted
	txn(3, true)  // seqs 6-8
	seqs := func(evs []tapped) string {
		var s []string
		for _, e := range evs {
			s = append(s, fmt.Sprint(e.ev.GetSeq()))
		}
		return strings.Join(s, ",")
	}
	group := "tap-test-" + prefix
	run := func(args ...string) []tapped {
		t.Helper()
		return tapEvents(t, ctx, append([]string{"-topic-prefix", prefix, "-group", group}, args...)...)
	}

	if got := seqs(run("-from", "start", "-n", "4", "-idle-exit", "30s")); got != "1,2,3,6" {
		t.Fatalf("first run printed seqs %s, want 1,2,3,6 (4 and 5 aborted)", got)
	}
	if got := seqs(run("-from", "start", "-n", "1", "-idle-exit", "30s")); got != "7" {
		t.Fatalf("second run printed seqs %s, want 7: it resumes after the last record printed, -from applies only without a commit", got)
	}
	// A tap that cannot write commits nothing: the record comes again.
	err = tap(ctx, failingWriter{}, []string{"-topic-prefix", prefix, "-group", group, "-n", "1", "-idle-exit", "30s"})
	if err == nil || !strings.Contains(err.Error(), "write output") {
		t.Fatalf("tap into a broken pipe returned %v, want a write error", err)
	}
	if got := seqs(run("-idle-exit", "5s")); got != "8" {
		t.Fatalf("after the failed write the group printed seqs %s, want 8 again (at least once)", got)
	}
	if got := seqs(run("-idle-exit", "3s")); got != "" {
		t.Fatalf("a caught-up group printed seqs %s, want nothing", got)
	}
	txn(1, true) // seq 9
	last := run("-idle-exit", "5s")
	if got := seqs(last); got != "9" {
		t.Fatalf("the group printed seqs %s after a new event, want 9", got)
	}
	// The group's committed offset is right past the last record printed
	// (the transaction's commit marker after it takes an offset too).
	offs, err := kadm.NewClient(pr).FetchOffsets(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := offs.Lookup(topics.Sequenced, last[0].line.Partition); !ok || o.At != last[0].line.Offset+1 {
		t.Fatalf("committed %+v, want %d (past seq 9)", o, last[0].line.Offset+1)
	}

	// Without -group: nothing remembered, every run from -from.
	for range 2 {
		if got := seqs(tapEvents(t, ctx, "-topic-prefix", prefix, "-from", "start", "-idle-exit", "3s")); got != "1,2,3,6,7,8,9" {
			t.Fatalf("tap without a group printed seqs %s, want every committed event", got)
		}
	}
	// A group cannot start at partition offsets it does not choose.
	var out bytes.Buffer
	if err := tap(ctx, &out, []string{"-topic-prefix", prefix, "-group", group, "-from", "offset:0=1"}); err == nil {
		t.Fatal("tap -group -from offset:P=N ran, want an error")
	}
}
