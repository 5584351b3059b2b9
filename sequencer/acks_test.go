package main

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seqflow/seqflow/internal/dedup"
	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// Unit tests of the direct ACKs: batches built here, and an in-process
// fake in place of the gateways' transport (no Kafka, no Redis, no
// gateway). TestDirectAck (producer-gw) runs them on the real stack.

// TestBatchAcks checks what a committed batch answers, by gateway: a
// SeqAck with the seq and msg_id each new record got, the original's seq
// for a retry of a committed message and for a retry within the batch,
// nothing for a dead letter, an uplink without a gateway, or a command
// that changes membership (a create, a members change, or a retry of one).
func TestBatchAcks(t *testing.T) {
	topics := eventlog.Names("t.")
	type in struct{ session, id, gw string }
	ins := []in{
		{"s1", "a", "gw1"},
		{"s1", "old", "gw2"}, // retry of a committed message
		{"s2", "b", "gw2"},
		{"s1", "a", "gw1"}, // retry within the batch
		{"s2", "c", ""},    // no gateway to answer
		{"s2", "big", "gw1"},
		{"s3", "create", "gw1"},
		{"s3", "add", "gw1"},
		{"s3", "create", "gw1"}, // retry of the create within the batch
		{"s3", "leave", "gw2"},  // the owner leaving: refused by the rules
	}
	var recs []*kgo.Record
	for i, x := range ins {
		body := "x"
		if x.id == "big" {
			body = strings.Repeat("x", 2000) // over classify's limit below: a dead letter
		}
		gw, id := x.gw, x.id
		recs = append(recs, &kgo.Record{Topic: topics.Uplink, Partition: 3, Offset: int64(100 + i), Key: []byte(x.session),
			Value: testUplink(x.session, x.id, body, func(u *imv1.Uplink) {
				u.GatewayId = gw
				switch id {
				case "create":
					u.Command = &imv1.Uplink_SessionCreate{SessionCreate: &imv1.SessionCreate{MemberUserIds: []string{"u1", "u2"}}}
				case "leave":
					u.Command = &imv1.Uplink_Membership{Membership: &imv1.MembershipChange{Op: imv1.MembershipChange_OP_REMOVE, UserIds: []string{"u1"}}}
				case "add":
					u.Command = &imv1.Uplink_Membership{Membership: &imv1.MembershipChange{Op: imv1.MembershipChange_OP_ADD, UserIds: []string{"u3"}}}
				}
			})})
	}
	pb := testPart(t, recs, []string{"s1", "s2", "s3"})
	committed := dedup.Entry{Seq: 7, MsgID: 77, ServerTsMs: 70}
	pb.st.window.Put("s1", "u1", "old", committed, 4000)
	pb.classify(1000, 5000)
	if err := pb.assign(topics, kgo.RecordHeader{}, testGen(t), 5000); err != nil {
		t.Fatal(err)
	}
	b := &batch{nowMs: 5000, parts: []*partBatch{pb}}
	got := b.acks()
	if len(got) != 2 || len(got["gw1"]) != 2 || len(got["gw2"]) != 3 {
		t.Fatalf("acks by gateway: gw1 %d, gw2 %d, %d gateways; want 2, 3 and 2", len(got["gw1"]), len(got["gw2"]), len(got))
	}
	if rf := got["gw2"][2].GetRefusal(); rf == nil || rf.Code != imv1.ErrorCode_ERROR_CODE_NOT_PERMITTED || rf.ClientMsgId != "leave" ||
		rf.UplinkOffset != pb.items[len(pb.items)-1].rec.Offset || rf.Reason == "" {
		t.Fatalf("gw2's third item %v, want the refusal of the owner's leave", got["gw2"][2])
	}
	first := pb.items[0].entry
	if first.Seq != 1 || first.MsgID == 0 {
		t.Fatalf("first record's entry %+v, want seq 1 and a msg_id", first)
	}
	a := got["gw1"][0].GetAck()
	if a == nil || a.SessionId != "s1" || a.ClientMsgId != "a" || a.SenderUserId != "u1" || a.Seq != 1 || a.MsgId != first.MsgID || a.ServerTsMs != 5000 ||
		a.UplinkPartition != 3 || a.UplinkOffset != 100 {
		t.Fatalf("gw1[0] = %v, want the SeqAck of s1/a seq 1 msg_id %d from uplink 3/100", got["gw1"][0], first.MsgID)
	}
	if d := got["gw1"][1].GetDuplicate(); d == nil || d.ClientMsgId != "a" || d.Seq != 1 || d.MsgId != first.MsgID || d.OriginalServerTsMs != 5000 {
		t.Fatalf("gw1[1] = %v, want the DuplicateAck of s1/a with seq 1", got["gw1"][1])
	}
	if d := got["gw2"][0].GetDuplicate(); d == nil || d.ClientMsgId != "old" || d.Seq != 7 || d.MsgId != 77 || d.OriginalServerTsMs != 70 || d.GatewayId != "gw2" {
		t.Fatalf("gw2[0] = %v, want the DuplicateAck of s1/old with the committed seq 7", got["gw2"][0])
	}
	if a := got["gw2"][1].GetAck(); a == nil || a.SessionId != "s2" || a.Seq != 1 || a.MsgId != pb.items[2].entry.MsgID || a.UplinkOffset != 102 {
		t.Fatalf("gw2[1] = %v, want the SeqAck of s2/b seq 1", got["gw2"][1])
	}
	for gw, items := range got {
		for _, it := range items {
			if len(it.Recipients) != 0 {
				t.Fatalf("%s: item %v has recipients; a direct ACK delivers nothing", gw, it)
			}
		}
	}
	if pb.fresh != 5 || pb.dups != 3 || pb.refused != 1 {
		t.Fatalf("batch sequenced %d, collapsed %d and refused %d, want 5, 3 (the create and its retry among them) and 1", pb.fresh, pb.dups, pb.refused)
	}
	if n := b.answered(); n != 9 {
		t.Fatalf("answered() = %d, want 9 (all but the dead letter)", n)
	}
}

// fakeSender is an in-process stand-in for the gateways' transport: sends
// to gateways in block wait until their context ends.
type fakeSender struct {
	block map[string]bool
	mu    sync.Mutex
	got   map[string][]*imv1.PushBatch
	sent  chan string
}

func (f *fakeSender) Send(ctx context.Context, b *imv1.PushBatch) error {
	if f.block[b.GatewayId] {
		<-ctx.Done()
		return ctx.Err()
	}
	f.mu.Lock()
	f.got[b.GatewayId] = append(f.got[b.GatewayId], b)
	f.mu.Unlock()
	f.sent <- b.GatewayId
	return nil
}

func (f *fakeSender) Close() error { return nil }

// TestAckerStalledGateway checks that a gateway that takes no batches
// holds up neither the other gateways' ACKs nor the caller, and that what
// it did not take is counted as failed or dropped, not lost silently.
func TestAckerStalledGateway(t *testing.T) {
	f := &fakeSender{block: map[string]bool{"stalled": true}, got: map[string][]*imv1.PushBatch{}, sent: make(chan string, 1000)}
	m := newMetrics(prometheus.NewRegistry())
	a := newAcker(f, slog.New(slog.DiscardHandler), m)
	mk := func(gw string, n int) *batch {
		pb := &partBatch{}
		for i := range n {
			pb.items = append(pb.items, item{first: -1, rec: &kgo.Record{Offset: int64(i)}, up: &imv1.Uplink{SessionId: "s", ClientMsgId: string(rune('a' + i)), SenderUserId: "u", GatewayId: gw},
				entry: dedup.Entry{Seq: int64(i + 1), MsgID: 1}})
			pb.fresh++
		}
		return &batch{parts: []*partBatch{pb}, ended: time.Now()}
	}
	start := time.Now()
	const rounds = ackQueue + 20 // more than a gateway's queue holds
	for range rounds {
		a.committed(mk("stalled", 1))
		a.committed(mk("live", 2))
		time.Sleep(time.Millisecond) // let the dispatcher keep up: this test is about a stalled gateway, not a full dispatcher
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("handing over %d batches took %v: the caller waited on a gateway", 2*rounds, d)
	}
	deadline := time.After(10 * time.Second)
	items := 0
	for items < 2*rounds {
		select {
		case gw := <-f.sent:
			if gw != "live" {
				t.Fatalf("sent to %s", gw)
			}
			f.mu.Lock()
			items = 0
			for _, b := range f.got["live"] {
				items += len(b.Items)
				if b.Sender != "sequencer" {
					t.Fatalf("batch sender %q, want sequencer", b.Sender)
				}
			}
			f.mu.Unlock()
		case <-deadline:
			t.Fatalf("the live gateway got %d of %d ACKs in 10s while another stalled", items, 2*rounds)
		}
	}
	a.close()
	sent := testutil.ToFloat64(m.directAcks.WithLabelValues("sent"))
	lost := testutil.ToFloat64(m.directAcks.WithLabelValues("failed")) + testutil.ToFloat64(m.directAcks.WithLabelValues("dropped"))
	if sent != 2*rounds {
		t.Fatalf("sent counted %v, want %d", sent, 2*rounds)
	}
	if lost != rounds {
		t.Fatalf("failed + dropped = %v, want the stalled gateway's %d: each ACK not sent is counted once", lost, rounds)
	}
	// One timing per send that went out (sends merge batches), none for
	// the stalled gateway's.
	var dm dto.Metric
	if err := m.directAckSecs.Write(&dm); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	sends := len(f.got["live"])
	f.mu.Unlock()
	if n := dm.GetHistogram().GetSampleCount(); n != uint64(sends) {
		t.Fatalf("direct ACK send timings: %d, want one per send to the live gateway (%d)", n, sends)
	}
}
