package main

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seqflow/seqflow/internal/dedup"
	"github.com/seqflow/seqflow/internal/delivery"
	"github.com/seqflow/seqflow/schemas/imv1"
)

func msgUplink(gw, session, cmid string) *imv1.Uplink {
	return &imv1.Uplink{SessionId: session, ClientMsgId: cmid, SenderUserId: "alice", GatewayId: gw,
		Command: &imv1.Uplink_Message{Message: &imv1.MessageContent{Type: "text"}}}
}

// TestBatchAcks: one PushBatch per gateway, in batch order, with the seq a
// message got, or for a retry (of a committed message, or of one earlier
// in the batch) the original's with duplicate set; nothing for bad
// records, non-message commands or uplinks that name no gateway.
func TestBatchAcks(t *testing.T) {
	committed := dedup.Entry{Seq: 7, MsgID: 700, ServerTsMs: 70}
	b := &batch{parts: []*partBatch{{items: []item{
		{up: msgUplink("gw-a", "s1", "m1"), first: -1, entry: dedup.Entry{Seq: 8, MsgID: 800, ServerTsMs: 80}},
		{up: msgUplink("gw-b", "s1", "m0"), first: -1, dupOf: &committed},
		{up: msgUplink("gw-a", "s1", "m1"), first: 0},
		{rec: &kgo.Record{}, bad: &invalidError{}, first: -1},
		{up: &imv1.Uplink{SessionId: "s2", ClientMsgId: "c", SenderUserId: "alice", GatewayId: "gw-a",
			Command: &imv1.Uplink_SessionCreate{SessionCreate: &imv1.SessionCreate{}}}, first: -1},
		{up: msgUplink("", "s1", "m9"), first: -1, entry: dedup.Entry{Seq: 9}},
	}}, {items: []item{
		{up: msgUplink("gw-b", "s3", "m3"), first: -1, entry: dedup.Entry{Seq: 1, MsgID: 100, ServerTsMs: 10}},
	}}}}
	got := b.acks(123)
	type ack struct {
		gw, session, cmid string
		seq, id, ts       int64
		dup               bool
	}
	var flat []ack
	for _, pb := range got {
		if pb.SentTsMs != 123 {
			t.Errorf("batch for %s sent_ts_ms %d, want 123", pb.GatewayId, pb.SentTsMs)
		}
		for _, it := range pb.Items {
			a := it.GetAck()
			if a == nil || a.SenderUserId != "alice" {
				t.Fatalf("item %v: want a SeqAck of alice", it)
			}
			flat = append(flat, ack{pb.GatewayId, a.SessionId, a.ClientMsgId, a.Seq, a.MsgId, a.ServerTsMs, a.Duplicate})
		}
	}
	want := []ack{
		{"gw-a", "s1", "m1", 8, 800, 80, false},
		{"gw-a", "s1", "m1", 8, 800, 80, true},
		{"gw-b", "s1", "m0", 7, 700, 70, true},
		{"gw-b", "s3", "m3", 1, 100, 10, false},
	}
	if len(got) != 2 || len(flat) != len(want) {
		t.Fatalf("got %d batches, acks %+v; want 2 batches, %+v", len(got), flat, want)
	}
	for i := range want {
		if flat[i] != want[i] {
			t.Errorf("ack %d = %+v, want %+v", i, flat[i], want[i])
		}
	}
}

// TestAckerNeverBlocks: with the publisher stuck, enqueue returns at once
// and counts what it drops; what was queued is published once the
// publisher moves; outcomes are counted by kind. (The publisher is an
// in-process stand-in for Redis: this is a unit test.)
func TestAckerNeverBlocks(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var sent []string
	send := func(ctx context.Context, b *imv1.PushBatch) error {
		<-release
		mu.Lock()
		defer mu.Unlock()
		sent = append(sent, b.GatewayId)
		switch b.GatewayId {
		case "gone":
			return &delivery.SendError{GatewayID: b.GatewayId, Err: delivery.ErrNoReceiver}
		case "broken":
			return errors.New("redis down")
		}
		return nil
	}
	reg := prometheus.NewRegistry()
	a := newAcker(send, reg, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go a.run(ctx)
	one := func(gw string) *batch {
		return &batch{parts: []*partBatch{{items: []item{{up: msgUplink(gw, "s", "m"), first: -1, entry: dedup.Entry{Seq: 1}}}}}}
	}
	a.enqueue(one("ok")) // taken by run, which blocks in send
	time.Sleep(50 * time.Millisecond)
	a.enqueue(one("gone"))
	a.enqueue(one("broken"))
	start := time.Now()
	for i := 0; i < ackQueue+5; i++ {
		a.enqueue(one("ok"))
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("enqueue blocked %s behind a stuck publisher", d)
	}
	if n := count(a.sent.WithLabelValues("dropped")); n < 5 {
		t.Errorf("dropped %v transactions, want at least 5 past a full queue of %d", n, ackQueue)
	}
	close(release)
	deadline := time.Now().Add(10 * time.Second)
	for count(a.sent.WithLabelValues("sent"))+count(a.sent.WithLabelValues("no_receiver"))+
		count(a.sent.WithLabelValues("error")) < float64(ackQueue)+1 {
		if time.Now().After(deadline) {
			t.Fatalf("published %v", sent)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := count(a.sent.WithLabelValues("no_receiver")); n != 1 {
		t.Errorf("no_receiver = %v, want 1", n)
	}
	if n := count(a.sent.WithLabelValues("error")); n != 1 {
		t.Errorf("error = %v, want 1", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sent) < 3 || sent[0] != "ok" || sent[1] != "gone" || sent[2] != "broken" {
		t.Errorf("publish order %v, want ok, gone, broken first", sent[:min(3, len(sent))])
	}
}

func count(c prometheus.Counter) float64 {
	var m dto.Metric
	_ = c.Write(&m)
	return m.GetCounter().GetValue()
}
