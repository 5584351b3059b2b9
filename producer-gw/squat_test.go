package main

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/testkit/proc"
	"github.com/seqflow/seqflow/internal/wire"
	"github.com/seqflow/seqflow/schemas"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// refusedWith fails t unless a is an error frame with code name.
func refusedWith(t *testing.T, what string, a frame, name string) {
	t.Helper()
	if a.Op != wire.OpError || a.Error.Name != name {
		t.Fatalf("%s answered %+v, want error %s", what, a, name)
	}
}

// TestNoStrangerTakesASession attacks issue 44's first defect through the
// real pipeline: a direct session's ID is computable from its two users,
// and a join, an add or a send to it before its create used to make the
// stranger its member and the pair's create fail for ever. Every one is
// refused SESSION_NOT_FOUND in log order; the pair then creates and uses
// the session, and the stranger stays out of it.
func TestNoStrangerTakesASession(t *testing.T) {
	p := newPipeline(t)
	gw := p.gateway(nil)
	alice, bob, mallory := user("alice"), user("bob"), user("mallory")
	ca, cb, cm := p.connect(gw, alice, "d1"), p.connect(gw, bob, "d1"), p.connect(gw, mallory, "d1")
	sid := DirectSessionID(alice, bob)

	refusedWith(t, "mallory's join", command(cm, map[string]any{"op": "group", "action": "join", "session_id": sid}), "session_not_found")
	refusedWith(t, "mallory's add", command(cm, map[string]any{"op": "members", "action": "add", "session_id": sid, "user_ids": []string{mallory}}), "session_not_found")
	refusedWith(t, "mallory's send", command(cm, sendFrame(sid, "", "mine now")), "session_not_found")
	// A group's ID is random, but a guessed one is refused alike.
	refusedWith(t, "mallory's join of a guessed group", command(cm, map[string]any{"op": "group", "action": "join", "session_id": "g-00000000000000000000000000000000"}), "session_not_found")

	a := mustOK(ca, map[string]any{"op": "create_session", "kind": "direct", "peer_user_id": bob})
	if a.SessionID != sid || a.Seq != 1 {
		t.Fatalf("the pair's create: session %s seq %d, want %s seq 1 (the refusals took no seq)", a.SessionID, a.Seq, sid)
	}
	sent := mustOK(cb, sendFrame(sid, "", "hi alice"))
	refusedWith(t, "mallory's send after the create", command(cm, sendFrame(sid, "", "let me in")), "not_a_member")
	refusedWith(t, "mallory's join after the create", command(cm, map[string]any{"op": "group", "action": "join", "session_id": sid}), "not_permitted")

	p.waitStored(sid, sent.Seq)
	req := newID()
	cm.send(map[string]any{"op": "sync", "req_id": req, "session_id": sid, "after_seq": 0, "limit": 100})
	if f := cm.result(req); f.Op != wire.OpError || f.Error.Name != "not_a_member" {
		t.Fatalf("mallory's sync of the pair's session: %+v, want not_a_member", f)
	}
	if got := syncAll(t, cb, sid); len(got) != 2 {
		t.Fatalf("bob syncs %d events, want the create and his message", len(got))
	}
}

// TestCommandsDoNotWaitForTheStore: the gateway's early checks must never
// contradict the log. With no persister the store never learns of a
// create, and a gateway started after it never saw it pushed; a member's
// send through that gateway is still accepted (the sequencer decides), and
// a stranger's refused by the sequencer, not by the lagging store.
func TestCommandsDoNotWaitForTheStore(t *testing.T) {
	p := newPipelineNoProcs(t)
	p.startSome(nil, "sequencer", "pusher")
	gw1 := p.gateway(nil)
	alice, bob, mallory := user("alice"), user("bob"), user("mallory")
	sid, _ := createGroup(p.connect(gw1, alice, "d1"), bob)

	gw2 := p.gateway(nil) // a gateway restarted after the create
	cb := p.connect(gw2, bob, "d1")
	if a := mustOK(cb, sendFrame(sid, "", "right after the create")); a.Seq != 2 {
		t.Fatalf("bob's send: seq %d, want 2", a.Seq)
	}
	refusedWith(t, "mallory's send", command(p.connect(gw2, mallory, "d1"), sendFrame(sid, "", "x")), "not_a_member")
}

// TestReclaimHandsBackATakenSession: a session taken before joins needed a
// create (written here as the old sequencer wrote it: a join at seq 1 with
// no create) keeps its taker until an operator hands it back. The pair's
// create is refused with a reason naming the remedy; `seqflow verify`
// lists the session and fails; `seqflow reclaim` appends an audited
// removal; then the pair creates it and the taker is out.
func TestReclaimHandsBackATakenSession(t *testing.T) {
	p := newPipeline(t)
	gw := p.gateway(nil)
	alice, bob, mallory := user("alice"), user("bob"), user("mallory")
	sid := DirectSessionID(alice, bob)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// The old sequencer's work: seq 1 handed out, the join committed.
	if _, err := p.pool.Exec(ctx, `INSERT INTO session_seq (session_id, max_seq, step) VALUES ($1, 1, 1)`, sid); err != nil {
		t.Fatal(err)
	}
	join, _ := proto.Marshal(&imv1.SequencedEvent{SessionId: sid, Seq: 1, MsgId: time.Now().UnixNano(), ClientMsgId: newID(),
		SenderUserId: mallory, SenderDeviceId: "d1", ServerTsMs: time.Now().UnixMilli(),
		Payload: &imv1.SequencedEvent_Group{Group: &imv1.GroupChange{Op: &imv1.GroupChange_Join_{Join: &imv1.GroupChange_Join{}}}}})
	tx, err := kgo.NewClient(append(eventlog.ClientOpts(p.st.KafkaBrokers, "squat-test"), kgo.TransactionalID("squat-"+p.prefix))...)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	if err := tx.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := tx.ProduceSync(ctx, &kgo.Record{Topic: p.topics.Sequenced, Key: []byte(sid), Value: join,
		Headers: eventlog.Headers("group", "seqflow.im.v1.SequencedEvent", "old-sequencer", "")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := tx.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	p.waitStored(sid, 1)

	ca, cm := p.connect(gw, alice, "d1"), p.connect(gw, mallory, "d1")
	create := map[string]any{"op": "create_session", "kind": "direct", "peer_user_id": bob}
	a := command(ca, create)
	refusedWith(t, "the pair's create of the taken session", a, "session_exists")
	if !strings.Contains(a.Error.Message, "reclaim") {
		t.Errorf("the refusal does not name the remedy: %q", a.Error.Message)
	}

	cli := proc.Build(t, "./cmd/seqflow")
	run := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, cli, args...)
		cmd.Env = append(cmd.Environ(), "SEQFLOW_TOPIC_PREFIX="+p.prefix, "SEQFLOW_KAFKA_BROKERS="+strings.Join(p.st.KafkaBrokers, ","), "SEQFLOW_PG_URL="+p.st.PGURL)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	// The harness's store is shared by every test of the package, so
	// verify's exit status says little here (other tests' rows are extra
	// to this log); its list of taken sessions is what is checked.
	out, err := run("verify", "-full")
	if !strings.Contains(out, "taken session "+sid+": since seq 1, listing "+mallory) {
		t.Fatalf("verify before the reclaim (err %v) does not list %s taken by %s:\n%s", err, sid, mallory, out)
	}
	if out, err := run("reclaim", "-session", sid, "-actor", "ops-1", "-reason", "ticket 44"); err != nil {
		t.Fatalf("reclaim: %v\n%s", err, out)
	}

	a = mustOK(ca, create)
	if a.SessionID != sid || a.Seq != 3 {
		t.Fatalf("the pair's create after the reclaim: %s seq %d, want %s seq 3", a.SessionID, a.Seq, sid)
	}
	refusedWith(t, "the taker's send after the reclaim", command(cm, sendFrame(sid, "", "still here?")), "not_a_member")
	p.waitStored(sid, 3)
	if out, err := run("verify", "-full"); !strings.Contains(out, "schema public: ") || strings.Contains(out, "taken session") {
		t.Fatalf("verify after the reclaim (err %v) still lists a taken session, or printed no report:\n%s", err, out)
	}

	// The hand-back is in the log, with who did it and why.
	var found *imv1.MembershipChange
	readAll(ctx, t, p, p.topics.Sequenced, func(r *kgo.Record) {
		var ev imv1.SequencedEvent
		if string(r.Key) != sid || eventlog.Header(r, schemas.HeaderEventType) != "membership" || proto.Unmarshal(r.Value, &ev) != nil {
			return
		}
		if m := ev.GetMembership(); m.GetReclaim() != nil {
			found = m
		}
	})
	if found == nil || found.Reclaim.Actor != "ops-1" || found.Reclaim.Reason != "ticket 44" || strings.Join(found.UserIds, ",") != mallory {
		t.Fatalf("the reclaim event: %+v", found)
	}
}
