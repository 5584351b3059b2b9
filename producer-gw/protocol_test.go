package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/delivery"
	"github.com/seqflow/seqflow/internal/presence"
	"github.com/seqflow/seqflow/internal/wire"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// TestProtocol drives the gateway with real WebSocket and HTTP clients
// against the local stack: Kafka, PostgreSQL and Redis, with the
// sequencer, persister and pusher running as processes.
func TestProtocol(t *testing.T) {
	p := newPipeline(t)
	gw := p.gateway(nil)

	t.Run("send gets ACK with seq, retry gets the same seq", func(t *testing.T) {
		p.t = t
		alice, bob := user("alice"), user("bob")
		a := p.connect(gw, alice, "phone")
		sid, createSeq := createGroup(a, bob)
		if !strings.HasPrefix(sid, "g-") || createSeq <= 0 {
			t.Fatalf("create: session %q seq %d", sid, createSeq)
		}
		id := newID()
		a.send(sendFrame(sid, id, "hello"))
		first := a.mustAckOK(id)
		if first.Seq <= createSeq || first.Duplicate {
			t.Fatalf("first ack %+v: want seq after the create's %d, not a duplicate", first, createSeq)
		}
		a.send(sendFrame(sid, id, "hello"))
		again := a.mustAckOK(id)
		if again.Seq != first.Seq || again.MsgID != first.MsgID || !again.Duplicate {
			t.Fatalf("retry ack %+v, want seq %d msg_id %s duplicate", again, first.Seq, first.MsgID)
		}
		// The retry is the same message in the log: sync shows it once.
		p.waitStored(sid, first.Seq)
		a.send(map[string]any{"op": "sync", "req_id": "s1", "session_id": sid})
		res := a.result("s1")
		n := 0
		for _, m := range res.Messages {
			if m.ClientMsgID == id {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("sync holds client message %s %d times, want once: %+v", id, n, res.Messages)
		}
	})

	t.Run("pushes come over the pusher's stream; with GATEWAY_PUSH_ADDR=off over pub/sub", func(t *testing.T) {
		p.t = t
		off := p.gateway(map[string]string{"GATEWAY_PUSH_ADDR": "off"})
		for _, tc := range []struct {
			gw             *testGW
			want, wantNone string
			registered     bool
		}{{gw, "tcp", "redis", true}, {off, "redis", "tcp", false}} {
			m := tc.gw.g.m.pushBatches
			before, beforeNone := testutil.ToFloat64(m.WithLabelValues(tc.want)), testutil.ToFloat64(m.WithLabelValues(tc.wantNone))
			alice, bob := user("alice"), user("bob")
			a, b := p.connect(tc.gw, alice, "phone"), p.connect(tc.gw, bob, "phone")
			sid, _ := createGroup(a, bob)
			id := newID()
			a.send(sendFrame(sid, id, "which way"))
			ack := a.mustAckOK(id)
			b.eventOf(sid, ack.Seq)
			if got := testutil.ToFloat64(m.WithLabelValues(tc.want)) - before; got < 1 {
				t.Fatalf("gateway %s: %v batches over %s, want the ACK's and the event's", tc.gw.g.cfg.GatewayID, got, tc.want)
			}
			if got := testutil.ToFloat64(m.WithLabelValues(tc.wantNone)) - beforeNone; got != 0 {
				t.Fatalf("gateway %s: %v batches over %s, want none", tc.gw.g.cfg.GatewayID, got, tc.wantNone)
			}
			addr, err := delivery.NewRedisRegistry(tc.gw.g.rdb, tc.gw.g.cfg.PeerKeys).Lookup(context.Background(), tc.gw.g.cfg.GatewayID)
			if tc.registered && (err != nil || addr == "") {
				t.Fatalf("gateway %s: registry lookup = %q, %v; want its stream address", tc.gw.g.cfg.GatewayID, addr, err)
			}
			if !tc.registered && !errors.Is(err, delivery.ErrNoReceiver) {
				t.Fatalf("gateway %s with the stream off: registry lookup = %q, %v; want ErrNoReceiver", tc.gw.g.cfg.GatewayID, addr, err)
			}
		}
	})

	t.Run("sends of one connection keep their order", func(t *testing.T) {
		p.t = t
		alice := user("alice")
		a := p.connect(gw, alice, "phone")
		sid, _ := createGroup(a)
		var ids []string
		for i := 0; i < 20; i++ {
			id := newID()
			ids = append(ids, id)
			a.send(sendFrame(sid, id, "m"))
		}
		var last int64
		for _, id := range ids {
			ack := a.mustAckOK(id)
			if ack.Seq <= last {
				t.Fatalf("ack of send %s has seq %d after %d: order not kept", id, ack.Seq, last)
			}
			last = ack.Seq
		}
	})

	t.Run("two devices of one user both receive, the sender gets its ACK", func(t *testing.T) {
		p.t = t
		alice, bob := user("alice"), user("bob")
		phone := p.connect(gw, alice, "phone")
		laptop := p.connect(gw, alice, "laptop")
		b := p.connect(gw, bob, "phone")
		sid, createSeq := createGroup(phone, bob)
		laptop.eventOf(sid, createSeq)
		b.eventOf(sid, createSeq)
		id := newID()
		phone.send(sendFrame(sid, id, "to all devices"))
		ack := phone.mustAckOK(id)
		for _, c := range []*client{phone, laptop, b} {
			ev := c.eventOf(sid, ack.Seq)
			var body string
			if err := json.Unmarshal(ev.Event.Body, &body); err != nil || body != "to all devices" || ev.Event.SenderUserID != alice || ev.Event.MsgID != ack.MsgID {
				t.Fatalf("%s got event %+v (body %q)", c.name, ev.Event, body)
			}
		}
	})

	t.Run("a non-member is rejected and the connection stays open", func(t *testing.T) {
		p.t = t
		alice, mallory := user("alice"), user("mallory")
		a := p.connect(gw, alice, "phone")
		m := p.connect(gw, mallory, "phone")
		sid, createSeq := createGroup(a)
		p.waitStored(sid, createSeq)
		id := newID()
		m.send(sendFrame(sid, id, "let me in"))
		if e := m.errorOf(id); e.Error.Name != "not_a_member" || e.Error.Retryable {
			t.Fatalf("error = %+v, want not_a_member, not retryable", e)
		}
		m.send(map[string]any{"op": "sync", "req_id": "s", "session_id": sid})
		if e := m.result("s"); e.Op != wire.OpError || e.Error.Name != "not_a_member" {
			t.Fatalf("sync by a non-member = %+v, want not_a_member", e)
		}
		for _, op := range []map[string]any{
			{"op": "edit", "client_msg_id": newID(), "session_id": sid, "target_seq": createSeq, "type": "text", "body": "x"},
			{"op": "members", "client_msg_id": newID(), "session_id": sid, "action": "add", "user_ids": []string{mallory}},
			{"op": "read", "req_id": "r", "session_id": sid, "seq": createSeq},
		} {
			m.send(op)
			key, _ := op["client_msg_id"].(string)
			if key == "" {
				key = "r"
			}
			if e := m.errorOf(key); e.Error.Name != "not_a_member" {
				t.Fatalf("%v by a non-member = %+v, want not_a_member", op["op"], e)
			}
		}
		m.send(map[string]any{"op": "ping", "req_id": "still-here"})
		m.expect("pong", func(f frame) bool { return f.Op == wire.OpPong && f.ReqID == "still-here" })
	})

	t.Run("invalid frames get error frames and the connection stays open", func(t *testing.T) {
		p.t = t
		c := p.connect(gw, user("val"), "phone")
		cases := []struct {
			frame, want string
		}{
			{`not json`, "bad_frame"},
			{`{"op":"send","client_msg_id":"v1","session_id":"s","type":"video","body":"x"}`, "unknown_type"},
			{`{"op":"send","client_msg_id":"v2","session_id":"s","type":"text","body":"` + strings.Repeat("x", 17<<10) + `"}`, "too_large"},
			{`{"op":"send","client_msg_id":"v3","session_id":"s","type":"text","body":"` + strings.Repeat("x", 70<<10) + `"}`, "frame_too_large"},
			// Bytes that are not UTF-8 close the connection (1007): TestHostileInput.
			{`{"op":"send","client_msg_id":"v4","session_id":"s","session_id":"t","type":"text","body":"x"}`, "ambiguous_json"},
			{`{"op":"send","session_id":"s","type":"text","body":"x"}`, "missing_field"},
		}
		for _, cse := range cases {
			c.sendRaw([]byte(cse.frame))
			e := c.expect("error "+cse.want, func(f frame) bool { return f.Op == wire.OpError })
			if e.Error.Name != cse.want || e.Error.Code == 0 || e.Error.Message == "" {
				t.Fatalf("frame %.60q: error %+v, want %s", cse.frame, e.Error, cse.want)
			}
		}
		c.send(map[string]any{"op": "ping", "req_id": "alive"})
		c.expect("pong", func(f frame) bool { return f.Op == wire.OpPong })
	})

	t.Run("reconnect and catch up through changes and sync", func(t *testing.T) {
		p.t = t
		alice, bob := user("alice"), user("bob")
		a := p.connect(gw, alice, "phone")
		sid, _ := createGroup(a, bob)
		b := p.connect(gw, bob, "phone")
		var last frame
		for i := 0; i < 5; i++ {
			id := newID()
			a.send(sendFrame(sid, id, "offline "+string(rune('a'+i))))
			last = a.mustAckOK(id)
		}
		_ = b.ws.Close(websocket.StatusNormalClosure, "")
		for i := 0; i < 3; i++ {
			id := newID()
			a.send(sendFrame(sid, id, "while away"))
			last = a.mustAckOK(id)
		}
		p.waitStored(sid, last.Seq)
		b = p.connect(gw, bob, "phone")
		b.send(map[string]any{"op": "changes", "req_id": "c"})
		ch := b.result("c")
		var found *wire.SessionChange
		for i := range ch.Sessions {
			if ch.Sessions[i].SessionID == sid {
				found = &ch.Sessions[i]
			}
		}
		if found == nil || found.MaxSeq != last.Seq || found.ReadSeq != 0 {
			t.Fatalf("changes = %+v, want %s at max_seq %d read_seq 0", ch.Sessions, sid, last.Seq)
		}
		// Alice's 8 messages are unread; the create is no message.
		if found.Unread != 8 || ch.TotalUnread != 8 {
			t.Fatalf("unread %d, total %d; want 8 and 8", found.Unread, ch.TotalUnread)
		}
		// Page through with a small limit.
		var got []wire.Message
		after := int64(0)
		for page := 0; page < 10; page++ {
			b.send(map[string]any{"op": "sync", "req_id": "p", "session_id": sid, "after_seq": after, "limit": 3})
			r := b.result("p")
			if r.Op != wire.OpResult {
				t.Fatalf("sync: %+v", r)
			}
			got = append(got, r.Messages...)
			if !r.HasMore {
				break
			}
			after = r.Messages[len(r.Messages)-1].Seq
		}
		if len(got) != 9 || got[len(got)-1].Seq != last.Seq || got[0].Kind != wire.KindSessionCreate {
			t.Fatalf("synced %d events (last %+v), want the create and 8 messages up to seq %d", len(got), got[len(got)-1], last.Seq)
		}
		for i := 1; i < len(got); i++ {
			if got[i].Seq <= got[i-1].Seq {
				t.Fatalf("sync out of order at %d: %d after %d", i, got[i].Seq, got[i-1].Seq)
			}
		}
		seqs := func(ms []wire.Message) []int64 {
			out := make([]int64, len(ms))
			for i, m := range ms {
				out[i] = m.Seq
			}
			return out
		}
		all := seqs(got) // ascending, the whole history
		// Backward from the newest, newest first, pages of 4.
		var back []int64
		before := last.Seq + 1
		for page := 0; page < 10; page++ {
			b.send(map[string]any{"op": "sync", "req_id": "bp", "session_id": sid, "before_seq": before, "limit": 4})
			r := b.result("bp")
			if r.Op != wire.OpResult || len(r.Messages) == 0 {
				t.Fatalf("sync before %d: %+v", before, r)
			}
			back = append(back, seqs(r.Messages)...)
			if !r.HasMore {
				break
			}
			before = r.Messages[len(r.Messages)-1].Seq
		}
		want := slices.Clone(all)
		slices.Reverse(want)
		if !slices.Equal(back, want) {
			t.Fatalf("backward paging gave %v, want %v", back, want)
		}
		// Around a message in the middle, at the start and at the end.
		for _, c := range []struct {
			at, limit             int
			from, to              int // indexes into all, inclusive
			moreBefore, moreAfter bool
		}{
			{at: 4, limit: 5, from: 2, to: 6, moreBefore: true, moreAfter: true},
			{at: 0, limit: 5, from: 0, to: 4, moreBefore: false, moreAfter: true},
			{at: 8, limit: 5, from: 4, to: 8, moreBefore: true, moreAfter: false},
			{at: 4, limit: 1, from: 4, to: 4, moreBefore: true, moreAfter: true},
			{at: 4, limit: 50, from: 0, to: 8, moreBefore: false, moreAfter: false},
		} {
			b.send(map[string]any{"op": "sync", "req_id": "ar", "session_id": sid, "around_seq": all[c.at], "limit": c.limit})
			r := b.result("ar")
			if got, want := seqs(r.Messages), all[c.from:c.to+1]; !slices.Equal(got, want) || r.HasMoreBefore != c.moreBefore || r.HasMore != c.moreAfter {
				t.Fatalf("sync around %d limit %d: %v has_more_before %v has_more %v, want %v %v %v",
					all[c.at], c.limit, got, r.HasMoreBefore, r.HasMore, want, c.moreBefore, c.moreAfter)
			}
		}
		b.send(map[string]any{"op": "sync", "req_id": "bad", "session_id": sid, "after_seq": 1, "before_seq": 5})
		if r := b.result("bad"); r.Op != wire.OpError || r.Error.Name != "invalid_field" {
			t.Fatalf("sync with after_seq and before_seq: %+v, want invalid_field", r)
		}
		// Read receipt moves the read cursor that changes reports.
		b.send(map[string]any{"op": "read", "req_id": "rd", "session_id": sid, "seq": last.Seq})
		if r := b.result("rd"); r.Op != wire.OpResult {
			t.Fatalf("read: %+v", r)
		}
		deadline := time.Now().Add(20 * time.Second)
		for {
			b.send(map[string]any{"op": "changes", "req_id": "c2"})
			ch := b.result("c2")
			if len(ch.Sessions) == 1 && ch.Sessions[0].ReadSeq == last.Seq {
				if ch.Sessions[0].Unread != 0 || ch.TotalUnread != 0 {
					t.Fatalf("read up to the last message, unread %d, total %d; want 0", ch.Sessions[0].Unread, ch.TotalUnread)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("read_seq never reached %d: %+v", last.Seq, ch.Sessions)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})

	t.Run("edit and recall by the sender, within the window", func(t *testing.T) {
		p.t = t
		alice, bob := user("alice"), user("bob")
		a := p.connect(gw, alice, "phone")
		b := p.connect(gw, bob, "phone")
		sid, _ := createGroup(a, bob)
		m1, m2 := newID(), newID()
		a.send(sendFrame(sid, m1, "typo"))
		s1 := a.mustAckOK(m1).Seq
		a.send(sendFrame(sid, m2, "oops"))
		s2 := a.mustAckOK(m2).Seq
		p.waitStored(sid, s2)

		bobEdit := newID()
		b.send(map[string]any{"op": "edit", "client_msg_id": bobEdit, "session_id": sid, "target_seq": s1, "type": "text", "body": "hacked"})
		if e := b.errorOf(bobEdit); e.Error.Name != "not_own_message" {
			t.Fatalf("bob editing alice's message: %+v", e)
		}
		ed, rc := newID(), newID()
		a.send(map[string]any{"op": "edit", "client_msg_id": ed, "session_id": sid, "target_seq": s1, "type": "text", "body": "fixed"})
		edSeq := a.mustAckOK(ed).Seq
		a.send(map[string]any{"op": "recall", "client_msg_id": rc, "session_id": sid, "target_seq": s2})
		rcSeq := a.mustAckOK(rc).Seq
		// Bob's device gets both, in order, referencing their targets.
		if ev := b.eventOf(sid, edSeq); ev.Event.Kind != wire.KindEdit || ev.Event.TargetSeq != s1 {
			t.Fatalf("edit event %+v", ev.Event)
		}
		if ev := b.eventOf(sid, rcSeq); ev.Event.Kind != wire.KindRecall || ev.Event.TargetSeq != s2 {
			t.Fatalf("recall event %+v", ev.Event)
		}
		p.waitStored(sid, rcSeq)
		b.send(map[string]any{"op": "sync", "req_id": "s", "session_id": sid, "after_seq": s1 - 1, "limit": 2})
		r := b.result("s")
		if len(r.Messages) != 2 {
			t.Fatalf("sync = %+v", r)
		}
		var body string
		_ = json.Unmarshal(r.Messages[0].Body, &body)
		if !r.Messages[0].Edited || body != "fixed" {
			t.Fatalf("edited message synced as %+v", r.Messages[0])
		}
		if !r.Messages[1].Recalled || len(r.Messages[1].Body) != 0 {
			t.Fatalf("recalled message synced as %+v", r.Messages[1])
		}
	})

	t.Run("edit window closed", func(t *testing.T) {
		p.t = t
		strict := p.gateway(map[string]string{"GATEWAY_EDIT_WINDOW": "0s"})
		a := p.connect(strict, user("alice"), "phone")
		sid, _ := createGroup(a)
		id := newID()
		a.send(sendFrame(sid, id, "final"))
		s := a.mustAckOK(id).Seq
		p.waitStored(sid, s)
		ed := newID()
		a.send(map[string]any{"op": "edit", "client_msg_id": ed, "session_id": sid, "target_seq": s, "type": "text", "body": "late"})
		if e := a.errorOf(ed); e.Error.Name != "edit_window_closed" {
			t.Fatalf("late edit: %+v", e)
		}
	})

	t.Run("a removed member can no longer send, sync or receive", func(t *testing.T) {
		p.t = t
		alice, bob := user("alice"), user("bob")
		a := p.connect(gw, alice, "phone")
		b := p.connect(gw, bob, "phone")
		sid, createSeq := createGroup(a, bob)
		b.eventOf(sid, createSeq)
		// A send of bob's accepted before the removal, whose ACK bob's
		// device never got (its gateway died): the retry below must get
		// the original seq, not a refusal of a message the log holds.
		early := newID()
		b.send(sendFrame(sid, early, "before the removal"))
		earlySeq := b.mustAckOK(early).Seq
		rm := newID()
		removedAt := time.Now()
		a.send(map[string]any{"op": "members", "client_msg_id": rm, "session_id": sid, "action": "remove", "user_ids": []string{bob}})
		rmSeq := a.mustAckOK(rm).Seq
		// Bob's device learns of its removal.
		if ev := b.eventOf(sid, rmSeq); ev.Event.Kind != wire.KindMembership || ev.Event.Action != wire.ActionRemove {
			t.Fatalf("removal event %+v", ev.Event)
		}
		// From the removal event on, bob's new sends are refused.
		id := newID()
		sentAt := time.Now()
		b.send(sendFrame(sid, id, "still here?"))
		if e := b.errorOf(id); e.Error.Name != "not_a_member" {
			t.Fatalf("send after removal: %+v", e)
		}
		t.Logf("removed member refused %s after the remove command was sent (%s after the send)",
			time.Since(removedAt).Round(time.Millisecond), time.Since(sentAt).Round(time.Millisecond))
		// The retry of the early send, on this gateway (which saw the
		// removal) and, once the store holds the removal, on a gateway
		// that knows bob only from the store.
		b.send(sendFrame(sid, early, "before the removal"))
		if f := b.ackOf(early); f.Op != wire.OpAck || f.Seq != earlySeq {
			t.Fatalf("retry after removal of a send accepted before it: %+v, want its ack with seq %d", f, earlySeq)
		}
		p.waitStored(sid, rmSeq)
		b2 := p.connect(p.gateway(nil), bob, "laptop")
		b2.send(sendFrame(sid, early, "before the removal"))
		if f := b2.ackOf(early); f.Op != wire.OpAck || f.Seq != earlySeq {
			t.Fatalf("retry on another gateway: %+v, want its ack with seq %d", f, earlySeq)
		}
		id2 := newID()
		b2.send(sendFrame(sid, id2, "still here?"))
		if e := b2.errorOf(id2); e.Error.Name != "not_a_member" || e.Error.Retryable {
			t.Fatalf("new send after removal on another gateway: %+v", e)
		}
		b.send(map[string]any{"op": "sync", "req_id": "s", "session_id": sid})
		if e := b.result("s"); e.Error.Name != "not_a_member" {
			t.Fatalf("sync after removal: %+v", e)
		}
		after := newID()
		a.send(sendFrame(sid, after, "bob is gone"))
		s := a.mustAckOK(after).Seq
		a.eventOf(sid, s)
		if f, ok := b.expectWithin(time.Second, "no event", func(f frame) bool { return f.Op == wire.OpEvent && f.Event.Seq > rmSeq }); ok {
			t.Fatalf("removed member received %+v", f.Event)
		}
	})

	t.Run("an added member receives from the add on and can send at once", func(t *testing.T) {
		p.t = t
		alice, dave := user("alice"), user("dave")
		a := p.connect(gw, alice, "phone")
		d := p.connect(gw, dave, "phone")
		sid, _ := createGroup(a)
		before := newID()
		a.send(sendFrame(sid, before, "before dave"))
		beforeSeq := a.mustAckOK(before).Seq
		add := newID()
		a.send(map[string]any{"op": "members", "client_msg_id": add, "session_id": sid, "action": "add", "user_ids": []string{dave}})
		addSeq := a.mustAckOK(add).Seq
		if ev := d.eventOf(sid, addSeq); ev.Event.Action != wire.ActionAdd || len(ev.Event.UserIDs) != 1 || ev.Event.UserIDs[0] != dave {
			t.Fatalf("add event %+v", ev.Event)
		}
		if f, ok := d.expectWithin(200*time.Millisecond, "no earlier event", func(f frame) bool { return f.Op == wire.OpEvent && f.Event.Seq == beforeSeq }); ok {
			t.Fatalf("added member was pushed an event from before the add: %+v", f.Event)
		}
		// No waiting for the persister: the add event told the gateway.
		hi := newID()
		d.send(sendFrame(sid, hi, "hi, I'm new"))
		a.eventOf(sid, d.mustAckOK(hi).Seq)
	})

	t.Run("a gateway that saw no removal refuses the removed user within the stated bound", func(t *testing.T) {
		p.t = t
		// The bound on reads: the persister's lag plus
		// GATEWAY_MEMBER_CACHE_TTL; past the lag, the TTL plus a margin
		// for a loaded box. Sends have none: the sequencer decides them.
		const cacheTTL = time.Second
		const bound = cacheTTL + 3*time.Second
		blind := p.gateway(map[string]string{"GATEWAY_MEMBER_CACHE_TTL": cacheTTL.String()})
		alice, bob := user("alice"), user("bob")
		a := p.connect(gw, alice, "phone")
		sid, createSeq := createGroup(a, bob)
		p.waitStored(sid, createSeq)
		bobTok := p.token(bob, "cli", time.Hour)
		call := func(method, path, body string) (int, frame) {
			req, _ := http.NewRequest(method, "http://"+blind.addr+path, strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+bobTok)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var f frame
			_ = json.NewDecoder(resp.Body).Decode(&f)
			return resp.StatusCode, f
		}
		httpSend := func() (int, frame) {
			return call("POST", "/v1/send", `{"client_msg_id":"`+newID()+`","session_id":"`+sid+`","type":"text","body":"x"}`)
		}
		history := func() (int, frame) { return call("GET", "/v1/sessions/"+sid+"/messages?after_seq=0&limit=10", "") }
		if code, f := httpSend(); code != http.StatusOK && code != http.StatusAccepted {
			t.Fatalf("bob's send before removal: %d %+v", code, f)
		}
		if code, f := history(); code != http.StatusOK {
			t.Fatalf("bob's history before removal: %d %+v", code, f) // also primes the blind gateway's cache
		}
		rm := newID()
		a.send(map[string]any{"op": "members", "client_msg_id": rm, "session_id": sid, "action": "remove", "user_ids": []string{bob}})
		rmSeq := a.mustAckOK(rm).Seq
		// A send right after the removal's ACK: refused by the sequencer,
		// whatever the blind gateway's cache says.
		if code, f := httpSend(); code != http.StatusForbidden || f.Error.Name != "not_a_member" {
			t.Fatalf("bob's send after the removal's ack: %d %+v, want 403 not_a_member", code, f)
		}
		// The persister's lag is the load of the moment (other packages
		// share the database); the cache's part of the bound is measured
		// from the removal being stored.
		p.waitStored(sid, rmSeq)
		removed := time.Now()
		read := 0
		for {
			code, f := history()
			if code == http.StatusForbidden && f.Error.Name == "not_a_member" {
				break
			}
			read++
			if time.Since(removed) > bound {
				t.Fatalf("removed user still reading %s after the removal was stored (bound %s): %d %+v", time.Since(removed), bound, code, f)
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Logf("gateway without the removal event refused the removed user's reads %s after the removal was stored (%d reads got through; bound %s)",
			time.Since(removed).Round(time.Millisecond), read, bound)
	})

	t.Run("direct session has a deterministic ID and cannot be created twice", func(t *testing.T) {
		p.t = t
		alice, bob := user("alice"), user("bob")
		a := p.connect(gw, alice, "phone")
		b := p.connect(gw, bob, "phone")
		id := newID()
		a.send(map[string]any{"op": "create_session", "client_msg_id": id, "kind": "direct", "peer_user_id": bob})
		ack := a.mustAckOK(id)
		if ack.SessionID != DirectSessionID(bob, alice) {
			t.Fatalf("direct session %s, want %s", ack.SessionID, DirectSessionID(bob, alice))
		}
		b.eventOf(ack.SessionID, ack.Seq)
		p.waitStored(ack.SessionID, ack.Seq)
		again := newID()
		b.send(map[string]any{"op": "create_session", "client_msg_id": again, "kind": "direct", "peer_user_id": alice})
		if e := b.errorOf(again); e.Error.Name != "session_exists" {
			t.Fatalf("second create: %+v", e)
		}
		// A retry of the original create is answered with its seq.
		a.send(map[string]any{"op": "create_session", "client_msg_id": id, "kind": "direct", "peer_user_id": bob})
		if r := a.mustAckOK(id); r.Seq != ack.Seq || !r.Duplicate {
			t.Fatalf("retried create = %+v, want seq %d duplicate", r, ack.Seq)
		}
		m := newID()
		b.send(sendFrame(ack.SessionID, m, "hi alice"))
		s := b.mustAckOK(m).Seq
		a.eventOf(ack.SessionID, s)
		add := newID()
		a.send(map[string]any{"op": "members", "client_msg_id": add, "session_id": ack.SessionID, "action": "add", "user_ids": []string{user("carol")}})
		if e := a.errorOf(add); e.Error.Name != "not_permitted" {
			t.Fatalf("adding to a direct session: %+v", e)
		}
	})

	t.Run("delivery receipts move the device cursor, one receipt per window", func(t *testing.T) {
		p.t = t
		alice, bob := user("alice"), user("bob")
		a := p.connect(gw, alice, "phone")
		b := p.connect(gw, bob, "tablet")
		sid, _ := createGroup(a, bob)
		var seqs []int64
		for _, text := range []string{"deliver me", "and me"} {
			id := newID()
			a.send(sendFrame(sid, id, text))
			seqs = append(seqs, a.mustAckOK(id).Seq)
			b.eventOf(sid, seqs[len(seqs)-1])
		}
		// Two delivered frames 200 ms apart fall in one window of the
		// gateway (GATEWAY_DELIVERED_FLUSH_INTERVAL, 1 s by default): one
		// receipt, carrying the higher seq.
		b.send(map[string]any{"op": "delivered", "cursors": []map[string]any{{"session_id": sid, "seq": seqs[0]}}})
		time.Sleep(200 * time.Millisecond)
		s := seqs[1]
		b.send(map[string]any{"op": "delivered", "cursors": []map[string]any{{"session_id": sid, "seq": s}}})
		deadline := time.Now().Add(20 * time.Second)
		for {
			var got int64
			_ = p.pool.QueryRow(context.Background(), `SELECT delivered_seq FROM delivery_cursors WHERE session_id = $1 AND user_id = $2 AND device_id = 'tablet'`, sid, bob).Scan(&got)
			if got == s {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("delivery cursor %d, want %d", got, s)
			}
			time.Sleep(50 * time.Millisecond)
		}
		var got []int64
		for _, r := range recordsKeyed(t, p, p.topics.Receipts, sid) {
			var dr imv1.DeliveryReceipt
			if err := proto.Unmarshal(r.Value, &dr); err != nil {
				t.Fatalf("receipt at offset %d: %v", r.Offset, err)
			}
			got = append(got, dr.GetDeliveredSeq())
		}
		if len(got) != 1 || got[0] != s {
			t.Fatalf("delivery receipts of the session carry seqs %v, want one with %d", got, s)
		}
	})

	t.Run("presence while connected, removed on close", func(t *testing.T) {
		p.t = t
		carol := user("carol")
		c := p.connect(gw, carol, "watch")
		ps := presence.New(gw.g.rdb, gw.g.cfg.PresenceTTL)
		got, err := ps.Lookup(context.Background(), []string{carol})
		if err != nil || len(got[carol]) != 1 || got[carol][0].ConnID != c.hello.ConnID || got[carol][0].GatewayID != gw.g.cfg.GatewayID {
			t.Fatalf("presence while connected = %+v, %v", got, err)
		}
		_ = c.ws.Close(websocket.StatusNormalClosure, "")
		deadline := time.Now().Add(5 * time.Second)
		for {
			got, _ = ps.Lookup(context.Background(), []string{carol})
			if len(got[carol]) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("presence after close = %+v", got)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})

	t.Run("HTTP API: send, changes, sync with curl-style calls", func(t *testing.T) {
		p.t = t
		alice := user("alice")
		tok := p.token(alice, "cli", time.Hour)
		call := func(method, path, body string) (int, frame) {
			req, _ := http.NewRequest(method, "http://"+gw.addr+path, strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+tok)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			var f frame
			if err := json.Unmarshal(b, &f); err != nil {
				t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
			}
			return resp.StatusCode, f
		}
		id := newID()
		code, ack := call("POST", "/v1/create_session", `{"client_msg_id":"`+id+`","kind":"group","title":"http"}`)
		if code != http.StatusOK || ack.Status != wire.StatusOK {
			t.Fatalf("create over HTTP: %d %+v", code, ack)
		}
		sid := ack.SessionID
		m := newID()
		code, ack = call("POST", "/v1/send", `{"client_msg_id":"`+m+`","session_id":"`+sid+`","type":"text","body":"over http"}`)
		if code != http.StatusOK || ack.Status != wire.StatusOK || ack.Seq <= 0 {
			t.Fatalf("send over HTTP: %d %+v", code, ack)
		}
		p.waitStored(sid, ack.Seq)
		code, res := call("GET", "/v1/sessions/"+sid+"/messages?after_seq=0&limit=10", "")
		if code != http.StatusOK || len(res.Messages) != 2 {
			t.Fatalf("sync over HTTP: %d %+v", code, res)
		}
		code, res = call("GET", "/v1/sessions/"+sid+"/messages?before_seq="+strconv.FormatInt(ack.Seq, 10)+"&limit=10", "")
		if code != http.StatusOK || len(res.Messages) != 1 || res.Messages[0].Kind != wire.KindSessionCreate || res.HasMore {
			t.Fatalf("sync before over HTTP: %d %+v", code, res)
		}
		code, res = call("GET", "/v1/sessions/"+sid+"/messages?around_seq="+strconv.FormatInt(ack.Seq, 10)+"&limit=1", "")
		if code != http.StatusOK || len(res.Messages) != 1 || res.Messages[0].Seq != ack.Seq || !res.HasMoreBefore || res.HasMore {
			t.Fatalf("sync around over HTTP: %d %+v", code, res)
		}
		code, res = call("GET", "/v1/sessions/"+sid+"/messages?before_seq=x", "")
		if code != http.StatusBadRequest || res.Error.Name != "invalid_field" {
			t.Fatalf("sync with a bad before_seq over HTTP: %d %+v", code, res)
		}
		code, res = call("GET", "/v1/changes", "")
		if code != http.StatusOK || len(res.Sessions) != 1 || res.Sessions[0].MaxSeq != ack.Seq {
			t.Fatalf("changes over HTTP: %d %+v", code, res)
		}
		code, res = call("POST", "/v1/send", `{"client_msg_id":"x","session_id":"`+sid+`","type":"nope","body":"x"}`)
		if code != http.StatusBadRequest || res.Error.Name != "unknown_type" {
			t.Fatalf("bad send over HTTP: %d %+v", code, res)
		}
		code, res = call("POST", "/v1/send", strings.Repeat("x", 70<<10))
		if code != http.StatusRequestEntityTooLarge || res.Error.Name != "frame_too_large" {
			t.Fatalf("huge body over HTTP: %d %+v", code, res)
		}
	})

	t.Run("ACK timeout answers accepted, the seq follows as a notice", func(t *testing.T) {
		p.t = t
		impatient := p.gateway(map[string]string{"GATEWAY_ACK_WAIT": "0s"})
		a := p.connect(impatient, user("alice"), "phone")
		id := newID()
		a.send(map[string]any{"op": "create_session", "client_msg_id": id, "kind": "group"})
		ack := a.ackOf(id)
		if ack.Op != wire.OpAck || ack.Status != wire.StatusAccepted || ack.Seq != 0 {
			t.Fatalf("ack = %+v, want accepted without a seq", ack)
		}
		n := a.expect("seq_notice", func(f frame) bool { return f.Op == wire.OpSeqNotice && f.ClientMsgID == id })
		if n.Status != wire.StatusOK || n.Seq <= 0 || n.MsgID == "" || n.SessionID != ack.SessionID {
			t.Fatalf("notice = %+v", n)
		}
	})

	t.Run("backpressure: in-flight bound and rate limit have their own codes", func(t *testing.T) {
		p.t = t
		tight := p.gateway(map[string]string{"GATEWAY_MAX_IN_FLIGHT": "1", "GATEWAY_RATE_PER_USER": "1", "GATEWAY_RATE_BURST": "3"})
		a := p.connect(tight, user("alice"), "phone")
		sid, _ := createGroup(a) // takes 1 of 3 tokens
		// Five sends back to back: the first goes in flight; of the rest,
		// those that still find a token meet the in-flight bound, the
		// others the rate limit (at most 3 tokens, refilled at 1/s).
		var ids []string
		for i := 0; i < 5; i++ {
			id := newID()
			ids = append(ids, id)
			a.send(sendFrame(sid, id, "burst"))
		}
		a.mustAckOK(ids[0])
		got := map[string]int{}
		for _, id := range ids[1:] {
			e := a.errorOf(id)
			if !e.Error.Retryable {
				t.Fatalf("backpressure error %+v is not retryable", e)
			}
			got[e.Error.Name]++
		}
		if got["too_many_in_flight"] < 1 || got["rate_limited"] < 1 || got["too_many_in_flight"]+got["rate_limited"] != 4 {
			t.Fatalf("errors of the burst = %v, want too_many_in_flight and rate_limited only, at least one each", got)
		}
	})

	t.Run("Kafka unavailable is a retryable error, never an OK", func(t *testing.T) {
		p.t = t
		// A member in the store, then a gateway whose Kafka is a closed port.
		a := p.connect(gw, user("alice"), "phone")
		sid, s := createGroup(a)
		p.waitStored(sid, s)
		dead := p.gateway(map[string]string{"SEQFLOW_KAFKA_BROKERS": "127.0.0.1:1", "GATEWAY_PRODUCE_TIMEOUT": "1s"})
		a2 := p.connect(dead, strings.Split(a.name, "/")[0], "laptop")
		id := newID()
		a2.send(sendFrame(sid, id, "into the void"))
		e := a2.ackOf(id)
		if e.Op != wire.OpError || !e.Error.Retryable || (e.Error.Name != "unavailable" && e.Error.Name != "timeout") {
			t.Fatalf("send with Kafka down = %+v, want a retryable unavailable/timeout error", e)
		}
	})

	t.Run("graceful shutdown closes sockets with reconnect", func(t *testing.T) {
		p.t = t
		g2 := p.gateway(nil)
		c := p.connect(g2, user("dave"), "phone")
		if err := g2.stop(); !errors.Is(err, context.Canceled) {
			t.Fatalf("Run after shutdown = %v, want context.Canceled", err)
		}
		<-c.done
		if st := websocket.CloseStatus(c.closeErr()); st != websocket.StatusServiceRestart {
			t.Fatalf("close status %v (%v), want 1012 service restart", st, c.closeErr())
		}
		var ce websocket.CloseError
		if !errors.As(c.closeErr(), &ce) || ce.Reason != "reconnect" {
			t.Fatalf("close reason %v, want reconnect", c.closeErr())
		}
	})
}

// TestAuthAtConnect checks the handshake and HTTP calls reject bad tokens
// with 401 and the registry's codes.
func TestAuthAtConnect(t *testing.T) {
	p := newPipelineNoProcs(t)
	gw := p.gateway(map[string]string{"GATEWAY_DEV_MODE": "true"})
	cases := []struct {
		name  string
		token string
		want  string
	}{
		{"missing", "", "unauthenticated"},
		{"garbage", "abc.def.ghi", "unauthenticated"},
		{"expired", p.token("u1", "d1", -time.Minute), "token_expired"},
		{"wrong secret", mintWith(t, "another-secret-another-secret-another", "u1", "d1"), "unauthenticated"},
	}
	for _, c := range cases {
		t.Run("ws "+c.name, func(t *testing.T) {
			_, resp, err := dial(t, gw, c.token)
			if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("dial = %v, %+v; want 401", err, resp)
			}
			var f frame
			_ = json.NewDecoder(resp.Body).Decode(&f)
			if f.Error.Name != c.want {
				t.Fatalf("error body %+v, want %s", f, c.want)
			}
		})
		t.Run("http "+c.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", "http://"+gw.addr+"/v1/changes", nil)
			if c.token != "" {
				req.Header.Set("Authorization", "Bearer "+c.token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var f frame
			_ = json.NewDecoder(resp.Body).Decode(&f)
			if resp.StatusCode != http.StatusUnauthorized || f.Error.Name != c.want || resp.Header.Get("WWW-Authenticate") == "" {
				t.Fatalf("GET /v1/changes = %d %+v, want 401 %s", resp.StatusCode, f, c.want)
			}
		})
	}
	t.Run("token expiring while connected closes with 4001", func(t *testing.T) {
		c, _, err := dial(t, gw, p.token("u1", "d1", 3*time.Second)) // expiry is whole seconds: 2-3 s to dial in
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-c.done:
		case <-time.After(15 * time.Second):
			t.Fatal("connection outlived its token")
		}
		if st := websocket.CloseStatus(c.closeErr()); st != closeTokenExpired {
			t.Fatalf("close status %v, want %d", st, closeTokenExpired)
		}
	})
	t.Run("a client that answers no ping is closed with 4000", func(t *testing.T) {
		quick := p.gateway(map[string]string{"GATEWAY_HEARTBEAT": "200ms", "GATEWAY_IDLE_TIMEOUT": "700ms"})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ws, _, err := websocket.Dial(ctx, "ws://"+quick.addr+"/v1/ws", &websocket.DialOptions{
			HTTPHeader: http.Header{"Authorization": {"Bearer " + p.token("idle-u", "d1", time.Hour)}}})
		if err != nil {
			t.Fatal(err)
		}
		defer ws.CloseNow()
		time.Sleep(1500 * time.Millisecond) // not reading: pings go unanswered
		var closeErr error
		for closeErr == nil {
			_, _, closeErr = ws.Read(ctx)
		}
		if st := websocket.CloseStatus(closeErr); st != closeIdle {
			t.Fatalf("close = %v, want %d idle_timeout", closeErr, closeIdle)
		}
	})
	t.Run("dev login mints a working token", func(t *testing.T) {
		resp, err := http.Post("http://"+gw.addr+"/v1/dev/login", "application/json", bytes.NewReader([]byte(`{"user_id":"dev-u","device_id":"dev-d"}`)))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct{ Token string }
		_ = json.NewDecoder(resp.Body).Decode(&out)
		c, _, err := dial(t, gw, out.Token)
		if err != nil || c.hello.ConnID == "" {
			t.Fatalf("dial with dev token: %v", err)
		}
	})
	t.Run("dev login is off without dev mode", func(t *testing.T) {
		prod := p.gateway(nil)
		resp, err := http.Post("http://"+prod.addr+"/v1/dev/login", "application/json", strings.NewReader(`{"user_id":"x","device_id":"y"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Fatalf("dev login without dev mode: %d, want 404", resp.StatusCode)
		}
	})
}

// recordsKeyed reads topic, one written outside transactions, from the
// start up to its end as of the call and returns the records with that key.
func recordsKeyed(t *testing.T, p *pipeline, topic, key string) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := p.reader(t, topic)
	// The gateway produces receipts outside transactions, so the high
	// watermark is the last record's offset + 1.
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	left := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	var out []*kgo.Record
	for len(left) > 0 && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		for it := fs.RecordIter(); !it.Done(); {
			r := it.Next()
			if string(r.Key) == key {
				out = append(out, r)
			}
			if end, ok := left[r.Partition]; ok && r.Offset+1 >= end {
				delete(left, r.Partition)
			}
		}
	}
	if len(left) > 0 {
		t.Fatalf("%s: partitions %v not read to their end within 30s", topic, left)
	}
	return out
}
