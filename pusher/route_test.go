package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seqflow/seqflow/internal/presence"
	"github.com/seqflow/seqflow/schemas/imv1"
)

func textEv(session string, seq int64, sender, body string) *imv1.SequencedEvent {
	return &imv1.SequencedEvent{SessionId: session, Seq: seq, MsgId: 100 + seq, SenderUserId: sender, ServerTsMs: 5,
		Payload: &imv1.SequencedEvent_Message{Message: &imv1.MessageContent{Type: "text", Body: []byte(body)}}}
}

func conn(user, dev, gw string) presence.Conn {
	return presence.Conn{UserID: user, DeviceID: dev, ConnID: user + "/" + dev, GatewayID: gw}
}

// recipientsOf lists "gateway:conn" for every recipient of seq in pl.
func recipientsOf(pl plan, seq int64) []string {
	var out []string
	for gw, b := range pl.batches {
		for _, it := range b.Items {
			if it.GetEvent().GetSeq() == seq || it.GetDuplicate().GetSeq() == seq {
				for _, r := range it.Recipients {
					out = append(out, gw+":"+r.ConnId)
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

func offlineOf(pl plan) []string {
	var out []string
	for _, n := range pl.offline {
		out = append(out, fmt.Sprintf("%s@%d", n.n.RecipientUserId, n.n.Seq))
	}
	slices.Sort(out)
	return out
}

func TestBuildPlan(t *testing.T) {
	online := map[string][]presence.Conn{
		"alice": {conn("alice", "phone", "gw-a"), conn("alice", "laptop", "gw-b")},
		"bob":   {conn("bob", "phone", "gw-b")},
	}
	cases := []struct {
		name        string
		events      []routed
		dups        []*imv1.DuplicateAck
		opts        planOpts
		seq         int64
		want        []string
		wantOffline []string
		wantBatches int
	}{
		{
			name:        "online recipients, the sender's own devices included",
			events:      []routed{{ev: textEv("s", 1, "alice", "hi"), recipients: []string{"alice", "bob"}}},
			opts:        planOpts{offline: true},
			seq:         1,
			want:        []string{"gw-a:alice/phone", "gw-b:alice/laptop", "gw-b:bob/phone"},
			wantBatches: 2,
		},
		{
			name:        "offline recipients get a notification, not a push",
			events:      []routed{{ev: textEv("s", 2, "alice", "hi"), recipients: []string{"alice", "carol", "dave"}}},
			opts:        planOpts{offline: true},
			seq:         2,
			want:        []string{"gw-a:alice/phone", "gw-b:alice/laptop"},
			wantOffline: []string{"carol@2", "dave@2"},
			wantBatches: 2,
		},
		{
			name:        "an offline sender is not notified of its own message",
			events:      []routed{{ev: textEv("s", 3, "carol", "hi"), recipients: []string{"carol", "bob"}}},
			opts:        planOpts{offline: true},
			seq:         3,
			want:        []string{"gw-b:bob/phone"},
			wantBatches: 1,
		},
		{
			name: "membership events push but never notify offline users",
			events: []routed{{ev: &imv1.SequencedEvent{SessionId: "s", Seq: 4, SenderUserId: "alice",
				Payload: &imv1.SequencedEvent_Membership{Membership: &imv1.MembershipChange{Op: imv1.MembershipChange_OP_ADD, UserIds: []string{"carol"}}}},
				recipients: []string{"alice", "carol"}}},
			opts:        planOpts{offline: true},
			seq:         4,
			want:        []string{"gw-a:alice/phone", "gw-b:alice/laptop"},
			wantBatches: 2,
		},
		{
			name:        "offline notifications off",
			events:      []routed{{ev: textEv("s", 5, "alice", "hi"), recipients: []string{"alice", "carol"}}},
			opts:        planOpts{offline: false},
			seq:         5,
			want:        []string{"gw-a:alice/phone", "gw-b:alice/laptop"},
			wantBatches: 2,
		},
		{
			name:        "sessions over the offline limit are not notified",
			events:      []routed{{ev: textEv("s", 6, "alice", "hi"), recipients: []string{"alice", "carol", "dave"}}},
			opts:        planOpts{offline: true, offlineMaxMembers: 2},
			seq:         6,
			want:        []string{"gw-a:alice/phone", "gw-b:alice/laptop"},
			wantBatches: 2,
		},
		{
			name:        "duplicate ACK goes to the sending device only",
			dups:        []*imv1.DuplicateAck{{SessionId: "s", Seq: 7, SenderUserId: "alice", SenderDeviceId: "laptop", GatewayId: "gw-b"}},
			seq:         7,
			want:        []string{"gw-b:alice/laptop"},
			wantBatches: 1,
		},
		{
			name:        "duplicate ACK without a device goes to all the sender's devices",
			dups:        []*imv1.DuplicateAck{{SessionId: "s", Seq: 8, SenderUserId: "alice"}},
			seq:         8,
			want:        []string{"gw-a:alice/phone", "gw-b:alice/laptop"},
			wantBatches: 2,
		},
		{
			name:        "duplicate ACK of a disconnected sender goes nowhere",
			dups:        []*imv1.DuplicateAck{{SessionId: "s", Seq: 9, SenderUserId: "carol", SenderDeviceId: "phone"}},
			seq:         9,
			wantBatches: 0,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pl, _ := buildPlan(c.events, answers(c.dups), online, c.opts)
			if got := recipientsOf(pl, c.seq); !slices.Equal(got, c.want) {
				t.Fatalf("recipients %v, want %v", got, c.want)
			}
			if got := offlineOf(pl); !slices.Equal(got, c.wantOffline) {
				t.Fatalf("offline %v, want %v", got, c.wantOffline)
			}
			if len(pl.batches) != c.wantBatches {
				t.Fatalf("%d batches, want %d", len(pl.batches), c.wantBatches)
			}
			for gw, b := range pl.batches {
				if b.GatewayId != gw {
					t.Fatalf("batch under %s addressed to %s", gw, b.GatewayId)
				}
			}
		})
	}
}

// TestBuildPlanOneBatchPerGatewayInLogOrder: a poll's events for one
// gateway travel in one batch, in the order of the log.
func TestBuildPlanOneBatchPerGatewayInLogOrder(t *testing.T) {
	online := map[string][]presence.Conn{"bob": {conn("bob", "phone", "gw-b")}}
	var evs []routed
	for seq := int64(1); seq <= 50; seq++ {
		evs = append(evs, routed{ev: textEv("s", seq, "alice", "m"), recipients: []string{"alice", "bob"}})
	}
	pl, _ := buildPlan(evs, nil, online, planOpts{})
	if len(pl.batches) != 1 || len(pl.batches["gw-b"].Items) != 50 {
		t.Fatalf("want one batch of 50 items for gw-b, got %d batches", len(pl.batches))
	}
	for i, it := range pl.batches["gw-b"].Items {
		if it.GetEvent().Seq != int64(i+1) {
			t.Fatalf("item %d has seq %d", i, it.GetEvent().Seq)
		}
	}
}

// TestBuildPlanLargeGroup: 10,000 members, 300 online on 3 gateways: one
// item per gateway whose recipients are exactly the online members there.
func TestBuildPlanLargeGroup(t *testing.T) {
	members := make([]string, 10_000)
	online := map[string][]presence.Conn{}
	for i := range members {
		members[i] = fmt.Sprintf("u%05d", i)
		if i%100 == 0 || i%100 == 1 || i%100 == 2 {
			online[members[i]] = []presence.Conn{conn(members[i], "d", fmt.Sprintf("gw-%d", i%3))}
		}
	}
	pl, _ := buildPlan([]routed{{ev: textEv("big", 1, members[0], "hello"), recipients: members}}, nil, online, planOpts{offline: true})
	if len(pl.batches) != 3 {
		t.Fatalf("%d batches, want 3", len(pl.batches))
	}
	total := 0
	for _, b := range pl.batches {
		if len(b.Items) != 1 {
			t.Fatalf("gateway %s has %d items, want 1", b.GatewayId, len(b.Items))
		}
		total += len(b.Items[0].Recipients)
	}
	if total != 300 || len(pl.offline) != 9_700 {
		t.Fatalf("%d online recipients and %d offline notifications, want 300 and 9700", total, len(pl.offline))
	}
	if f := pl.fanout[0]; f.members != 10_000 || f.conns != 300 || f.gateways != 3 {
		t.Fatalf("fanout %+v", f)
	}
}

func TestPreview(t *testing.T) {
	long := strings.Repeat("é", 100) // 200 bytes
	cases := []struct {
		name string
		m    *imv1.MessageContent
		want string
	}{
		{"short text", &imv1.MessageContent{Type: "text", Body: []byte("hello")}, "hello"},
		{"cut on a character boundary", &imv1.MessageContent{Type: "text", Body: []byte(long)}, strings.Repeat("é", 60)},
		{"cut inside a 4-byte rune", &imv1.MessageContent{Type: "text", Body: []byte(strings.Repeat("a", 118) + "😀")}, strings.Repeat("a", 118)},
		{"invalid UTF-8 is replaced", &imv1.MessageContent{Type: "text", Body: []byte{'h', 0xff, 'i'}}, "h\uFFFDi"},
		{"non-text names the type", &imv1.MessageContent{Type: "image", Body: []byte{1, 2, 3}}, "[image]"},
		{"a sealed text names the type", &imv1.MessageContent{Type: "text", Body: []byte("ciphertext"), KeyId: 7}, "[text]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := preview(c.m)
			if got != c.want || len(got) > maxPreviewBytes || !utf8.ValidString(got) {
				t.Fatalf("preview = %q (%d bytes), want %q", got, len(got), c.want)
			}
		})
	}
}

// FuzzPreview: message bodies come from clients; the preview must always
// be valid UTF-8 within the limit, and a prefix of the sanitized body.
func FuzzPreview(f *testing.F) {
	f.Add([]byte("hello"))
	f.Add([]byte(strings.Repeat("é", 100)))
	f.Add([]byte{0xf0, 0x9f, 0x98})
	f.Fuzz(func(t *testing.T, body []byte) {
		got := preview(&imv1.MessageContent{Type: "text", Body: body})
		if len(got) > maxPreviewBytes || !utf8.ValidString(got) {
			t.Fatalf("preview %q: %d bytes, valid=%v", got, len(got), utf8.ValidString(got))
		}
		if !strings.HasPrefix(strings.ToValidUTF8(string(body), "\uFFFD"), got) {
			t.Fatalf("preview %q is not a prefix of the body", got)
		}
	})
}

func TestIsFatal(t *testing.T) {
	cases := []struct {
		err  error
		want bool
	}{
		{kgo.ErrClientClosed, true},
		{fmt.Errorf("unable to join group session: %w", kerr.InvalidSessionTimeout), true},
		{kerr.NotCoordinator, false},
		{fmt.Errorf("heartbeat: %w", kerr.FencedInstanceID), true},
		{kerr.UnknownTopicOrPartition, false},
		{context.DeadlineExceeded, false},
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(c.err), func(t *testing.T) {
			if got := IsFatal(c.err); got != c.want {
				t.Fatalf("IsFatal(%v) = %v, want %v", c.err, got, c.want)
			}
		})
	}
}

func TestUsers(t *testing.T) {
	add := func(seq int64, users ...string) *imv1.SequencedEvent {
		return &imv1.SequencedEvent{SessionId: "s", Seq: seq, SenderUserId: "alice",
			Payload: &imv1.SequencedEvent_Membership{Membership: &imv1.MembershipChange{Op: imv1.MembershipChange_OP_ADD, UserIds: users}}}
	}
	cases := []struct {
		name   string
		events []routed
		dups   []*imv1.DuplicateAck
		want   []string
	}{
		{"one event", []routed{{ev: textEv("s", 1, "alice", ""), recipients: []string{"alice", "bob"}}}, nil, []string{"alice", "bob"}},
		{"later messages add only their sender", []routed{
			{ev: textEv("s", 1, "alice", ""), recipients: []string{"alice", "bob"}},
			{ev: textEv("s", 2, "zed", ""), recipients: []string{"alice", "bob", "zed"}},
		}, nil, []string{"alice", "bob", "zed"}},
		{"a membership event in between counts in full", []routed{
			{ev: textEv("s", 1, "alice", ""), recipients: []string{"alice", "bob"}},
			{ev: add(2, "carol"), recipients: []string{"alice", "bob", "carol"}},
			{ev: textEv("s", 3, "bob", ""), recipients: []string{"alice", "bob", "carol"}},
		}, nil, []string{"alice", "bob", "carol"}},
		{"sessions are separate", []routed{
			{ev: textEv("s", 1, "alice", ""), recipients: []string{"alice"}},
			{ev: textEv("t", 1, "dave", ""), recipients: []string{"dave", "erin"}},
		}, nil, []string{"alice", "dave", "erin"}},
		{"duplicate senders", []routed{{ev: textEv("s", 1, "alice", ""), recipients: []string{"alice"}}},
			[]*imv1.DuplicateAck{{SenderUserId: "frank"}, {SenderUserId: "alice"}}, []string{"alice", "frank"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := slices.Sorted(slices.Values(users(c.events, answers(c.dups))))
			if !slices.Equal(got, c.want) {
				t.Fatalf("users = %v, want %v", got, c.want)
			}
		})
	}
}

func answers(ds []*imv1.DuplicateAck) []answer {
	out := make([]answer, len(ds))
	for i, d := range ds {
		out[i] = duplicateAnswer(d)
	}
	return out
}
