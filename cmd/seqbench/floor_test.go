package main

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/testkit/floor"
	"github.com/seqflow/seqflow/internal/testkit/proc"
	"github.com/seqflow/seqflow/internal/testkit/stack"
)

// TestFloorAcksAndDeliversEveryMessage runs the floor phase's pipeline
// (cmd/seqfloor on the stack's Kafka, its clients) for a short paced run:
// every message sent is ACKed once and delivered once to its recipient,
// with the seq of its ACK, each session's seqs consecutive, so the bench's
// floor measures a pipeline that works; and its stage histograms count
// each message at each hop, so the floor's stage table is of this run.
//
// Both shapes: the server in one process, and split into its gateway,
// sequencer and pusher (the floor_split phase), where the ACKs and
// events reach the gateway over TCP.
func TestFloorAcksAndDeliversEveryMessage(t *testing.T) {
	st := stack.Require(t, "kafka")
	t.Run("one process", func(t *testing.T) { testFloor(t, st, false) })
	t.Run("split", func(t *testing.T) { testFloor(t, st, true) })
}

func testFloor(t *testing.T, st stack.Stack, split bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prefix := "floortest-" + randHex(4) + "."
	cl, err := kgo.NewClient(kgo.SeedBrokers(st.KafkaBrokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	names := eventlog.Names(prefix)
	if err := eventlog.EnsureTopics(ctx, kadm.NewClient(cl), eventlog.Specs(names, 4), 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cl, err := kgo.NewClient(kgo.SeedBrokers(st.KafkaBrokers...))
		if err != nil {
			return
		}
		defer cl.Close()
		kadm.NewClient(cl).DeleteTopics(context.Background(), names.Uplink, names.Sequenced, names.Duplicates, names.Receipts, names.Offline, names.DeadLetter)
	})

	b := &Bench{cfg: Config{Brokers: st.KafkaBrokers}, logDir: t.TempDir()}
	addr, admins, procs, err := b.floorProcs(ctx, proc.Build(t, floorPkg), prefix, randHex(4), split)
	defer func() {
		for _, p := range procs {
			p.Stop(10 * time.Second)
		}
	}()
	if err != nil {
		t.Fatal(err)
	}
	fc, err := floor.Dial(ctx, "ws://"+addr+"/ws", 6)
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	snap0 := floorSnap(ctx, admins)
	rep := newFloorRun(fc.Run(ctx, 120, 2*time.Second))
	if rep.Sent < 200 {
		t.Fatalf("sent %d messages in 2 s at 120/s, want about 240", rep.Sent)
	}
	if rep.Harmed() != 0 || rep.Acked != rep.Sent || rep.Delivered != rep.Sent {
		t.Fatalf("sent %d, acked %d, delivered %d, duplicates %d, misrouted %d, seq errors %d: want every message acked and delivered once, to its recipient, with its ACK's seq, a session's seqs consecutive (log %s)",
			rep.Sent, rep.Acked, rep.Delivered, rep.Duplicates, rep.Misrouted, rep.SeqErrors, b.logDir)
	}
	if len(rep.AckMs) != int(rep.Acked) || len(rep.DeliverMs) != int(rep.Delivered) || rep.ack(0.5) <= 0 {
		t.Fatalf("latencies: %d ACK and %d delivery figures for %d and %d messages, ACK p50 %.2f ms", len(rep.AckMs), len(rep.DeliverMs), rep.Acked, rep.Delivered, rep.ack(0.5))
	}
	// Per message: the produce, the uplink wait, the ACK, the pusher's
	// read; per batch: the sequencer's stages (at least one batch).
	rows := map[string]stageRow{}
	for _, r := range floorStages(snap0, floorSnap(ctx, admins)) {
		rows[r.key] = r
	}
	for _, key := range []string{"gw_produce", "seq_uplink_wait", "gw_ack", "push_read"} {
		if got := rows[key].n; got != float64(rep.Sent) {
			t.Errorf("stage %s counted %.0f messages, want the %d sent", key, got, rep.Sent)
		}
	}
	for _, key := range []string{"seq_prepare", "seq_produce", "seq_commit", "seq_total"} {
		if r := rows[key]; r.n < 1 || r.n > float64(rep.Sent) || !(r.p50 > 0) {
			t.Errorf("stage %s: %.0f batches with p50 %.2f ms, want 1..%d batches timed", key, r.n, r.p50, rep.Sent)
		}
	}
}
