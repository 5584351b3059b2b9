package store

import (
	"slices"
	"strings"
	"testing"

	"github.com/seqflow/seqflow/schemas/imv1"
)

func TestPreview(t *testing.T) {
	long := strings.Repeat("a", PreviewBytes-1) + "é" // the é straddles the cut
	for _, c := range []struct {
		name, ct string
		body     []byte
		want     string
	}{
		{"text", "text", []byte("hello"), "hello"},
		{"image", "image", []byte{0xff}, "[image]"},
		{"cut on a rune boundary", "text", []byte(long), strings.Repeat("a", PreviewBytes-1)},
		{"invalid UTF-8 dropped", "text", []byte("a\xffb"), "ab"},
		{"NUL dropped", "text", []byte("a\x00b"), "ab"},
	} {
		t.Run(c.name, func(t *testing.T) {
			require(t, Preview(c.ct, c.body), c.want, "preview")
		})
	}
}

func TestRowOfRejects(t *testing.T) {
	ok := func() *imv1.SequencedEvent { return msgEv("s", 5, "u", "x") }
	for _, c := range []struct {
		name string
		edit func(*imv1.SequencedEvent)
		want string
	}{
		{"no session", func(e *imv1.SequencedEvent) { e.SessionId = "" }, "session_id is empty"},
		{"seq 0", func(e *imv1.SequencedEvent) { e.Seq = 0 }, "not positive"},
		{"msg_id 0", func(e *imv1.SequencedEvent) { e.MsgId = 0 }, "msg_id is 0"},
		{"no payload", func(e *imv1.SequencedEvent) { e.Payload = nil }, "no payload"},
		{"NUL in sender", func(e *imv1.SequencedEvent) { e.SenderUserId = "a\x00" }, "sender_user_id"},
		{"bad UTF-8 in session", func(e *imv1.SequencedEvent) { e.SessionId = "\xff" }, "session_id"},
		{"edit of a later seq", func(e *imv1.SequencedEvent) {
			e.Payload = &imv1.SequencedEvent_Edit{Edit: &imv1.Edit{TargetSeq: 5}}
		}, "targets seq 5"},
		{"recall of seq 0", func(e *imv1.SequencedEvent) { e.Payload = &imv1.SequencedEvent_Recall{Recall: &imv1.Recall{}} }, "targets seq 0"},
		{"membership without op", func(e *imv1.SequencedEvent) {
			e.Payload = &imv1.SequencedEvent_Membership{Membership: &imv1.MembershipChange{UserIds: []string{"a"}}}
		}, "membership op"},
		{"membership without users", func(e *imv1.SequencedEvent) {
			e.Payload = &imv1.SequencedEvent_Membership{Membership: &imv1.MembershipChange{Op: imv1.MembershipChange_OP_ADD}}
		}, "names no users"},
		{"empty member id", func(e *imv1.SequencedEvent) {
			e.Payload = &imv1.SequencedEvent_SessionCreate{SessionCreate: &imv1.SessionCreate{MemberUserIds: []string{""}}}
		}, "member user id"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := ok()
			c.edit(e)
			_, err := RowOf(e, 0, 0)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("RowOf: %v, want an error mentioning %q", err, c.want)
			}
		})
	}
}

func TestMemberLayers(t *testing.T) {
	rows := rowsOf(t,
		createEv("s", 1, "a", "t", "b"),
		memberEv("s", 2, "a", opRemove, "b"),
		memberEv("s", 3, "a", opAdd, "b", "c"),
		memberEv("t", 1, "a", opAdd, "b"),
	)
	require(t, memberLayers(rows, []int{0, 1, 2, 3}), 3, "layers (b in s three times)")
	require(t, memberLayers(rows, []int{3}), 1, "layers")
	require(t, memberLayers(rows[:0], nil), 0, "layers of nothing")
}

func TestProjectedRows(t *testing.T) {
	rows := []Row{
		{Kind: KindMessage},
		{Kind: KindSessionCreate, MemberIDs: []string{"a"}},
		{Kind: KindEdit},
		{Kind: KindRecall},
		{Kind: KindMembership, MemberIDs: []string{"b"}},
		{Kind: KindMessage},
	}
	for _, c := range []struct {
		name string
		keep []int
		want []int
	}{
		{"all kept", []int{0, 1, 2, 3, 4, 5}, []int{1, 2, 3, 4}},
		{"messages only", []int{0, 5}, nil},
		{"some kept", []int{0, 2, 4}, []int{2, 4}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := projected(rows, c.keep); !slices.Equal(got, c.want) {
				t.Fatalf("projected: got %v, want %v", got, c.want)
			}
		})
	}
}

func TestCompareKeyIsBytewise(t *testing.T) {
	for _, c := range []struct {
		a, b Row
		want int
	}{
		{Row{SessionID: "B", Seq: 9}, Row{SessionID: "a", Seq: 1}, -1}, // 'B' < 'a' bytewise, not in a linguistic collation
		{Row{SessionID: "s", Seq: 2}, Row{SessionID: "s", Seq: 10}, -1},
		{Row{SessionID: "s", Seq: 3}, Row{SessionID: "s", Seq: 3}, 0},
		{Row{SessionID: "s-10", Seq: 1}, Row{SessionID: "s-9", Seq: 1}, -1},
	} {
		t.Run(c.a.SessionID+"/"+c.b.SessionID, func(t *testing.T) {
			if got := compareKey(&c.a, &c.b); got != c.want {
				t.Fatalf("compareKey: got %d, want %d", got, c.want)
			}
			if got := compareKey(&c.b, &c.a); got != -c.want {
				t.Fatalf("compareKey reversed: got %d, want %d", got, -c.want)
			}
		})
	}
}
