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
// every message sent is ACKed once and delivered once, with latencies,
// so the bench's floor measures a pipeline that works.
func TestFloorAcksAndDeliversEveryMessage(t *testing.T) {
	st := stack.Require(t, "kafka")
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
	t.Cleanup(func() { kadm.NewClient(cl).DeleteTopics(context.Background(), names.Uplink, names.Sequenced) })

	p := &proc.Proc{Name: "seqfloor", Bin: proc.Build(t, floorPkg), Log: t.TempDir() + "/seqfloor.log",
		Env: []string{"SEQFLOW_KAFKA_BROKERS=" + st.KafkaBrokers[0], "SEQFLOW_TOPIC_PREFIX=" + prefix,
			"SEQFLOOR_GROUP=floortest-" + randHex(4), "SEQFLOOR_ADDR=" + proc.AnyPort}}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Stop(10 * time.Second)
	addr, err := p.Addr(ctx, "floor listening")
	if err != nil {
		t.Fatal(err)
	}
	p.Admin = addr
	if err := p.WaitReady(ctx); err != nil {
		t.Fatalf("seqfloor not ready: %v (log %s)", err, p.Log)
	}
	fc, err := floor.Dial(ctx, "ws://"+addr+"/ws", 6)
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	rep := newFloorRun(fc.Run(ctx, 120, 2*time.Second))
	if rep.Sent < 200 {
		t.Fatalf("sent %d messages in 2 s at 120/s, want about 240", rep.Sent)
	}
	if rep.Acked != rep.Sent || rep.Delivered != rep.Sent {
		t.Fatalf("sent %d, acked %d, delivered %d: want every message acked and delivered once (log %s)", rep.Sent, rep.Acked, rep.Delivered, p.Log)
	}
	if rep.ack(0.5) <= 0 || rep.deliver(0.99) < rep.deliver(0.5) {
		t.Fatalf("latencies: ack p50 %.2f ms, deliver p50 %.2f p99 %.2f", rep.ack(0.5), rep.deliver(0.5), rep.deliver(0.99))
	}
}
