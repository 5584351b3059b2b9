package main

import (
	"slices"
	"testing"
	"time"

	"github.com/seqflow/seqflow/internal/wire"
)

// TestSeen: a read receipt's cursor reaches the other members as a receipt
// frame of kind read (on this and another gateway, not the reader), a
// delivery cursor as one of kind delivered, and seen_by answers from the
// stored cursors who has read up to a seq, the sender left out.
func TestSeen(t *testing.T) {
	p := newPipeline(t)
	gwA, gwB := p.gateway(nil), p.gateway(nil)
	alice, bob, carol, dave := user("alice"), user("bob"), user("carol"), user("dave")
	a := p.connect(gwA, alice, "phone")
	sid, _ := createGroup(a, bob, carol)
	var seqs []int64
	for _, text := range []string{"one", "two", "three"} {
		id := newID()
		a.send(sendFrame(sid, id, text))
		seqs = append(seqs, a.mustAckOK(id).Seq)
	}
	p.waitStored(sid, seqs[2])
	b := p.connect(gwB, bob, "laptop")
	c := p.connect(gwA, carol, "phone")
	d := p.connect(gwB, dave, "phone")

	b.send(map[string]any{"op": "read", "req_id": "r1", "session_id": sid, "seq": seqs[1]})
	if r := b.result("r1"); r.Op != wire.OpResult {
		t.Fatalf("read: %+v", r)
	}
	isReceipt := func(kind, by string, seq int64) func(frame) bool {
		return func(f frame) bool {
			return f.Op == wire.OpReceipt && f.Kind == kind && f.SessionID == sid && f.UserID == by && f.Seq == seq
		}
	}
	isSeen := func(by string, seq int64) func(frame) bool { return isReceipt(wire.ReceiptRead, by, seq) }
	a.expect("bob's read cursor", isSeen(bob, seqs[1]))
	c.expect("bob's read cursor", isSeen(bob, seqs[1]))
	if f, ok := b.expectWithin(700*time.Millisecond, "own cursor", isSeen(bob, seqs[1])); ok {
		t.Fatalf("bob got his own cursor back: %+v", f)
	}

	// A delivered cursor from bob's device: a receipt of kind delivered.
	b.send(map[string]any{"op": "delivered", "cursors": []map[string]any{{"session_id": sid, "seq": seqs[2]}}})
	a.expect("bob's delivery cursor", isReceipt(wire.ReceiptDelivered, bob, seqs[2]))
	c.expect("bob's delivery cursor", isReceipt(wire.ReceiptDelivered, bob, seqs[2]))

	// seen_by reads the stored cursors, which trail the receipt.
	seenBy := func(cl *client, id string, seq int64) frame {
		t.Helper()
		cl.send(map[string]any{"op": "seen_by", "req_id": id, "session_id": sid, "seq": seq})
		return cl.result(id)
	}
	waitSeen := func(seq int64, want []string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			r := seenBy(a, "sb", seq)
			if r.Op == wire.OpResult && slices.Equal(r.Users, want) && r.Count == int64(len(want)) && r.Members == 3 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("seen_by %d = %+v, want users %v of 3 members", seq, r, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitSeen(seqs[1], []string{bob})
	waitSeen(seqs[0], []string{bob})
	if r := seenBy(a, "sb3", seqs[2]); r.Count != 0 || len(r.Users) != 0 {
		t.Fatalf("seen_by of the unread last message: %+v", r)
	}
	c.send(map[string]any{"op": "read", "req_id": "r2", "session_id": sid, "seq": seqs[2]})
	if r := c.result("r2"); r.Op != wire.OpResult {
		t.Fatalf("read: %+v", r)
	}
	// The sender's own cursor never counts for its message.
	a.send(map[string]any{"op": "read", "req_id": "r3", "session_id": sid, "seq": seqs[2]})
	if r := a.result("r3"); r.Op != wire.OpResult {
		t.Fatalf("read: %+v", r)
	}
	b.expect("alice's read cursor", isSeen(alice, seqs[2]))
	want := []string{bob, carol}
	slices.Sort(want)
	waitSeen(seqs[1], want)
	waitSeen(seqs[2], []string{carol})
	if r := seenBy(d, "sbd", seqs[0]); r.Op != wire.OpError || r.Error.Name != "not_a_member" {
		t.Fatalf("seen_by from a non-member: %+v, want not_a_member", r)
	}
}
