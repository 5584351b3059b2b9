package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/migrate"
	"github.com/seqflow/seqflow/internal/presence"
	"github.com/seqflow/seqflow/internal/testkit/proc"
	"github.com/seqflow/seqflow/internal/testkit/stack"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// startProc runs the pusher binary for e and waits for /readyz.
func (e *env) startProc(name string) (*proc.Proc, string) {
	e.t.Helper()
	bin := proc.Build(e.t, "./pusher")
	p := proc.Start(e.t, name, bin,
		"SEQFLOW_KAFKA_BROKERS="+strings.Join(e.st.KafkaBrokers, ","),
		"SEQFLOW_REDIS_ADDR="+e.st.RedisAddr,
		"SEQFLOW_TOPIC_PREFIX="+e.prefix,
		"PUSHER_GROUP="+e.group,
		"PUSHER_INSTANCE_ID="+e.group+"-"+name,
		"PUSHER_ADMIN_ADDR="+proc.AnyPort,
		"PUSHER_RESET_OFFSET=start",
		"PUSHER_SESSION_TIMEOUT=6s",
		"PUSHER_COMMIT_INTERVAL=100ms",
	)
	admin := proc.LoggedAddr(e.t, p, "admin listening", "PUSHER_ADMIN_ADDR")
	e.awaitReady(p, admin)
	return p, admin
}

func (e *env) awaitReady(p *proc.Proc, admin string) {
	e.t.Helper()
	deadline := time.Now().Add(3 * wait)
	for {
		resp, err := http.Get("http://" + admin + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if !p.Running() || time.Now().After(deadline) {
			e.t.Fatalf("%s not ready (running=%v): %v", p, p.Running(), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestPushAfterKillRoutesByReplayedMembership: a pusher killed -9 after it
// consumed and committed a session's membership events comes back with the
// membership rebuilt from the log: the member added before the crash
// receives, the member removed before it does not.
func TestPushAfterKillRoutesByReplayedMembership(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	gw := e.gateway("gw")
	alice, bob, carol := e.user("alice"), e.user("bob"), e.user("carol")
	ca, cb, cc := gw.connect(alice, "d"), gw.connect(bob, "d"), gw.connect(carol, "d")
	p, admin := e.startProc("pusher-1")
	s := e.session("restart")
	e.emit(createEv(s, alice, bob))           // 1
	e.emit(memberEv(s, alice, opAdd, carol))  // 2
	e.emit(memberEv(s, alice, opRemove, bob)) // 3
	awaitSeqs(t, gw, ca, s, 1, 2, 3)
	e.awaitCommitted()
	p.Kill()
	if err := p.Restart(); err != nil {
		t.Fatal(err)
	}
	e.awaitReady(p, admin)
	e.emit(msgEv(s, alice, "after the crash")) // 4
	awaitSeqs(t, gw, ca, s, 1, 2, 3, 4)
	awaitSeqs(t, gw, cc, s, 2, 3, 4)
	if got := gw.seqs(cb, s); len(got) != 3 {
		t.Fatalf("removed member received %v after the restart, want [1 2 3]", got)
	}
	if !p.LogContains("membership rebuilt from the log") {
		t.Fatal("the restarted pusher did not replay membership")
	}
}

// TestEndToEnd: uplinks produced as gateway gw-a would, sequenced by the
// real sequencer, reach the recipient's device on gw-b and the sender's own
// device on gw-a (which completes the ACK); a retried uplink comes back to
// the sender's device as a DuplicateAck with the original seq.
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	st := stack.Require(t, "kafka", "pg", "redis")
	ctx, cancel := context.WithTimeout(context.Background(), 2*wait)
	defer cancel()
	pool, err := pgxpool.New(ctx, st.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrate.Up(ctx, pool, ""); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	pool.Close()
	seqBin := proc.Build(t, "./sequencer")
	proc.Start(t, "sequencer", seqBin,
		"SEQFLOW_KAFKA_BROKERS="+strings.Join(st.KafkaBrokers, ","),
		"SEQFLOW_PG_URL="+st.PGURL,
		"SEQFLOW_TOPIC_PREFIX="+e.prefix,
		"SEQUENCER_GROUP="+e.group+"-seq",
		"SEQUENCER_INSTANCE_ID="+e.group+"-seq",
		"SEQUENCER_ADMIN_ADDR=",
		"SEQUENCER_SESSION_TIMEOUT=6s",
	)
	gwA, gwB := e.gateway("gw-a"), e.gateway("gw-b")
	alice, bob := e.user("alice"), e.user("bob")
	ca, cb := gwA.connect(alice, "phone"), gwB.connect(bob, "laptop")
	e.startPusher(e.config())

	s := e.session("e2e")
	uplink := func(clientMsgID string, cmd *imv1.Uplink) {
		t.Helper()
		cmd.SessionId, cmd.ClientMsgId, cmd.SenderUserId, cmd.SenderDeviceId = s, clientMsgID, alice, "phone"
		cmd.GatewayId, cmd.GatewayTsMs = gwA.id, time.Now().UnixMilli()
		v, _ := proto.Marshal(cmd)
		if err := e.cl.ProduceSync(ctx, &kgo.Record{Topic: e.topics.Uplink, Key: []byte(s), Value: v}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	uplink("create-1", &imv1.Uplink{Command: &imv1.Uplink_SessionCreate{SessionCreate: &imv1.SessionCreate{
		Kind: imv1.SessionKind_SESSION_KIND_DIRECT, MemberUserIds: []string{bob}}}})
	msgID := "msg-" + uuid.NewString()
	send := &imv1.Uplink{Command: &imv1.Uplink_Message{Message: &imv1.MessageContent{Type: "text", Body: []byte("hello bob")}}}
	uplink(msgID, send)
	awaitSeqs(t, gwB, cb, s, 1, 2)
	awaitSeqs(t, gwA, ca, s, 1, 2)
	var got *imv1.SequencedEvent
	gwB.mu.Lock()
	for _, it := range gwB.got[cb.ConnID] {
		if it.GetEvent().GetClientMsgId() == msgID {
			got = it.GetEvent()
		}
	}
	gwB.mu.Unlock()
	if got == nil || string(got.GetMessage().GetBody()) != "hello bob" || got.GatewayId != gwA.id {
		t.Fatalf("bob's device got %v", got)
	}
	// The retry.
	uplink(msgID, &imv1.Uplink{Command: &imv1.Uplink_Message{Message: &imv1.MessageContent{Type: "text", Body: []byte("hello bob")}}})
	eventually(t, "the duplicate ACK on alice's phone", func() bool { return len(gwA.duplicates(ca)) == 1 })
	if d := gwA.duplicates(ca)[0]; d.Seq != got.Seq || d.MsgId != got.MsgId || d.ClientMsgId != msgID {
		t.Fatalf("duplicate ACK %v, want seq %d msg_id %d", d, got.Seq, got.MsgId)
	}
	if n := len(gwB.duplicates(cb)); n != 0 {
		t.Fatalf("bob got %d duplicate ACKs of alice's retry", n)
	}
}

// TestPushLargeGroup: a 10,000-member group with 300 members online on
// three gateways. Each gateway gets one item per event holding exactly its
// online members. With the offline limit lifted (PUSHER_OFFLINE_MAX_MEMBERS
// 0) the 9,700 offline members get one notification each (the default limit
// is covered by TestBuildPlan's table).
func TestPushLargeGroup(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	gws := []*gateway{e.gateway("gw-0"), e.gateway("gw-1"), e.gateway("gw-2")}
	members := make([]string, 10_000)
	type onlineConn struct {
		g *gateway
		c presence.Conn
	}
	var online []onlineConn
	for i := range members {
		members[i] = e.user(fmt.Sprintf("u%05d", i))
		if i%100 < 3 {
			g := gws[len(online)%3]
			online = append(online, onlineConn{g, g.connect(members[i], "d")})
		}
	}
	cfg := e.config()
	cfg.OfflineMaxMembers = 0
	e.startPusher(cfg)
	s := e.session("large")
	e.emit(createEv(s, members[0], members[1:]...))
	e.emit(msgEv(s, members[1], "to everyone"))
	for _, o := range online {
		awaitSeqs(t, o.g, o.c, s, 1, 2)
	}
	for _, g := range gws {
		g.mu.Lock()
		items := map[*imv1.PushItem]bool{}
		for _, its := range g.got {
			for _, it := range its {
				if it.GetEvent().GetSeq() == 2 {
					items[it] = true
				}
			}
		}
		g.mu.Unlock()
		if len(items) != 1 {
			t.Fatalf("gateway %s got the message in %d items, want 1", g.id, len(items))
		}
		for it := range items {
			if len(it.Recipients) != 100 {
				t.Fatalf("gateway %s item has %d recipients, want its 100 online members", g.id, len(it.Recipients))
			}
		}
	}
	if n := len(e.offline(s, 9_700)); n != 9_700 {
		t.Fatalf("%d offline notifications, want 9700", n)
	}
}
