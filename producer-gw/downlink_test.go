package main

import (
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seqflow/seqflow/internal/auth"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// fakeSeqs records the seqs the downlink hands on.
type fakeSeqs struct{ got []string }

func (f *fakeSeqs) resolveSeq(source string, k ackKey, r seqResult) {
	f.got = append(f.got, source+" "+k.clientMsgID+" "+map[bool]string{true: "duplicate", false: "new"}[r.duplicate])
}

// fakeEventMembers lets every user receive except those in gone.
type fakeEventMembers struct {
	observed int
	gone     map[string]bool
}

func (f *fakeEventMembers) observe(*imv1.SequencedEvent) { f.observed++ }
func (f *fakeEventMembers) mayReceive(_, user string, _ int64) bool {
	return !f.gone[user]
}

type fakeConns map[string]*conn

func (f fakeConns) conn(id string) *conn { return f[id] }

// TestDownlink: each item of a batch goes one way — seqs to the waiters
// (with their source), events to membership and then to the recipients'
// connections, counted by outcome.
func TestDownlink(t *testing.T) {
	newConn := func(user string) *conn {
		return &conn{p: auth.Principal{UserID: user}, out: make(chan outFrame, 8), closing: make(chan struct{}), lastSeq: map[string]int64{}}
	}
	bob, carol := newConn("bob"), newConn("carol")
	seqs := &fakeSeqs{}
	members := &fakeEventMembers{gone: map[string]bool{"carol": true}}
	m := newMetrics(prometheus.NewRegistry())
	d := newDownlink("gw", nil, seqs, members, fakeConns{"c-bob": bob, "c-carol": carol}, nil, slog.New(slog.DiscardHandler), m)

	ev := func(seq int64) *imv1.PushItem {
		return &imv1.PushItem{
			Recipients: []*imv1.Recipient{{UserId: "bob", ConnId: "c-bob"}, {UserId: "carol", ConnId: "c-carol"},
				{UserId: "mallory", ConnId: "c-bob"}, {UserId: "dave", ConnId: "c-gone"}},
			Item: &imv1.PushItem_Event{Event: &imv1.SequencedEvent{SessionId: "s", Seq: seq, MsgId: seq, ClientMsgId: "e", SenderUserId: "alice",
				Payload: &imv1.SequencedEvent_Message{Message: &imv1.MessageContent{Type: "text", Body: []byte("hi")}}}},
		}
	}
	d.onBatch(&imv1.PushBatch{Sender: "sequencer", Items: []*imv1.PushItem{
		{Item: &imv1.PushItem_Ack{Ack: &imv1.SeqAck{SessionId: "s", ClientMsgId: "a", SenderUserId: "alice", Seq: 1}}},
	}})
	d.onBatch(&imv1.PushBatch{Items: []*imv1.PushItem{
		{Item: &imv1.PushItem_Duplicate{Duplicate: &imv1.DuplicateAck{SessionId: "s", ClientMsgId: "a", SenderUserId: "alice", Seq: 1}}},
		ev(2), ev(2), // the second copy is out of order for bob
	}})

	want := []string{"sequencer a new", "pusher a duplicate", "pusher e new", "pusher e new"}
	if len(seqs.got) != len(want) {
		t.Fatalf("seqs handed on: %q, want %q", seqs.got, want)
	}
	for i := range want {
		if seqs.got[i] != want[i] {
			t.Fatalf("seqs handed on: %q, want %q", seqs.got, want)
		}
	}
	if members.observed != 2 {
		t.Fatalf("membership observed %d events, want 2", members.observed)
	}
	if len(bob.out) != 1 || len(carol.out) != 0 {
		t.Fatalf("frames queued: bob %d, carol %d; want 1 and 0", len(bob.out), len(carol.out))
	}
	for outcome, n := range map[string]float64{"delivered": 1, "dropped_order": 1, "dropped_not_member": 2, "dropped_no_conn": 4} {
		if got := testutil.ToFloat64(m.pushItems.WithLabelValues(outcome)); got != n {
			t.Errorf("push items %s = %v, want %v", outcome, got, n)
		}
	}
}

// TestDownlinkEchoIsLazy: an event reaches the device that sent it as a
// lazy frame (its ACK carried the seq), and every other connection, the
// sender's other devices included, as a frame written at once.
func TestDownlinkEchoIsLazy(t *testing.T) {
	newConn := func(user, device string) *conn {
		return &conn{p: auth.Principal{UserID: user, DeviceID: device}, out: make(chan outFrame, 8), closing: make(chan struct{}), lastSeq: map[string]int64{}}
	}
	phone, laptop, bob := newConn("alice", "phone"), newConn("alice", "laptop"), newConn("bob", "phone")
	d := newDownlink("gw", nil, &fakeSeqs{}, &fakeEventMembers{}, fakeConns{"c-phone": phone, "c-laptop": laptop, "c-bob": bob},
		nil, slog.New(slog.DiscardHandler), newMetrics(prometheus.NewRegistry()))
	d.onBatch(&imv1.PushBatch{Items: []*imv1.PushItem{{
		Recipients: []*imv1.Recipient{{UserId: "alice", ConnId: "c-phone"}, {UserId: "alice", ConnId: "c-laptop"}, {UserId: "bob", ConnId: "c-bob"}},
		Item: &imv1.PushItem_Event{Event: &imv1.SequencedEvent{SessionId: "s", Seq: 1, MsgId: 1, ClientMsgId: "m", SenderUserId: "alice", SenderDeviceId: "phone",
			Payload: &imv1.SequencedEvent_Message{Message: &imv1.MessageContent{Type: "text", Body: []byte("hi")}}}},
	}}})
	for _, tc := range []struct {
		name string
		c    *conn
		lazy bool
	}{{"the sending device", phone, true}, {"the sender's other device", laptop, false}, {"the other member", bob, false}} {
		if len(tc.c.out) != 1 {
			t.Fatalf("%s: %d frames queued, want 1", tc.name, len(tc.c.out))
		}
		if f := <-tc.c.out; f.lazy != tc.lazy {
			t.Errorf("%s: lazy %v, want %v", tc.name, f.lazy, tc.lazy)
		}
	}
}
