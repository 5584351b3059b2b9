package membership

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/schemas/imv1"
)

// FuzzApply applies arbitrary records of im.sequenced.v1 (outside input:
// anything can write a topic), decoded as the pusher decodes them, in
// order: it must never panic, every result must hold the sender exactly
// once and no user twice, and a replayed event must change no membership.
// The input is a series of records, each a length byte and that many bytes.
func FuzzApply(f *testing.F) {
	enc := func(evs ...*imv1.SequencedEvent) []byte {
		var out []byte
		for _, e := range evs {
			b, _ := proto.Marshal(e)
			out = append(out, byte(len(b)))
			out = append(out, b...)
		}
		return out
	}
	create := &imv1.SequencedEvent{SessionId: "s", Seq: 1, SenderUserId: "a",
		Payload: &imv1.SequencedEvent_SessionCreate{SessionCreate: &imv1.SessionCreate{MemberUserIds: []string{"b", "c"}}}}
	add := &imv1.SequencedEvent{SessionId: "s", Seq: 2, SenderUserId: "a",
		Payload: &imv1.SequencedEvent_Membership{Membership: &imv1.MembershipChange{Op: imv1.MembershipChange_OP_ADD, UserIds: []string{"d", "a"}}}}
	remove := &imv1.SequencedEvent{SessionId: "s", Seq: 3, SenderUserId: "b",
		Payload: &imv1.SequencedEvent_Membership{Membership: &imv1.MembershipChange{Op: imv1.MembershipChange_OP_REMOVE, UserIds: []string{"b", "zz"}}}}
	msg := &imv1.SequencedEvent{SessionId: "s", Seq: 4, SenderUserId: "x",
		Payload: &imv1.SequencedEvent_Message{Message: &imv1.MessageContent{Type: "text", Body: []byte("hi")}}}
	f.Add(enc(create, add, remove, msg))
	f.Add(enc(msg, create, create, remove, remove))
	f.Add([]byte{3, 0xff, 0x01, 0x02})
	f.Fuzz(func(t *testing.T, data []byte) {
		p := NewPartition()
		for len(data) > 0 {
			n := int(data[0])
			data = data[1:]
			if n > len(data) {
				n = len(data)
			}
			var ev imv1.SequencedEvent
			err := proto.Unmarshal(data[:n], &ev)
			data = data[n:]
			if err != nil || ev.SessionId == "" {
				continue // the pusher skips these too
			}
			before := p.Members(ev.SessionId)
			r := p.Apply(&ev)
			if slices.Index(r.Recipients, ev.SenderUserId) < 0 {
				t.Fatalf("sender %q not among recipients %q", ev.SenderUserId, r.Recipients)
			}
			seen := map[string]bool{}
			for _, u := range r.Recipients {
				if seen[u] {
					t.Fatalf("%q twice in %q", u, r.Recipients)
				}
				seen[u] = true
			}
			if r.Replayed && !slices.Equal(before, p.Members(ev.SessionId)) {
				t.Fatalf("replayed seq %d changed members %q to %q", ev.Seq, before, p.Members(ev.SessionId))
			}
		}
	})
}
