package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/seqflow/seqflow/internal/presence"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// These tests run the pusher in-process against the local Kafka and Redis.
// They play the sequencer by producing SequencedEvents in Kafka
// transactions, as it does (emit), and the gateways with test receivers
// over the real Redis transport. TestEndToEnd runs the real sequencer.

const (
	opAdd    = imv1.MembershipChange_OP_ADD
	opRemove = imv1.MembershipChange_OP_REMOVE
)

// TestPushOnlineOfflineMixed: online devices get the event (the sender's
// own devices too, which is how the sender's gateway completes its ACK);
// members with no online device get an offline notification instead.
func TestPushOnlineOfflineMixed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	gwA, gwB := e.gateway("gw-a"), e.gateway("gw-b")
	e.startPusher(e.config())
	cases := []struct {
		name        string
		online      []string // users online: "name@gateway"
		members     []string
		wantOffline []string
	}{
		{"all online", []string{"alice@a", "bob@b", "carol@a", "carol@b"}, []string{"bob", "carol"}, nil},
		{"all offline but the sender", []string{"alice@a"}, []string{"bob", "carol"}, []string{"bob", "carol"}},
		{"mixed", []string{"alice@b", "bob@a"}, []string{"bob", "carol", "dave"}, []string{"carol", "dave"}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := e.session(fmt.Sprint("mixed-", i))
			u := func(n string) string { return e.user(fmt.Sprintf("%d-%s", i, n)) }
			var conns []presence.Conn
			var gws []*gateway
			for j, o := range c.online {
				name, gw := o[:len(o)-2], o[len(o)-1:]
				g := gwA
				if gw == "b" {
					g = gwB
				}
				conns = append(conns, g.connect(u(name), fmt.Sprint("dev-", j)))
				gws = append(gws, g)
			}
			members := make([]string, len(c.members))
			for j, m := range c.members {
				members[j] = u(m)
			}
			e.emit(createEv(s, u("alice"), members...))
			e.emit(msgEv(s, u("alice"), "hello, world"))
			for j, cn := range conns {
				awaitSeqs(t, gws[j], cn, s, 1, 2)
			}
			got := e.offline(s, len(c.wantOffline))
			var who []string
			for _, n := range got {
				who = append(who, n.RecipientUserId)
				if n.Seq != 2 || n.Preview != "hello, world" || n.SenderUserId != u("alice") || n.MsgId == 0 {
					t.Fatalf("offline notification %v", n)
				}
			}
			slices.Sort(who)
			want := make([]string, len(c.wantOffline))
			for j, w := range c.wantOffline {
				want[j] = u(w)
			}
			if !slices.Equal(who, want) {
				t.Fatalf("offline notifications for %v, want %v", who, want)
			}
		})
	}
}

// TestPushMembershipChanges: a removed member receives its removal and
// nothing after; an added member receives from the event that adds it on.
func TestPushMembershipChanges(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	gw := e.gateway("gw")
	alice, bob, carol := e.user("alice"), e.user("bob"), e.user("carol")
	ca, cb, cc := gw.connect(alice, "d"), gw.connect(bob, "d"), gw.connect(carol, "d")
	e.startPusher(e.config())
	s := e.session("members")
	e.emit(createEv(s, alice, bob))                                         // 1
	e.emit(msgEv(s, alice, "before carol"))                                 // 2
	e.emit(memberEv(s, alice, opAdd, carol))                                // 3
	e.emit(msgEv(s, bob, "with carol"))                                     // 4
	e.emit(memberEv(s, alice, opRemove, bob), msgEv(s, alice, "after bob")) // 5, 6
	awaitSeqs(t, gw, ca, s, 1, 2, 3, 4, 5, 6)
	awaitSeqs(t, gw, cc, s, 3, 4, 5, 6)
	awaitSeqs(t, gw, cb, s, 1, 2, 3, 4, 5)
	// The one after the last must not come late either.
	e.emit(msgEv(s, carol, "later"))
	awaitSeqs(t, gw, ca, s, 1, 2, 3, 4, 5, 6, 7)
	if got := gw.seqs(cb, s); !slices.Equal(got, []int64{1, 2, 3, 4, 5}) {
		t.Fatalf("removed member got %v", got)
	}
}

// TestPushDuplicateAckToSendingDevice: a DuplicateAck reaches the device
// that retried, on its gateway, and no other device.
func TestPushDuplicateAckToSendingDevice(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	gwA, gwB := e.gateway("gw-a"), e.gateway("gw-b")
	alice := e.user("alice")
	phone, laptop := gwA.connect(alice, "phone"), gwB.connect(alice, "laptop")
	e.startPusher(e.config())
	s := e.session("dup")
	e.emitDuplicate(&imv1.DuplicateAck{SessionId: s, ClientMsgId: "cm-1", Seq: 7, MsgId: 77, SenderUserId: alice, SenderDeviceId: "phone", GatewayId: gwA.id})
	eventually(t, "the duplicate ACK on alice's phone", func() bool { return len(gwA.duplicates(phone)) == 1 })
	d := gwA.duplicates(phone)[0]
	if d.Seq != 7 || d.MsgId != 77 || d.ClientMsgId != "cm-1" {
		t.Fatalf("duplicate ACK %v", d)
	}
	e.emit(createEv(s, alice)) // a later event proves the laptop was reachable all along
	awaitSeqs(t, gwB, laptop, s, 1)
	if n := len(gwB.duplicates(laptop)); n != 0 {
		t.Fatalf("the laptop got %d duplicate ACKs of the phone's retry", n)
	}
}

// TestPushGatewayKilledMidPush: one gateway disappears while messages
// stream; the other keeps getting every message, the dead one's pushes are
// dropped and counted, and commits keep moving.
func TestPushGatewayKilledMidPush(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"redis", "tcp"} {
		t.Run(kind, func(t *testing.T) { testGatewayKilled(t, kind) })
	}
}

func testGatewayKilled(t *testing.T, kind string) {
	e := newEnv(t)
	gwA, gwB := e.gatewayOf(kind, "gw-a"), e.gatewayOf(kind, "gw-b")
	alice, bob := e.user("alice"), e.user("bob")
	ca, cb := gwA.connect(alice, "d"), gwB.connect(bob, "d")
	r := e.startPusher(e.config())
	s := e.session("kill")
	e.emit(createEv(s, alice, bob))
	const n = 120
	want := []int64{1}
	for i := 2; i <= n+1; i++ {
		want = append(want, int64(i))
	}
	var wg sync.WaitGroup
	killed := make(chan struct{})
	wg.Go(func() {
		for i := 1; i <= n; i++ {
			if i == n/3 {
				gwB.kill() // its presence stays behind, as a crashed gateway's does
				close(killed)
			}
			e.emit(msgEv(s, bob, fmt.Sprint("m", i)))
			time.Sleep(5 * time.Millisecond)
		}
	})
	wg.Wait()
	<-killed
	awaitSeqs(t, gwA, ca, s, want...)
	if got := gwB.seqs(cb, s); len(got) >= n {
		t.Fatalf("the killed gateway got %d events", len(got))
	}
	dropped := 0.0
	for _, reason := range []string{"no_receiver", "gateway_down"} {
		dropped += value(r.p.m.droppedItems.WithLabelValues(reason))
	}
	if dropped == 0 {
		t.Fatal("no drops counted for the dead gateway")
	}
	e.awaitCommitted()
}

// TestPushPresenceCacheFollowsConnects: the pusher's presence cache keeps
// offline members too, and a device that connects (or closes) is routed
// by the next event after the gateway's announcement was heard: no push
// missed for a cached "offline", none sent to a closed connection.
func TestPushPresenceCacheFollowsConnects(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	gw := e.gateway("gw-a")
	r := e.startPusher(e.config())
	cache, ok := r.p.presence.(*presence.Cache)
	if !ok {
		t.Fatalf("presence is %T, want the cache (PUSHER_PRESENCE_CACHE defaults to true)", r.p.presence)
	}
	eventually(t, "cache subscribed", cache.Subscribed)
	s := e.session("cache")
	alice, bob := e.user("alice"), e.user("bob")
	ca := gw.connect(alice, "phone")
	e.emit(createEv(s, alice, bob))
	e.emit(msgEv(s, alice, "bob is offline"))
	awaitSeqs(t, gw, ca, s, 1, 2)

	var cb presence.Conn
	steps := []struct {
		name      string
		change    func()
		seq       int64
		bobSeqs   []int64 // what bob's connection has after the event
		bobOnline bool
	}{
		{"connect after being cached offline", func() { cb = gw.connect(bob, "laptop") }, 3, []int64{3}, true},
		{"close", func() {
			if err := e.pres.Remove(context.Background(), cb); err != nil {
				t.Fatal(err)
			}
		}, 4, []int64{3}, false},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			st.change()
			// bob's own announcement, not any: other tests' users are
			// announced on the same channel.
			eventually(t, "announcement heard", func() bool {
				m, err := cache.Lookup(context.Background(), []string{bob})
				return err == nil && (len(m[bob]) > 0) == st.bobOnline
			})
			e.emit(msgEv(s, alice, st.name))
			want := []int64{}
			for q := int64(1); q <= st.seq; q++ {
				want = append(want, q)
			}
			awaitSeqs(t, gw, ca, s, want...)
			awaitSeqs(t, gw, cb, s, st.bobSeqs...)
		})
	}
	// Offline notifications for bob: seq 2 (cached offline) and 4 (closed),
	// not 3.
	var seqs []int64
	for _, n := range e.offline(s, 2) {
		seqs = append(seqs, n.Seq)
	}
	slices.Sort(seqs)
	if !slices.Equal(seqs, []int64{2, 4}) {
		t.Fatalf("offline notifications for seqs %v, want [2 4]", seqs)
	}
	if cache.Hits() == 0 {
		t.Fatal("no lookup was answered from the cache")
	}
}
