package main

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/seqflow/seqflow/internal/wire"
)

// TestReadReceiptsOff: a user who turned read receipts off (over
// WebSocket; HTTP reads the setting back) still moves their own read
// cursor (changes shows it, their unread drops), but the other members get
// no receipt of kind read from them, on either gateway, and seen_by neither
// lists nor counts them; turned back on, their next read is shown again.
func TestReadReceiptsOff(t *testing.T) {
	p := newPipeline(t)
	gwA, gwB := p.gateway(nil), p.gateway(nil)
	alice, bob, carol := user("alice"), user("bob"), user("carol")
	a := p.connect(gwA, alice, "phone")
	sid, _ := createGroup(a, bob, carol)
	var seqs []int64
	for _, text := range []string{"one", "two"} {
		id := newID()
		a.send(sendFrame(sid, id, text))
		seqs = append(seqs, a.mustAckOK(id).Seq)
	}
	p.waitStored(sid, seqs[1])
	b := p.connect(gwB, bob, "laptop")
	c := p.connect(gwA, carol, "phone")
	a2 := p.connect(gwB, alice, "laptop")

	b.send(map[string]any{"op": "settings", "req_id": "s1", "read_receipts": false})
	if r := b.result("s1"); r.Op != wire.OpResult || r.ReadReceipts {
		t.Fatalf("settings: %+v", r)
	}
	if code, r := httpCall(t, gwA, p.token(bob, "cli", time.Hour), "POST", "/v1/settings", `{}`); code != http.StatusOK || r.ReadReceipts {
		t.Fatalf("settings over HTTP: %d %+v, want read_receipts false", code, r)
	}

	isRead := func(by string, seq int64) func(frame) bool {
		return func(f frame) bool {
			return f.Op == wire.OpReceipt && f.Kind == wire.ReceiptRead && f.SessionID == sid && f.UserID == by && f.Seq == seq
		}
	}
	read := func(cl *client, id string, seq int64) {
		t.Helper()
		cl.send(map[string]any{"op": "read", "req_id": id, "session_id": sid, "seq": seq})
		if r := cl.result(id); r.Op != wire.OpResult {
			t.Fatalf("read: %+v", r)
		}
	}
	read(b, "r1", seqs[1])
	read(c, "r2", seqs[0])
	// Carol's receipt is shown; bob's, in the same flush window, is not.
	a.expect("carol's read cursor", isRead(carol, seqs[0]))
	for _, cl := range []*client{a, a2, c} {
		if f, ok := cl.expectWithin(1200*time.Millisecond, "bob's read cursor", func(f frame) bool {
			return f.Op == wire.OpReceipt && f.Kind == wire.ReceiptRead && f.UserID == bob
		}); ok {
			t.Fatalf("%s got the read cursor of bob, who turned receipts off: %+v", cl.name, f)
		}
	}

	// Bob's own cursor moved all the same.
	waitRead := func(want int64) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for i := 0; ; i++ {
			id := "c" + string(rune('a'+i%26))
			b.send(map[string]any{"op": "changes", "req_id": id})
			r := b.result(id)
			if len(r.Sessions) == 1 && r.Sessions[0].ReadSeq == want && r.Sessions[0].Unread == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("bob's changes = %+v, want read_seq %d and no unread", r, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitRead(seqs[1])

	seenBy := func(id string, seq int64) frame {
		t.Helper()
		a.send(map[string]any{"op": "seen_by", "req_id": id, "session_id": sid, "seq": seq})
		return a.result(id)
	}
	waitSeen := func(seq int64, want []string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			r := seenBy("sb", seq)
			if r.Op == wire.OpResult && slices.Equal(r.Users, want) && r.Count == int64(len(want)) && r.Members == 3 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("seen_by %d = %+v, want users %v (count %d) of 3 members", seq, r, want, len(want))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// Bob's stored cursor is past both, carol's past the first.
	waitSeen(seqs[0], []string{carol})
	waitSeen(seqs[1], []string{})

	// Back on: the next read is shown, and seen_by lists bob again.
	b.send(map[string]any{"op": "settings", "req_id": "s2", "read_receipts": true})
	if r := b.result("s2"); r.Op != wire.OpResult || !r.ReadReceipts {
		t.Fatalf("settings: %+v", r)
	}
	read(b, "r3", seqs[1])
	a.expect("bob's read cursor, shown again", isRead(bob, seqs[1]))
	a2.expect("bob's read cursor, shown again", isRead(bob, seqs[1]))
	want := []string{bob, carol}
	slices.Sort(want)
	waitSeen(seqs[0], want)
}
