package main

import (
	"math"
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

// TestCursorsBoundedByLastSeq attacks the cursors: a read or delivered seq
// beyond the session's last seq is lowered to it (seen_by does not count the
// reader for a message sent later), and a seq past wire.MaxSeq, whose seq+1
// would overflow, is refused invalid_field.
func TestCursorsBoundedByLastSeq(t *testing.T) {
	p := newPipeline(t)
	gw := p.gateway(nil)
	alice, bob := user("alice"), user("bob")
	a := p.connect(gw, alice, "phone")
	sid, _ := createGroup(a, bob)
	id := newID()
	a.send(sendFrame(sid, id, "one"))
	s1 := a.mustAckOK(id).Seq
	p.waitStored(sid, s1)
	b := p.connect(gw, bob, "laptop") // connected after: nothing pushed to it

	b.send(map[string]any{"op": "read", "req_id": "ahead", "session_id": sid, "seq": s1 + 1000})
	if r := b.result("ahead"); r.Op != wire.OpResult {
		t.Fatalf("read ahead: %+v", r)
	}
	storedCursor := func(query string) int64 {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			var seq int64
			err := p.pool.QueryRow(t.Context(), query, sid, bob).Scan(&seq)
			if err == nil {
				return seq
			}
			if time.Now().After(deadline) {
				t.Fatalf("no stored cursor: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if got := storedCursor(`SELECT read_seq FROM read_cursors WHERE session_id = $1 AND user_id = $2`); got != s1 {
		t.Fatalf("stored read cursor %d, want the session's last seq %d", got, s1)
	}
	id = newID()
	a.send(sendFrame(sid, id, "two, not read by bob"))
	s2 := a.mustAckOK(id).Seq
	p.waitStored(sid, s2)
	a.send(map[string]any{"op": "seen_by", "req_id": "sb", "session_id": sid, "seq": s2})
	if r := a.result("sb"); r.Op != wire.OpResult || r.Count != 0 || len(r.Users) != 0 {
		t.Fatalf("seen_by of a message bob never read: %+v, want nobody", r)
	}

	b.send(map[string]any{"op": "delivered", "req_id": "dl", "cursors": []map[string]any{{"session_id": sid, "seq": s2 + 1000}}})
	if r := b.result("dl"); r.Op != wire.OpResult {
		t.Fatalf("delivered ahead: %+v", r)
	}
	if got := storedCursor(`SELECT delivered_seq FROM delivery_cursors WHERE session_id = $1 AND user_id = $2`); got != s2 {
		t.Fatalf("stored delivery cursor %d, want the session's last seq %d", got, s2)
	}

	for _, f := range []map[string]any{
		{"op": "read", "req_id": "max1", "session_id": sid, "seq": int64(math.MaxInt64)},
		{"op": "delivered", "req_id": "max2", "cursors": []map[string]any{{"session_id": sid, "seq": int64(math.MaxInt64)}}},
		{"op": "seen_by", "req_id": "max3", "session_id": sid, "seq": int64(wire.MaxSeq) + 1},
	} {
		b.send(f)
		if r := b.result(f["req_id"].(string)); r.Op != wire.OpError || r.Error.Name != "invalid_field" {
			t.Fatalf("%s beyond wire.MaxSeq: %+v, want invalid_field", f["op"], r)
		}
	}
}
