package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/coder/websocket"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/testkit/proc"
	"github.com/seqflow/seqflow/internal/wire"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// TestGatewayKillWhileReceiptsAndTypingFlow: alice (on an in-process
// gateway) and bob (on a gateway process) chat with typing, read and
// delivery receipts flowing; in the middle of a burst of both users' sends,
// reads and typing, bob's gateway is killed -9 and restarted, bob
// reconnects to it and resends what was not ACKed, with the same
// client_msg_ids. Then:
//   - every send ACKed with a seq (before or after the kill) is in the
//     sequenced log at that seq, and no client_msg_id is there twice;
//     nothing else of the session is (typing and receipts never are);
//   - alice, who stayed connected, got every one of bob's ACKed messages
//     pushed, in seq order;
//   - bob got alice's messages pushed in seq order up to the kill, and
//     changes + sync after the reconnect give him, in order and once each,
//     every event of the log after what he held before the burst;
//   - a read whose result bob got before the kill is durable: changes
//     reports it and seen_by lists him.
//
// Typing indicators and receipts' fan-out around the kill may drop; the
// test asserts them only before the burst.
func TestGatewayKillWhileReceiptsAndTypingFlow(t *testing.T) {
	p := newPipeline(t)
	gwA := p.gateway(nil)
	bin := proc.Build(t, "./producer-gw")
	envB := p.env(map[string]string{"GATEWAY_ADDR": proc.AnyPort, "GATEWAY_ADMIN_ADDR": proc.AnyPort, "GATEWAY_PRESENCE_TTL": "3s"})
	var list []string
	for k, v := range envB {
		list = append(list, k+"="+v)
	}
	gwB := proc.Start(t, "gw-b", bin, list...)
	p.admins["gw-b"] = proc.LoggedAddr(t, gwB, "admin listening", "GATEWAY_ADMIN_ADDR")
	addrB := proc.LoggedAddr(t, gwB, "gateway listening", "GATEWAY_ADDR")
	p.waitReady("gw-b")
	tgwB := &testGW{addr: addrB}
	alice, bob := user("alice"), user("bob")
	a := p.connect(gwA, alice, "phone")
	sid, created := createGroup(a, bob)
	p.waitStored(sid, created)
	b := p.dialRetry(tgwB, bob, "laptop")

	// sent is every send by client_msg_id; acked its seq once an ok ACK
	// came (from either of bob's connections).
	type sendRec struct {
		sender string
		seq    int64
	}
	sent := map[string]*sendRec{}
	var order []string // client_msg_ids in the order sent
	send := func(cl *client, sender, text string) string {
		t.Helper()
		id := newID()
		sent[id] = &sendRec{sender: sender}
		order = append(order, id)
		cl.send(sendFrame(sid, id, text))
		return id
	}
	ok := func(id string, f frame) {
		t.Helper()
		if f.Op != wire.OpAck || f.Status != wire.StatusOK || f.Seq <= 0 {
			t.Fatalf("ack of %s: %s, want status ok with a seq", id, f.raw)
		}
		if s := sent[id]; s.seq != 0 && s.seq != f.Seq {
			t.Fatalf("%s ACKed with seq %d, then %d", id, s.seq, f.Seq)
		}
		sent[id].seq = f.Seq
	}
	isTyping := func(from string) func(frame) bool {
		return func(f frame) bool {
			return f.Op == wire.OpTyping && f.SessionID == sid && f.UserID == from && f.Active
		}
	}
	isRead := func(from string, seq int64) func(frame) bool {
		return func(f frame) bool {
			return f.Op == wire.OpReceipt && f.SessionID == sid && f.UserID == from && f.Kind == "read" && f.Seq >= seq
		}
	}

	// Before the burst everything flows, ephemeral events included.
	// Bob holds the session up to held; he read up to bobRead, alice's
	// message aliceRead.
	held, bobRead, aliceRead := created, int64(0), int64(0)
	for i := range 3 {
		id := send(a, alice, fmt.Sprint("a", i))
		ok(id, a.ackOf(id))
		seq := sent[id].seq
		b.eventOf(sid, seq)
		held = seq
		b.send(map[string]any{"op": "delivered", "cursors": []map[string]any{{"session_id": sid, "seq": seq}}})
		b.send(map[string]any{"op": "read", "req_id": fmt.Sprint("br", i), "session_id": sid, "seq": seq})
		if r := b.result(fmt.Sprint("br", i)); r.Op != wire.OpResult {
			t.Fatalf("bob's read: %s", r.raw)
		}
		bobRead, aliceRead = seq, seq
		a.expect("bob's read receipt", isRead(bob, seq))
		b.send(map[string]any{"op": "typing", "session_id": sid, "active": true})
		a.expect("bob typing", isTyping(bob))

		id = send(b, bob, fmt.Sprint("b", i))
		ok(id, b.ackOf(id))
		seq = sent[id].seq
		a.eventOf(sid, seq)
		held = seq
		a.send(map[string]any{"op": "read", "req_id": fmt.Sprint("ar", i), "session_id": sid, "seq": seq})
		if r := a.result(fmt.Sprint("ar", i)); r.Op != wire.OpResult {
			t.Fatalf("alice's read: %s", r.raw)
		}
		b.expect("alice's read receipt", isRead(alice, seq))
		a.send(map[string]any{"op": "typing", "session_id": sid, "active": true})
		b.expect("alice typing", isTyping(alice))
	}

	// The burst: both send without waiting for ACKs, and type; halfway
	// through, once the first of bob's is ACKed, he reads and acknowledges
	// what has reached him so far and his gateway is killed at once, with
	// his other sends, read and typing in flight. Bob's sends after the kill go to a dead socket; alice's go
	// on.
	const burst = 16
	var aliceIDs, bobIDs []string
	readSeq := held
	for i := range burst {
		aliceIDs = append(aliceIDs, send(a, alice, fmt.Sprint("burst a", i)))
		id := newID()
		sent[id] = &sendRec{sender: bob}
		order = append(order, id)
		bobIDs = append(bobIDs, id)
		_ = b.trySend(sendFrame(sid, id, fmt.Sprint("burst b", i)))
		a.send(map[string]any{"op": "typing", "session_id": sid, "active": true})
		_ = b.trySend(map[string]any{"op": "typing", "session_id": sid, "active": true})
		if i == burst/2 {
			// Once the first of them is ACKed: the others are on their way.
			ok(bobIDs[0], b.ackOf(bobIDs[0]))
			for _, f := range b.queued() {
				if f.Op == wire.OpEvent && f.Event.SessionID == sid && f.Event.SenderUserID == alice {
					readSeq = max(readSeq, f.Event.Seq)
				}
			}
			_ = b.trySend(map[string]any{"op": "read", "req_id": "burst-read", "session_id": sid, "seq": readSeq})
			_ = b.trySend(map[string]any{"op": "delivered", "cursors": []map[string]any{{"session_id": sid, "seq": readSeq}}})
			gwB.Kill()
		}
	}
	<-b.done

	// What bob's first connection got, in the order it came.
	var pushed []wire.Message
	durableRead, readAnswered := bobRead, false
	for _, f := range b.rest() {
		switch {
		case f.Op == wire.OpEvent && f.Event.SessionID == sid && f.Event.Seq > held:
			pushed = append(pushed, f.Event)
		case f.Op == wire.OpAck && f.Status == wire.StatusOK && sent[f.ClientMsgID] != nil:
			ok(f.ClientMsgID, f)
		case f.Op == wire.OpResult && f.ReqID == "burst-read":
			durableRead, readAnswered = readSeq, true
		}
	}
	for i := 1; i < len(pushed); i++ {
		if pushed[i].Seq <= pushed[i-1].Seq {
			t.Fatalf("bob's pushes out of order: seq %d after %d", pushed[i].Seq, pushed[i-1].Seq)
		}
	}
	for _, id := range aliceIDs {
		ok(id, a.ackOf(id))
	}

	// Bob comes back to the restarted gateway and resends what has no ACK.
	if err := gwB.Start(); err != nil {
		t.Fatal(err)
	}
	// Ready: its push stream registered, so seqs for its ACKs reach it.
	p.waitReady("gw-b")
	b2 := p.dialRetry(tgwB, bob, "laptop")
	resent, dups := 0, 0
	for _, id := range bobIDs {
		if sent[id].seq == 0 {
			b2.send(sendFrame(sid, id, "resent"))
			f := b2.ackOf(id)
			ok(id, f)
			resent++
			if f.Duplicate {
				dups++ // sequenced before the kill, its ACK lost with the gateway
			}
		}
	}
	t.Logf("bob's first connection: %d events pushed after seq %d, %d of his %d burst sends ACKed; %d resent, %d of them sequenced before the kill; his read to %d answered: %v",
		len(pushed), held, burst-resent, burst, resent, dups, readSeq, readAnswered)

	// The log: every ACKed send once, at its seq, and nothing else.
	var last int64
	for _, s := range sent {
		last = max(last, s.seq)
	}
	logged := p.sessionLog(t, sid, last)
	byID := map[string]int64{}
	for i, ev := range logged {
		if i > 0 && ev.Seq <= logged[i-1].Seq {
			t.Fatalf("log: seq %d after %d", ev.Seq, logged[i-1].Seq)
		}
		if ev.Seq == created {
			continue
		}
		s := sent[ev.ClientMsgId]
		if s == nil || s.sender != ev.SenderUserId {
			t.Fatalf("log: seq %d (%s by %s) is none of the sends", ev.Seq, ev.ClientMsgId, ev.SenderUserId)
		}
		if prev, dup := byID[ev.ClientMsgId]; dup {
			t.Fatalf("log: %s at seq %d and %d", ev.ClientMsgId, prev, ev.Seq)
		}
		byID[ev.ClientMsgId] = ev.Seq
	}
	for _, id := range order {
		if got := byID[id]; got != sent[id].seq {
			t.Fatalf("%s ACKed with seq %d, in the log at %d (0: absent)", id, sent[id].seq, got)
		}
	}

	// Alice stayed connected: bob's burst messages reach her pushed, in order.
	want := map[int64]bool{}
	for _, id := range bobIDs {
		want[sent[id].seq] = true
	}
	var prev int64
	for len(want) > 0 {
		f := a.expect(fmt.Sprintf("pushes of bob's burst (%d left)", len(want)), func(f frame) bool {
			return f.Op == wire.OpEvent && f.Event.SessionID == sid
		})
		if f.Event.Seq <= prev {
			t.Fatalf("alice's pushes out of order: seq %d after %d", f.Event.Seq, prev)
		}
		prev = f.Event.Seq
		delete(want, f.Event.Seq)
	}

	// Bob catches up: changes, then sync after what he held before the
	// burst. Sync gives exactly the log; the pushes were part of it.
	p.waitStored(sid, last)
	b2.send(map[string]any{"op": "changes", "req_id": "c"})
	r := b2.result("c")
	var change *wire.SessionChange
	for i := range r.Sessions {
		if r.Sessions[i].SessionID == sid {
			change = &r.Sessions[i]
		}
	}
	if change == nil || change.MaxSeq < last {
		t.Fatalf("changes after the reconnect: %s, want %s with max_seq >= %d", r.raw, sid, last)
	}
	var synced []wire.Message
	for after, page := held, 0; ; page++ {
		id := fmt.Sprint("s", page)
		b2.send(map[string]any{"op": "sync", "req_id": id, "session_id": sid, "after_seq": after, "limit": 10})
		r := b2.result(id)
		if r.Op != wire.OpResult {
			t.Fatalf("sync: %s", r.raw)
		}
		synced = append(synced, r.Messages...)
		if !r.HasMore || len(r.Messages) == 0 {
			break
		}
		after = r.Messages[len(r.Messages)-1].Seq
	}
	var logSeqs, syncSeqs []int64
	for _, ev := range logged {
		if ev.Seq > held {
			logSeqs = append(logSeqs, ev.Seq)
		}
	}
	for _, m := range synced {
		syncSeqs = append(syncSeqs, m.Seq)
	}
	if !slices.Equal(syncSeqs, logSeqs) {
		t.Fatalf("bob's sync after seq %d: %v, the log: %v", held, syncSeqs, logSeqs)
	}
	bySeq := map[int64]wire.Message{}
	for _, m := range synced {
		bySeq[m.Seq] = m
	}
	for _, m := range pushed {
		if s, ok := bySeq[m.Seq]; !ok || s.MsgID != m.MsgID || s.ClientMsgID != m.ClientMsgID {
			t.Fatalf("pushed seq %d (%s) is not what sync has there (%+v)", m.Seq, m.ClientMsgID, s)
		}
	}

	// The cursors are what survives: a read bob had the result of is
	// stored, and seen_by lists him.
	for deadline := time.Now().Add(20 * time.Second); change.ReadSeq < durableRead; {
		if time.Now().After(deadline) {
			t.Fatalf("bob's read_seq %d after the reconnect, want >= %d (a read answered before the kill)", change.ReadSeq, durableRead)
		}
		time.Sleep(50 * time.Millisecond)
		id := newID()
		b2.send(map[string]any{"op": "changes", "req_id": id})
		for _, s := range b2.result(id).Sessions {
			if s.SessionID == sid {
				change = &s
			}
		}
	}
	a.send(map[string]any{"op": "seen_by", "req_id": "w", "session_id": sid, "seq": aliceRead})
	if w := a.result("w"); !slices.Contains(w.Users, bob) {
		t.Fatalf("seen_by %d (alice's message bob read before the burst) after the kill: %s, want bob among the users", aliceRead, w.raw)
	}
}

// dialRetry connects as user/device, retrying while the gateway process
// is not yet listening (20 s at most).
func (p *pipeline) dialRetry(gw *testGW, user, device string) *client {
	p.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, _, err := dial(p.t, gw, p.token(user, device, time.Hour))
		if err == nil {
			c.name = user + "/" + device
			return c
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("gateway process at %s not accepting: %v", gw.addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// trySend writes v, and returns the error instead of failing the test:
// for writes that may meet a dead socket.
func (c *client) trySend(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.ws.Write(ctx, websocket.MessageText, b)
}

// queued moves the frames received so far to the backlog, without
// waiting, and returns the backlog.
func (c *client) queued() []frame {
	for {
		select {
		case f := <-c.frames:
			c.backlog = append(c.backlog, f)
		default:
			return c.backlog
		}
	}
}

// rest returns, once c is closed, every frame it received and no
// expectation took, in the order they came.
func (c *client) rest() []frame {
	<-c.done
	out := c.backlog
	c.backlog = nil
	for {
		select {
		case f := <-c.frames:
			out = append(out, f)
		default:
			return out
		}
	}
}

// sessionLog reads session's events from the sequenced log, read
// committed, until one at or past seq (30 s at most).
func (p *pipeline) sessionLog(t *testing.T, session string, seq int64) []*imv1.SequencedEvent {
	t.Helper()
	cl := p.reader(t, p.topics.Sequenced)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []*imv1.SequencedEvent
	for len(out) == 0 || out[len(out)-1].Seq < seq {
		if ctx.Err() != nil {
			t.Fatalf("the log of %s did not reach seq %d within 30s (%d events)", session, seq, len(out))
		}
		fs := cl.PollFetches(ctx)
		for it := fs.RecordIter(); !it.Done(); {
			r := it.Next()
			if string(r.Key) != session {
				continue
			}
			ev := &imv1.SequencedEvent{}
			if err := proto.Unmarshal(r.Value, ev); err != nil {
				t.Fatalf("decode %s record at offset %d: %v", session, r.Offset, err)
			}
			out = append(out, ev)
		}
	}
	return out
}
