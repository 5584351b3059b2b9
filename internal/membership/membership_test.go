package membership

import (
	"fmt"
	"slices"
	"testing"

	"github.com/seqflow/seqflow/schemas/imv1"
)

func create(session string, seq int64, sender string, members ...string) *imv1.SequencedEvent {
	return &imv1.SequencedEvent{SessionId: session, Seq: seq, SenderUserId: sender,
		Payload: &imv1.SequencedEvent_SessionCreate{SessionCreate: &imv1.SessionCreate{MemberUserIds: members}}}
}

func change(session string, seq int64, sender string, op imv1.MembershipChange_Op, users ...string) *imv1.SequencedEvent {
	return &imv1.SequencedEvent{SessionId: session, Seq: seq, SenderUserId: sender,
		Payload: &imv1.SequencedEvent_Membership{Membership: &imv1.MembershipChange{Op: op, UserIds: users}}}
}

func msg(session string, seq int64, sender string) *imv1.SequencedEvent {
	return &imv1.SequencedEvent{SessionId: session, Seq: seq, SenderUserId: sender,
		Payload: &imv1.SequencedEvent_Message{Message: &imv1.MessageContent{Type: "text"}}}
}

const (
	add    = imv1.MembershipChange_OP_ADD
	remove = imv1.MembershipChange_OP_REMOVE
)

func TestApply(t *testing.T) {
	type step struct {
		ev    *imv1.SequencedEvent
		want  []string // recipients, sorted
		known bool
	}
	cases := []struct {
		name        string
		steps       []step
		wantMembers []string
	}{
		{"create includes the sender", []step{
			{create("s", 1, "alice", "bob"), []string{"alice", "bob"}, true},
			{msg("s", 2, "bob"), []string{"alice", "bob"}, true},
		}, []string{"alice", "bob"}},
		{"added member receives the add and what follows, not before", []step{
			{create("s", 1, "alice", "bob"), []string{"alice", "bob"}, true},
			{msg("s", 2, "alice"), []string{"alice", "bob"}, true},
			{change("s", 3, "alice", add, "carol"), []string{"alice", "bob", "carol"}, true},
			{msg("s", 4, "bob"), []string{"alice", "bob", "carol"}, true},
		}, []string{"alice", "bob", "carol"}},
		{"removed member receives the removal and nothing after", []step{
			{create("s", 1, "alice", "bob", "carol"), []string{"alice", "bob", "carol"}, true},
			{change("s", 2, "alice", remove, "carol"), []string{"alice", "bob", "carol"}, true},
			{msg("s", 3, "alice"), []string{"alice", "bob"}, true},
		}, []string{"alice", "bob"}},
		{"a non-member sender still gets its own event", []step{
			{create("s", 1, "alice", "bob"), []string{"alice", "bob"}, true},
			{change("s", 2, "alice", remove, "bob"), []string{"alice", "bob"}, true},
			{msg("s", 3, "bob"), []string{"alice", "bob"}, true},
			{msg("s", 4, "alice"), []string{"alice"}, true},
		}, []string{"alice"}},
		{"unknown session: only the sender", []step{
			{msg("s", 5, "dave"), []string{"dave"}, false},
			{change("s", 6, "dave", remove, "erin"), []string{"dave"}, false},
		}, nil},
		{"membership add on an unknown session starts it", []step{
			{change("s", 7, "dave", add, "erin"), []string{"dave", "erin"}, true},
		}, []string{"erin"}},
		{"re-read events change nothing", []step{
			{create("s", 1, "alice", "bob"), []string{"alice", "bob"}, true},
			{change("s", 2, "alice", remove, "bob"), []string{"alice", "bob"}, true},
			{change("s", 2, "alice", remove, "bob"), []string{"alice"}, true},
			{change("s", 1, "alice", add, "bob"), []string{"alice"}, true},
		}, []string{"alice"}},
		{"removing a non-member is a no-op", []step{
			{create("s", 1, "alice"), []string{"alice"}, true},
			{change("s", 2, "alice", remove, "zed"), []string{"alice"}, true},
		}, []string{"alice"}},
		{"re-adding after removal", []step{
			{create("s", 1, "alice", "bob"), []string{"alice", "bob"}, true},
			{change("s", 2, "alice", remove, "bob"), []string{"alice", "bob"}, true},
			{msg("s", 3, "alice"), []string{"alice"}, true},
			{change("s", 4, "alice", add, "bob"), []string{"alice", "bob"}, true},
		}, []string{"alice", "bob"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := NewPartition()
			for i, st := range c.steps {
				r := p.Apply(st.ev)
				got := slices.Sorted(slices.Values(r.Recipients))
				if !slices.Equal(got, st.want) || r.Known != st.known {
					t.Fatalf("step %d (seq %d): recipients %v known=%v, want %v known=%v", i, st.ev.Seq, got, r.Known, st.want, st.known)
				}
			}
			if got := p.Members("s"); !slices.Equal(got, c.wantMembers) {
				t.Fatalf("members %v, want %v", got, c.wantMembers)
			}
		})
	}
}

func TestApplyLargeGroup(t *testing.T) {
	members := make([]string, 10_000)
	for i := range members {
		members[i] = fmt.Sprintf("u%05d", i)
	}
	p := NewPartition()
	p.Apply(create("big", 1, members[0], members...))
	r := p.Apply(msg("big", 2, members[1]))
	if len(r.Recipients) != len(members) {
		t.Fatalf("%d recipients, want %d", len(r.Recipients), len(members))
	}
}
