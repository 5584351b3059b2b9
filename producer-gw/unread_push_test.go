package main

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/seqflow/seqflow/internal/wire"
)

// TestUnreadOnPush: after changes, every chat message and recall pushed to
// a connection carries the user's unread count of its session and the
// total, and a read on any of the user's devices sends an unread frame to
// each; at every step the numbers equal what changes answers once the
// store holds the step: a message of another member (+1), the user's own
// message (no change), a recall of an unread message (-1), a read below
// what the seed counted (the unread after the cursor, recounted by the
// store), a read to the end (0), on two devices on two gateways, over two
// sessions.
func TestUnreadOnPush(t *testing.T) {
	p := newPipeline(t)
	gwA, gwB := p.gateway(nil), p.gateway(nil)
	alice, bob, carol := user("alice"), user("bob"), user("carol")
	a := p.connect(gwA, alice, "phone")
	c := p.connect(gwB, carol, "phone")
	sid, _ := createGroup(a, bob, carol)
	other, _ := createGroup(a, bob)
	send := func(cl *client, session, text string) int64 {
		t.Helper()
		id := newID()
		cl.send(sendFrame(session, id, text))
		return cl.mustAckOK(id).Seq
	}
	var seqs []int64
	for i := range 3 {
		seqs = append(seqs, send(a, sid, fmt.Sprint("before ", i)))
	}
	last := send(a, other, "elsewhere")
	p.waitStored(sid, seqs[2])
	p.waitStored(other, last)

	b1 := p.connect(gwB, bob, "laptop")
	b2 := p.connect(gwA, bob, "phone")
	token := p.token(bob, "probe", time.Hour)
	// stored waits until changes (over HTTP, which seeds nothing) answers
	// unread for sid and total, and fails after 20 s.
	stored := func(unread, total int64) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			code, r := httpCall(t, gwA, token, "GET", "/v1/changes", "")
			var got int64 = -1
			for _, s := range r.Sessions {
				if s.SessionID == sid {
					got = s.Unread
				}
			}
			if code == http.StatusOK && got == unread && r.TotalUnread == total {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("changes: unread %d of %d, want %d of %d (the pushed counts)", got, r.TotalUnread, unread, total)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for i, b := range []*client{b1, b2} {
		id := fmt.Sprint("seed", i)
		b.send(map[string]any{"op": "changes", "req_id": id})
		if r := b.result(id); r.TotalUnread != 4 {
			t.Fatalf("%s changes: %+v, want 4 unread", b.name, r)
		}
	}
	// pushed checks the counts an event carries on both devices, and that
	// the store agrees.
	pushed := func(seq, unread, total int64) {
		t.Helper()
		for _, b := range []*client{b1, b2} {
			f := b.eventOf(sid, seq)
			if f.Unread == nil || *f.Unread != unread || f.TotalUnread != total {
				t.Fatalf("%s: event %d, want unread %d of %d: %s", b.name, seq, unread, total, f.raw)
			}
		}
		stored(unread, total)
	}
	// unreadFrame checks the unread frame a read sends both devices.
	unreadFrame := func(readSeq, unread, total int64) {
		t.Helper()
		for _, b := range []*client{b1, b2} {
			f := b.expect("unread frame", func(f frame) bool {
				return f.Op == wire.OpUnread && f.SessionID == sid && f.ReadSeq == readSeq
			})
			if f.Unread == nil || *f.Unread != unread || f.TotalUnread != total {
				t.Fatalf("%s: unread frame %s, want %d of %d", b.name, f.raw, unread, total)
			}
		}
		stored(unread, total)
	}

	m4 := send(a, sid, "four")
	pushed(m4, 4, 5)
	m5 := send(c, sid, "five")
	pushed(m5, 5, 6)
	own := send(b1, sid, "mine")
	pushed(own, 5, 6)

	id := newID()
	a.send(map[string]any{"op": "recall", "client_msg_id": id, "session_id": sid, "target_seq": m4})
	pushed(a.mustAckOK(id).Seq, 4, 5)
	// A recall of a message the seed counted.
	id = newID()
	a.send(map[string]any{"op": "recall", "client_msg_id": id, "session_id": sid, "target_seq": seqs[0]})
	pushed(a.mustAckOK(id).Seq, 3, 4)

	// A read below the seed's range, on one device: seqs[2] and five stay.
	b1.send(map[string]any{"op": "read", "req_id": "r1", "session_id": sid, "seq": seqs[1]})
	if r := b1.result("r1"); r.Op != wire.OpResult {
		t.Fatalf("read: %+v", r)
	}
	unreadFrame(seqs[1], 2, 3)
	// To the end, on the other device.
	b2.send(map[string]any{"op": "read", "req_id": "r2", "session_id": sid, "seq": own})
	if r := b2.result("r2"); r.Op != wire.OpResult {
		t.Fatalf("read: %+v", r)
	}
	unreadFrame(own, 0, 1)
	m6 := send(a, sid, "six")
	pushed(m6, 1, 2)
}
