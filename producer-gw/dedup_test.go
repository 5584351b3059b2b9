package main

import (
	"context"
	"testing"

	"github.com/seqflow/seqflow/internal/wire"
)

// TestClientMsgIDIsPerSender attacks the sequencer's dedup key: two users
// who pick the same client_msg_id in one session each get their own seq
// (not the other's as a duplicate), both messages are in the store under
// their senders, and after the sequencer restarts and rebuilds its window
// from the log, each one's retry still gets its own seq back.
func TestClientMsgIDIsPerSender(t *testing.T) {
	p := newPipeline(t)
	gw := p.gateway(nil)
	alice, bob := user("alice"), user("bob")
	a, b := p.connect(gw, alice, "phone"), p.connect(gw, bob, "phone")
	sid, _ := createGroup(a, bob)
	shared := newID()
	a.send(sendFrame(sid, shared, "alice's"))
	sa := a.mustAckOK(shared)
	b.send(sendFrame(sid, shared, "bob's"))
	sb := b.mustAckOK(shared)
	if sa.Seq == sb.Seq || sa.MsgID == sb.MsgID {
		t.Fatalf("bob's message got alice's seq %d (msg %s): the dedup key has no sender", sb.Seq, sb.MsgID)
	}
	p.waitStored(sid, max(sa.Seq, sb.Seq))
	for _, w := range []struct {
		sender string
		seq    int64
		body   string
	}{{alice, sa.Seq, "alice's"}, {bob, sb.Seq, "bob's"}} {
		var seq int64
		var body string
		err := p.pool.QueryRow(context.Background(), `SELECT seq, convert_from(body, 'UTF8') FROM messages WHERE session_id = $1 AND client_msg_id = $2 AND sender_user_id = $3`,
			sid, shared, w.sender).Scan(&seq, &body)
		if err != nil || seq != w.seq || body != w.body {
			t.Fatalf("stored message of %s: seq %d body %q (%v), want seq %d body %q", w.sender, seq, body, err, w.seq, w.body)
		}
	}

	// The window rebuilt from the log keeps the two apart.
	p.procs["sequencer"].Kill()
	if err := p.procs["sequencer"].Restart(); err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		c    *client
		want frame
	}{{b, sb}, {a, sa}} {
		r.c.send(sendFrame(sid, shared, "retry"))
		f := r.c.ackOf(shared)
		if f.Op != wire.OpAck || f.Seq != r.want.Seq || f.MsgID != r.want.MsgID {
			t.Fatalf("%s's retry after a restart: %+v, want seq %d msg %s", r.c.name, f, r.want.Seq, r.want.MsgID)
		}
	}
}
