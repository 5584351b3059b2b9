package export

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/schemas/imv1"
)

// record makes a record of im.sequenced.v1 at offset off of partition 2.
func record(t *testing.T, off int64, ev *imv1.SequencedEvent) *kgo.Record {
	t.Helper()
	v, err := ev.MarshalVT()
	if err != nil {
		t.Fatal(err)
	}
	return &kgo.Record{Topic: "im.sequenced.v1", Partition: 2, Offset: off, Key: []byte(ev.SessionId), Value: v,
		Timestamp: time.UnixMilli(ev.ServerTsMs)}
}

func TestRowOf(t *testing.T) {
	const ts = 1_796_000_000_123
	base := func(seq int64) *imv1.SequencedEvent {
		return &imv1.SequencedEvent{SessionId: "s1", Seq: seq, MsgId: 7000 + seq, ClientMsgId: "c" + string(rune('a'+seq)),
			SenderUserId: "u1", SenderDeviceId: "d1", GatewayId: "gw1", ServerTsMs: ts, GatewayTsMs: ts - 5,
			UplinkPartition: 4, UplinkOffset: 99}
	}
	with := func(ev *imv1.SequencedEvent, set func(*imv1.SequencedEvent)) *imv1.SequencedEvent { set(ev); return ev }
	for _, tc := range []struct {
		name string
		ev   *imv1.SequencedEvent
		want func(r Row) bool
	}{
		{"text message", with(base(1), func(e *imv1.SequencedEvent) {
			e.Payload = &imv1.SequencedEvent_Message{Message: &imv1.MessageContent{Type: "text", Body: []byte("héllo")}}
		}), func(r Row) bool {
			return r.EventType == EventMessage && *r.ContentType == "text" && string(r.Body) == "héllo" && *r.BodyText == "héllo" &&
				r.TargetSeq == nil && r.MemberUserIDs == nil && r.SessionID == "s1" && r.Seq == 1 && r.MsgID == 7001 &&
				r.ServerTsMs == ts && r.ServerTime.Equal(time.UnixMilli(ts)) && r.GatewayTsMs == ts-5 &&
				r.KafkaPartition == 2 && r.KafkaOffset == 10 && r.UplinkPart == 4 && r.UplinkOffset == 99
		}},
		{"sealed message: the ciphertext and its key, no body_text", with(base(6), func(e *imv1.SequencedEvent) {
			e.Payload = &imv1.SequencedEvent_Message{Message: &imv1.MessageContent{Type: "text", Body: []byte("ciphertext"), KeyId: 42}}
		}), func(r Row) bool {
			return r.BodyText == nil && string(r.Body) == "ciphertext" && r.BodyKeyID != nil && *r.BodyKeyID == 42
		}},
		{"binary message has no body_text", with(base(2), func(e *imv1.SequencedEvent) {
			e.Payload = &imv1.SequencedEvent_Message{Message: &imv1.MessageContent{Type: "image", Body: []byte{0xff, 0xfe, 0}}}
		}), func(r Row) bool { return r.BodyText == nil && len(r.Body) == 3 && *r.ContentType == "image" }},
		{"empty body is empty, not NULL", with(base(3), func(e *imv1.SequencedEvent) {
			e.Payload = &imv1.SequencedEvent_Message{Message: &imv1.MessageContent{Type: "text"}}
		}), func(r Row) bool { return r.Body != nil && len(r.Body) == 0 && r.BodyText != nil && *r.BodyText == "" }},
		{"edit", with(base(4), func(e *imv1.SequencedEvent) {
			e.Payload = &imv1.SequencedEvent_Edit{Edit: &imv1.Edit{TargetSeq: 1, Content: &imv1.MessageContent{Type: "text", Body: []byte("fixed")}}}
		}), func(r Row) bool { return r.EventType == EventEdit && *r.TargetSeq == 1 && *r.BodyText == "fixed" }},
		{"recall", with(base(5), func(e *imv1.SequencedEvent) {
			e.Payload = &imv1.SequencedEvent_Recall{Recall: &imv1.Recall{TargetSeq: 4}}
		}), func(r Row) bool {
			return r.EventType == EventRecall && *r.TargetSeq == 4 && r.Body == nil && r.ContentType == nil
		}},
		{"membership", with(base(6), func(e *imv1.SequencedEvent) {
			e.Payload = &imv1.SequencedEvent_Membership{Membership: &imv1.MembershipChange{Op: imv1.MembershipChange_OP_REMOVE, UserIds: []string{"u2", "u3"}}}
		}), func(r Row) bool {
			return r.EventType == EventMembership && *r.MembershipOp == "remove" && slices.Equal(r.MemberUserIDs, []string{"u2", "u3"})
		}},
		{"session create", with(base(7), func(e *imv1.SequencedEvent) {
			e.Payload = &imv1.SequencedEvent_SessionCreate{SessionCreate: &imv1.SessionCreate{Kind: imv1.SessionKind_SESSION_KIND_GROUP, Title: "team", MemberUserIds: []string{"u1", "u2"}}}
		}), func(r Row) bool {
			return r.EventType == EventSessionCreate && *r.SessionKind == "group" && *r.SessionTitle == "team" && len(r.MemberUserIDs) == 2
		}},
		{"group: set role", with(base(9), func(e *imv1.SequencedEvent) {
			e.Payload = &imv1.SequencedEvent_Group{Group: &imv1.GroupChange{Op: &imv1.GroupChange_SetRole_{SetRole: &imv1.GroupChange_SetRole{UserId: "u2", Role: imv1.GroupRole_GROUP_ROLE_ADMIN}}}}
		}), func(r Row) bool {
			var g imv1.GroupChange
			return r.EventType == EventGroup && *r.MembershipOp == "set_role" && slices.Equal(r.MemberUserIDs, []string{"u2"}) &&
				*r.ContentType == "seqflow.im.v1.GroupChange" && proto.Unmarshal(r.Body, &g) == nil && g.GetSetRole().GetRole() == imv1.GroupRole_GROUP_ROLE_ADMIN
		}},
		{"group: join names its sender", with(base(10), func(e *imv1.SequencedEvent) {
			e.Payload = &imv1.SequencedEvent_Group{Group: &imv1.GroupChange{Op: &imv1.GroupChange_Join_{Join: &imv1.GroupChange_Join{ByInviteCode: true}}}}
		}), func(r Row) bool {
			return r.EventType == EventGroup && *r.MembershipOp == "join" && slices.Equal(r.MemberUserIDs, []string{"u1"})
		}},
		{"invalid UTF-8 in a string is undecodable", with(base(8), func(e *imv1.SequencedEvent) {
			e.SenderUserId = "\xff"
			e.Payload = &imv1.SequencedEvent_Message{Message: &imv1.MessageContent{Type: "text"}}
		}), func(r Row) bool {
			return r.EventType == EventUndecodable && r.SessionID == "s1" && len(r.Body) > 0 && r.ServerTsMs == ts && r.SenderUserID == ""
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if r := rowOf(record(t, 10, tc.ev)); !tc.want(r) {
				t.Fatalf("row %+v", r)
			}
		})
	}
	t.Run("garbage is undecodable, with the raw value", func(t *testing.T) {
		r := rowOf(&kgo.Record{Partition: 2, Offset: 11, Key: []byte("s9"), Value: []byte{0xff, 0xff, 0xff}, Timestamp: time.UnixMilli(ts)})
		if r.EventType != EventUndecodable || string(r.Body) != "\xff\xff\xff" || r.SessionID != "s9" || r.KafkaOffset != 11 {
			t.Fatalf("row %+v", r)
		}
	})
}

// TestWriteFiles drives the write path without Kafka: files split at
// MaxRows and at hour boundaries, carry contiguous offset ranges in their
// names, read back as the rows written, and a second exporter resumes
// after them without writing anything twice.
func TestWriteFiles(t *testing.T) {
	ctx := context.Background()
	root := filepath.Join(t.TempDir(), "export")
	newExporter := func() *Exporter {
		e, err := New(Config{Brokers: []string{"unused:9092"}, Topic: "im.sequenced.v1", Store: &Dir{Root: root}, MaxRows: 4})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.resume(ctx, map[int32]kgo.Offset{2: kgo.NewOffset().AtStart()}); err != nil {
			t.Fatal(err)
		}
		return e
	}
	hour := HourOf(1_796_000_000_000).UnixMilli()
	var recs []*kgo.Record
	off := int64(100)
	for i := range 11 {
		ts := hour + 3_599_000 + int64(i)*200 // crosses into the next hour at i=5
		if i == 8 {
			off += 2 // a transaction marker
		}
		recs = append(recs, record(t, off, &imv1.SequencedEvent{SessionId: "s", Seq: int64(i + 1), MsgId: int64(500 + i), ServerTsMs: ts,
			Payload: &imv1.SequencedEvent_Message{Message: &imv1.MessageContent{Type: "text", Body: []byte("m")}}}))
		off++
	}
	e := newExporter()
	p := e.parts[2]
	if err := e.write(ctx, p, recs[:7]); err != nil {
		t.Fatal(err)
	}
	if err := e.write(ctx, p, recs[7:]); err != nil {
		t.Fatal(err)
	}
	if err := e.finish(ctx, p); err != nil {
		t.Fatal(err)
	}
	var names []string
	(&Dir{Root: root}).List(ctx, func(n string) error { names = append(names, n); return nil })
	slices.Sort(names)
	h0, h1 := HourOf(hour), HourOf(hour+3_600_000)
	want := []string{
		File{Partition: 2, First: 100, Last: 103, Hour: h0}.Path(), // full at 4
		File{Partition: 2, First: 104, Last: 104, Hour: h0}.Path(), // the hour ends
		File{Partition: 2, First: 105, Last: 110, Hour: h1}.Path(), // 108-109: the marker
		File{Partition: 2, First: 111, Last: 112, Hour: h1}.Path(),
	}
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Fatalf("files\n%v\nwant\n%v", names, want)
	}
	var seqs []int64
	for _, n := range want {
		rows, err := parquet.ReadFile[Row](filepath.Join(root, n))
		if err != nil {
			t.Fatalf("read %s: %v", n, err)
		}
		f, _ := ParsePath(n)
		for _, r := range rows {
			if r.KafkaOffset < f.First || r.KafkaOffset > f.Last || !HourOf(r.ServerTsMs).Equal(f.Hour) || *r.BodyText != "m" {
				t.Errorf("%s holds row %+v", n, r)
			}
			seqs = append(seqs, r.Seq)
		}
	}
	slices.Sort(seqs)
	if len(seqs) != 11 || seqs[0] != 1 || seqs[10] != 11 || len(slices.Compact(seqs)) != 11 {
		t.Fatalf("seqs read back %v, want 1..11 once each", seqs)
	}
	if e.Stats().Events != 11 || e.Stats().Files != 4 {
		t.Errorf("Stats = %+v", e.Stats())
	}

	e2 := newExporter()
	if p := e2.parts[2]; p.next != 113 {
		t.Fatalf("resumed at %d, want 113", p.next)
	}
	if err := e2.write(ctx, e2.parts[2], recs); err != nil {
		t.Fatal(err)
	}
	if e2.parts[2].cur != nil {
		t.Fatalf("records already in files were written again")
	}
}
