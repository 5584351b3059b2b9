package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seqflow/seqflow/internal/delivery"
	"github.com/seqflow/seqflow/internal/presence"
	"github.com/seqflow/seqflow/internal/wire"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// The push transport's attack tests (docs/security.md): a stranger who
// reaches a gateway's push port or its Redis channel, knowing the gateway
// ID every client learns in hello, tries to teach the gateway a member, to
// replay what a peer sent, to pose as a gateway, or to hold its sockets.

// pushAddr is the address gw's push listener registered, as anyone who
// reads Redis finds it.
func pushAddr(t *testing.T, gw *testGW) string {
	t.Helper()
	var v string
	var err error
	eventually(10*time.Second, func() bool {
		v, err = gw.g.rdb.Get(context.Background(), "seqflow:gateway:{"+gw.g.cfg.GatewayID+"}:push").Result()
		return err == nil
	})
	if err != nil {
		t.Fatalf("registry entry of %s: %v", gw.g.cfg.GatewayID, err)
	}
	if f := strings.Split(v, ";"); len(f) > 1 {
		return f[1] // a signed entry: v1;addr;...
	}
	return v
}

// joinBatch is a batch for gateway id whose one event says user joined
// session: what a gateway learns membership from.
func joinBatch(id, session, user string) *imv1.PushBatch {
	return &imv1.PushBatch{GatewayId: id, Sender: "pusher", SentTsMs: time.Now().UnixMilli(), Items: []*imv1.PushItem{{
		Item: &imv1.PushItem_Event{Event: &imv1.SequencedEvent{SessionId: session, Seq: 1 << 40, MsgId: 1 << 40, SenderUserId: user,
			ServerTsMs: time.Now().UnixMilli(), ClientMsgId: newID(),
			Payload: &imv1.SequencedEvent_Membership{Membership: &imv1.MembershipChange{Op: imv1.MembershipChange_OP_ADD, UserIds: []string{user}}}}},
	}}}
}

// plainFrame is b as the stream carried it before authentication: a
// 4-byte length and the PushBatch.
func plainFrame(t *testing.T, b *imv1.PushBatch) []byte {
	t.Helper()
	v, err := b.MarshalVT()
	if err != nil {
		t.Fatal(err)
	}
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(v))), v...)
}

// historyOf asks for session's history as c and returns the error name,
// "" when it was served.
func historyOf(c *client, session string) string {
	c.t.Helper()
	id := newID()
	c.send(map[string]any{"op": "sync", "req_id": id, "session_id": session, "after_seq": 0, "limit": 10})
	f := c.result(id)
	if f.Op == wire.OpError {
		return f.Error.Name
	}
	return ""
}

// eventually polls cond for up to d.
func eventually(d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); ; time.Sleep(20 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// closedWithin reports whether the peer closes c within d (a read ends in
// EOF or a reset, not in our own deadline).
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// secretSession is a group of alice and bob holding one message, stored.
func secretSession(t *testing.T, p *pipeline, gw *testGW) string {
	t.Helper()
	a := p.connect(gw, user("alice"), "phone")
	sid, _ := createGroup(a, user("bob"))
	id := newID()
	a.send(sendFrame(sid, id, "for members only"))
	p.waitStored(sid, a.mustAckOK(id).Seq)
	return sid
}

// TestPushForgedBatchIsRefused: a membership event forged onto the push
// path, by the stream or by pub/sub, without a MAC or under a key the
// gateway does not hold, is refused before it reaches the membership
// cache: the forged member is still refused the session's history, and the
// refusal is counted (and, on the stream, the connection closed). The
// control shows the same batch from a peer holding the ring does teach
// the gateway, so the test could fail.
func TestPushForgedBatchIsRefused(t *testing.T) {
	p := newPipeline(t)
	gw := p.gateway(nil)
	sid := secretSession(t, p, gw)
	id := gw.g.cfg.GatewayID

	attack := func(t *testing.T, transport, reason string, forge func(t *testing.T, mallory string)) {
		mallory := user("mallory")
		m := p.connect(gw, mallory, "laptop")
		m.t = t
		if e := historyOf(m, sid); e != "not_a_member" {
			t.Fatalf("before the attack mallory's history: %q, want not_a_member", e)
		}
		before := rejections(gw, transport, reason)
		forge(t, mallory)
		refused := eventually(5*time.Second, func() bool { return rejections(gw, transport, reason) > before })
		time.Sleep(200 * time.Millisecond) // a batch let through would be applied by now
		if e := historyOf(m, sid); e != "not_a_member" {
			t.Fatalf("after a forged join over %s, mallory's history: %q, want not_a_member: the gateway learned a member from a stranger", transport, e)
		}
		if !refused {
			t.Fatalf("no %s refusal counted for reason %s", transport, reason)
		}
	}

	t.Run("tcp without a MAC", func(t *testing.T) {
		attack(t, "tcp", rejHandshake, func(t *testing.T, mallory string) {
			c, err := net.Dial("tcp", pushAddr(t, gw))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write(plainFrame(t, joinBatch(id, sid, mallory))); err != nil {
				t.Fatal(err)
			}
			if !closedWithin(c, 3*time.Second) {
				t.Error("the gateway kept the connection of an unauthenticated sender open")
			}
		})
	})
	t.Run("tcp under another key", func(t *testing.T) {
		attack(t, "tcp", rejHandshake, func(t *testing.T, mallory string) {
			err := tcpPeer(t, strangerRing(t, gw), pushAddr(t, gw)).Send(context.Background(), joinBatch(id, sid, mallory))
			if err == nil {
				t.Error("a sender without the ring's key pushed without an error")
			}
		})
	})
	t.Run("redis without a MAC", func(t *testing.T) {
		attack(t, "redis", rejHandshake, func(t *testing.T, mallory string) {
			v, _ := joinBatch(id, sid, mallory).MarshalVT()
			if err := gw.g.rdb.SPublish(context.Background(), delivery.Channel(id), v).Err(); err != nil {
				t.Fatal(err)
			}
		})
	})
	t.Run("redis under another key", func(t *testing.T) {
		attack(t, "redis", rejBadMAC, func(t *testing.T, mallory string) {
			if err := redisPeer(t, gw, strangerRing(t, gw)).Send(context.Background(), joinBatch(id, sid, mallory)); err != nil {
				t.Fatal(err)
			}
		})
	})
	t.Run("control: a peer holding the ring is believed", func(t *testing.T) {
		mallory := user("trusted")
		m := p.connect(gw, mallory, "laptop")
		m.t = t
		if err := tcpPeer(t, ringOf(gw), pushAddr(t, gw)).Send(context.Background(), joinBatch(id, sid, mallory)); err != nil {
			t.Fatal(err)
		}
		if !eventually(5*time.Second, func() bool { return historyOf(m, sid) == "" }) {
			t.Fatal("a join pushed by a peer holding the ring was not learned: the attacks above prove nothing")
		}
	})
}

// recorder is a TCP man in the middle: it relays one sender's connection
// to upstream, records what the sender wrote, and forwards only the first
// forward bytes of it (the handshake), so the gateway never applies the
// frames it records.
type recorder struct {
	ln      net.Listener
	mu      sync.Mutex
	got     bytes.Buffer
	forward int
}

func newRecorder(t *testing.T, upstream string, forward int) *recorder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{ln: ln, forward: forward}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		var up net.Conn
		if upstream != "" {
			if up, err = net.Dial("tcp", upstream); err != nil {
				return
			}
			defer up.Close()
			go func() { _, _ = io.Copy(c, up) }()
		}
		buf := make([]byte, 4096)
		sent := 0
		for {
			n, err := c.Read(buf)
			r.mu.Lock()
			r.got.Write(buf[:n])
			r.mu.Unlock()
			if k := min(n, r.forward-sent); up != nil && k > 0 {
				_, _ = up.Write(buf[:k])
				sent += k
			}
			if err != nil {
				return
			}
		}
	}()
	return r
}

func (r *recorder) addr() string { return r.ln.Addr().String() }

func (r *recorder) bytes() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.got.Bytes())
}

// TestPushReplayIsRefused: what a peer sent, captured on the wire, cannot
// be replayed: not later to the gateway it was for (the handshake binds a
// stream to fresh nonces of both sides), not to another gateway (it binds
// the gateway ID), and a pub/sub message not twice nor to another gateway.
func TestPushReplayIsRefused(t *testing.T) {
	p := newPipeline(t)
	gwA, gwB := p.gateway(nil), p.gateway(nil)
	sid := secretSession(t, p, gwA)
	idA := gwA.g.cfg.GatewayID

	// A peer's stream to A, recorded; only its handshake reaches A.
	mallory := user("mallory")
	rec := newRecorder(t, pushAddr(t, gwA), handshakeBytes(gwA, idA))
	_ = tcpPeer(t, ringOf(gwA), rec.addr()).Send(context.Background(), joinBatch(idA, sid, mallory))
	if !eventually(5*time.Second, func() bool { return len(rec.bytes()) > handshakeBytes(gwA, idA) }) {
		t.Fatalf("recorded %d bytes, want a handshake and a frame", len(rec.bytes()))
	}
	captured := rec.bytes()

	replay := func(t *testing.T, gw *testGW, reason string) {
		m := p.connect(gw, mallory, "laptop")
		m.t = t
		before := rejections(gw, "tcp", reason)
		c, err := net.Dial("tcp", pushAddr(t, gw))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		go func() { _, _ = io.Copy(io.Discard, c) }()
		if _, err := c.Write(captured); err != nil {
			t.Fatal(err)
		}
		refused := eventually(5*time.Second, func() bool { return rejections(gw, "tcp", reason) > before })
		time.Sleep(200 * time.Millisecond)
		if e := historyOf(m, sid); e != "not_a_member" {
			t.Fatalf("after the replay mallory's history on %s: %q, want not_a_member", gw.g.cfg.GatewayID, e)
		}
		if !refused {
			t.Fatalf("no tcp refusal counted for reason %s", reason)
		}
	}
	t.Run("tcp, later, to the same gateway", func(t *testing.T) { replay(t, gwA, rejBadMAC) })
	t.Run("tcp, to another gateway", func(t *testing.T) { replay(t, gwB, rejWrongGateway) })

	t.Run("redis, again and to another gateway", func(t *testing.T) {
		ctx := context.Background()
		sub := gwA.g.rdb.SSubscribe(ctx, delivery.Channel(idA))
		defer sub.Close()
		if _, err := sub.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		// A harmless batch (a typing signal to no connection), to capture.
		b := &imv1.PushBatch{GatewayId: idA, Sender: "gateway", Items: []*imv1.PushItem{{
			Recipients: []*imv1.Recipient{{UserId: mallory, ConnId: "none"}},
			Item:       &imv1.PushItem_Ephemeral{Ephemeral: &imv1.Ephemeral{SessionId: sid, SenderUserId: mallory, Signal: &imv1.Ephemeral_Typing{Typing: &imv1.Typing{Active: true}}}},
		}}}
		if err := redisPeer(t, gwA, ringOf(gwA)).Send(ctx, b); err != nil {
			t.Fatal(err)
		}
		var msg []byte
		select {
		case m := <-sub.Channel():
			msg = []byte(m.Payload)
		case <-time.After(5 * time.Second):
			t.Fatal("captured nothing")
		}
		for _, c := range []struct {
			gw     *testGW
			reason string
		}{{gwA, rejReplay}, {gwB, rejWrongGateway}} {
			before := rejections(c.gw, "redis", c.reason)
			if err := gwA.g.rdb.SPublish(ctx, delivery.Channel(c.gw.g.cfg.GatewayID), msg).Err(); err != nil {
				t.Fatal(err)
			}
			if !eventually(5*time.Second, func() bool { return rejections(c.gw, "redis", c.reason) > before }) {
				t.Fatalf("the replay to %s was not refused as %s", c.gw.g.cfg.GatewayID, c.reason)
			}
		}
	})
}

// TestPushSenderRefusesImpostor: the pusher sends nothing to a listener
// that cannot prove it is the gateway holding the ring's key: not to one
// at an address the registry names for a gateway, nor to one a forged
// registry entry names. The real gateway still gets its pushes over
// pub/sub.
func TestPushSenderRefusesImpostor(t *testing.T) {
	p := newPipeline(t)
	gw := p.gateway(nil)
	alice, bob := user("alice"), user("bob")
	a := p.connect(gw, alice, "phone")
	sid, _ := createGroup(a, bob)
	pres := presence.New(gw.g.rdb, time.Minute)

	// impostor listens, answers a handshake as a gateway without the key
	// would, and records everything the sender writes.
	impostor := func(t *testing.T) *recorder { return newRecorder(t, "", 0) }
	send := func(t *testing.T, body string) {
		id := newID()
		a.send(sendFrame(sid, id, body))
		a.mustAckOK(id)
	}

	t.Run("a listener without the key at a registered address", func(t *testing.T) {
		rec := impostor(t)
		ghost := "gw-ghost-" + newID()[:8]
		registerAt(t, gw, ringOf(gw), ghost, rec.addr())
		if err := pres.Put(context.Background(), presence.Conn{UserID: bob, DeviceID: "tablet", ConnID: "c-" + newID(), GatewayID: ghost}); err != nil {
			t.Fatal(err)
		}
		body := "not for impostors " + newID()
		send(t, body)
		time.Sleep(2 * time.Second)
		// At most the sender's hello: no frame before the listener's proof.
		if got := rec.bytes(); bytes.Contains(got, []byte(body)) || len(got) > handshakeBytes(gw, ghost)-32 {
			t.Fatalf("the pusher wrote %d bytes to a listener that never proved it holds the key", len(got))
		}
	})

	t.Run("a forged registry entry", func(t *testing.T) {
		rec := impostor(t)
		// A gateway the pusher has not dialed yet, so it looks it up.
		gw2 := p.gateway(nil)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		forged := forgedRegistry(t, gw2)
		go func() { // outwrite the gateway's own refreshes
			for i := 0; ctx.Err() == nil; i++ {
				if i%2 == 0 { // unsigned, as the entries were before
					_ = gw.g.rdb.Set(ctx, "seqflow:gateway:{"+gw2.g.cfg.GatewayID+"}:push", rec.addr(), time.Minute).Err()
				} else { // signed under a key the ring does not hold
					_ = forged(ctx, rec.addr())
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
		time.Sleep(100 * time.Millisecond)
		b := p.connect(gw2, bob, "laptop")
		b.t = t
		body := "not for forgers " + newID()
		id := newID()
		a.send(sendFrame(sid, id, body))
		seq := a.mustAckOK(id).Seq
		b.eventOf(sid, seq) // still delivered, over pub/sub
		cancel()
		if got := rec.bytes(); bytes.Contains(got, []byte(body)) || len(got) > 0 {
			t.Fatalf("the pusher followed a forged registry entry and wrote %d bytes to its listener", len(got))
		}
	})
}

// TestPushListenerLimits: the push port does not let strangers hold its
// sockets: a connection silent or trickling through its handshake is
// closed at the handshake deadline, an authenticated one that brings no
// frame at the idle deadline, and past the cap a connection is closed at
// once.
func TestPushListenerLimits(t *testing.T) {
	p := newPipelineNoProcs(t)
	gw := p.gateway(map[string]string{"GATEWAY_PUSH_HANDSHAKE_TIMEOUT": "1s", "GATEWAY_PUSH_IDLE_TIMEOUT": "2s", "GATEWAY_PUSH_MAX_CONNS": "4"})
	addr := pushAddr(t, gw)
	dial := func(t *testing.T) net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}

	t.Run("silent", func(t *testing.T) {
		c := dial(t)
		start := time.Now()
		if !closedWithin(c, 5*time.Second) {
			t.Fatal("a silent connection was still open after 5s (handshake deadline 1s)")
		}
		if d := time.Since(start); d < 800*time.Millisecond {
			t.Fatalf("closed after %s, before the handshake deadline", d)
		}
	})
	t.Run("trickling", func(t *testing.T) {
		c := dial(t)
		done := make(chan bool, 1)
		go func() { done <- closedWithin(c, 5*time.Second) }()
		for _, b := range []byte("SQFP\x01\x01k\x02gw") {
			if _, err := c.Write([]byte{b}); err != nil {
				break
			}
			time.Sleep(300 * time.Millisecond)
		}
		if !<-done {
			t.Fatal("a connection trickling its handshake a byte at a time was still open after 5s")
		}
	})
	t.Run("idle after the handshake", func(t *testing.T) {
		before := rejections(gw, "tcp", rejIdle)
		b := &imv1.PushBatch{GatewayId: gw.g.cfg.GatewayID, Sender: "gateway", Items: []*imv1.PushItem{{
			Recipients: []*imv1.Recipient{{UserId: "nobody", ConnId: "none"}},
			Item:       &imv1.PushItem_Ephemeral{Ephemeral: &imv1.Ephemeral{SessionId: "s", SenderUserId: "x", Signal: &imv1.Ephemeral_Typing{Typing: &imv1.Typing{Active: true}}}},
		}}}
		if err := tcpPeer(t, ringOf(gw), addr).Send(context.Background(), b); err != nil {
			t.Fatal(err)
		}
		if !eventually(6*time.Second, func() bool { return rejections(gw, "tcp", rejIdle) > before }) {
			t.Fatal("an authenticated connection idle past the 2s idle timeout was not closed")
		}
	})
	t.Run("cap", func(t *testing.T) {
		before := rejections(gw, "tcp", rejConnLimit)
		for range 4 {
			dial(t)
		}
		time.Sleep(100 * time.Millisecond) // accepted in order
		c := dial(t)
		if !closedWithin(c, 500*time.Millisecond) {
			t.Fatal("a fifth connection was held open past a cap of 4")
		}
		if rejections(gw, "tcp", rejConnLimit) <= before {
			t.Fatal("the refusal at the cap was not counted")
		}
	})
}
