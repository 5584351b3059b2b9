package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/wire"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// TestTyping: a typing indicator reaches the session's other members on
// this and other gateways (over WebSocket and HTTP), not its sender,
// carries its expiry, is refused to a non-member and past a device's
// rate, and never enters the sequenced log.
func TestTyping(t *testing.T) {
	p := newPipeline(t)
	gwA, gwB := p.gateway(nil), p.gateway(nil)
	alice, bob, carol, dave := user("alice"), user("bob"), user("carol"), user("dave")
	a := p.connect(gwA, alice, "phone")
	sid, created := createGroup(a, bob, carol)
	p.waitStored(sid, created)
	b := p.connect(gwB, bob, "laptop")
	c := p.connect(gwA, carol, "phone")
	d := p.connect(gwB, dave, "phone")

	isTyping := func(from string, active bool) func(frame) bool {
		return func(f frame) bool {
			return f.Op == wire.OpTyping && f.SessionID == sid && f.UserID == from && f.Active == active
		}
	}
	a.send(map[string]any{"op": "typing", "req_id": "t1", "session_id": sid, "active": true})
	if r := a.result("t1"); r.Op != wire.OpResult {
		t.Fatalf("typing: %+v", r)
	}
	for _, cl := range []*client{b, c} {
		f := cl.expect("alice typing", isTyping(alice, true))
		if f.DeviceID != "phone" || f.ExpiresInMs != typingExpiry.Milliseconds() {
			t.Fatalf("%s got %+v, want alice's phone with expires_in_ms %d", cl.name, f, typingExpiry.Milliseconds())
		}
	}
	a.send(map[string]any{"op": "typing", "session_id": sid}) // stopped; no req_id, no answer
	b.expect("alice stopped", isTyping(alice, false))

	// Over HTTP, from bob's other device: alice gets it on gateway A.
	req, _ := http.NewRequest("POST", "http://"+gwB.addr+"/v1/typing", strings.NewReader(`{"session_id":"`+sid+`","active":true}`))
	req.Header.Set("Authorization", "Bearer "+p.token(bob, "cli", time.Hour))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /v1/typing: %d %s", resp.StatusCode, body)
	}
	a.expect("bob typing over HTTP", isTyping(bob, true))

	// Nobody gets their own indicator, nor does a non-member.
	if f, ok := a.expectWithin(500*time.Millisecond, "own typing", isTyping(alice, true)); ok {
		t.Fatalf("alice got her own indicator: %+v", f)
	}
	if f, ok := d.expectWithin(100*time.Millisecond, "typing", func(f frame) bool { return f.Op == wire.OpTyping }); ok {
		t.Fatalf("dave, not a member, got %+v", f)
	}
	d.send(map[string]any{"op": "typing", "req_id": "td", "session_id": sid, "active": true})
	if r := d.result("td"); r.Op != wire.OpError || r.Error.Name != "not_a_member" {
		t.Fatalf("typing by a non-member: %+v, want not_a_member", r)
	}

	// A device's burst is bounded; the excess is refused, not queued.
	limited := 0
	for i := range 10 {
		id := fmt.Sprintf("burst%d", i)
		c.send(map[string]any{"op": "typing", "req_id": id, "session_id": sid, "active": true})
		if r := c.result(id); r.Op == wire.OpError {
			if r.Error.Name != "rate_limited" {
				t.Fatalf("typing burst: %+v", r)
			}
			limited++
		}
	}
	if limited < 10-typingBurst-1 {
		t.Fatalf("%d of 10 typing frames back to back refused, want at least %d (burst %d)", limited, 10-typingBurst-1, typingBurst)
	}

	// Nothing of it was sequenced: up to a message sent after it all, the
	// session's log holds the create and that message only.
	id := newID()
	a.send(sendFrame(sid, id, "after the typing"))
	last := a.mustAckOK(id)
	cl := p.reader(t, p.topics.Sequenced)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var seqs []int64
	for ctx.Err() == nil && (len(seqs) == 0 || seqs[len(seqs)-1] != last.Seq) {
		fs := cl.PollFetches(ctx)
		for it := fs.RecordIter(); !it.Done(); {
			r := it.Next()
			var ev imv1.SequencedEvent
			if string(r.Key) != sid || proto.Unmarshal(r.Value, &ev) != nil {
				continue
			}
			seqs = append(seqs, ev.Seq)
		}
	}
	if len(seqs) != 2 || seqs[0] != created || seqs[1] != last.Seq {
		t.Fatalf("the session's sequenced events are %v, want only the create %d and the message %d", seqs, created, last.Seq)
	}
}
