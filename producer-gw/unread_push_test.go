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

// TestUnreadOnLeave: when the user leaves a session, removed by another
// member or by their own leave, the membership event pushed to their
// connection carries the session's count, 0, and the total without it,
// so an app's total drops with the session; the counts of the user's
// other sessions go on from there.
func TestUnreadOnLeave(t *testing.T) {
	p := newPipeline(t)
	gw := p.gateway(nil)
	alice, bob := user("alice"), user("bob")
	a := p.connect(gw, alice, "phone")
	g1, _ := createGroup(a, bob)
	g2, _ := createGroup(a, bob)
	send := func(cl *client, v map[string]any) int64 {
		t.Helper()
		id := newID()
		v["client_msg_id"] = id
		cl.send(v)
		return cl.mustAckOK(id).Seq
	}
	msg := func(session string) int64 {
		t.Helper()
		return send(a, sendFrame(session, "", "x"))
	}
	msg(g1)
	p.waitStored(g1, msg(g1))
	p.waitStored(g2, msg(g2))

	b := p.connect(gw, bob, "phone")
	b.send(map[string]any{"op": "changes", "req_id": "seed"})
	if r := b.result("seed"); r.TotalUnread != 3 {
		t.Fatalf("changes: %s, want 3 unread", r.raw)
	}
	counts := func(session string, seq, unread, total int64) {
		t.Helper()
		f := b.eventOf(session, seq)
		if f.Unread == nil || *f.Unread != unread || f.TotalUnread != total {
			t.Fatalf("event %s/%d: %s, want unread %d of %d", session, seq, f.raw, unread, total)
		}
	}
	// alice removes bob from g1: its 2 leave the total.
	rm := send(a, map[string]any{"op": "members", "action": "remove", "session_id": g1, "user_ids": []string{bob}})
	counts(g1, rm, 0, 1)
	counts(g2, msg(g2), 2, 2)
	// bob leaves g2 himself.
	counts(g2, send(b, map[string]any{"op": "members", "action": "leave", "session_id": g2}), 0, 0)
}
