package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/testkit/logcheck"
	"github.com/seqflow/seqflow/internal/wire"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// final waits for the final answer to clientMsgID: an ACK with status ok,
// an error frame, or, after "accepted", the seq_notice that follows (ok or
// refused).
func final(c *client, clientMsgID string) frame {
	c.t.Helper()
	f := c.ackOf(clientMsgID)
	if f.Op == wire.OpAck && f.Status == wire.StatusAccepted {
		f = c.expect("seq_notice of "+clientMsgID, func(f frame) bool { return f.Op == wire.OpSeqNotice && f.ClientMsgID == clientMsgID })
	}
	return f
}

// outcome is a final answer reduced to what the race checks need: the
// seq when accepted, else the error name.
func outcome(f frame) (int64, string) {
	switch {
	case f.Op == wire.OpError:
		return 0, f.Error.Name
	case f.Status == wire.StatusRefused && f.Error.Name != "":
		return 0, f.Error.Name
	case f.Status == wire.StatusOK && f.Seq > 0:
		return f.Seq, ""
	}
	return 0, fmt.Sprintf("unexpected answer %+v", f)
}

// TestGroupRacesDecidedInLogOrder races governance commands from
// different connections (an admin demoted while it kicks a member, two
// admins removing each other and the member, the member sending while it
// is removed; once demoted, the first admin is a member the second may
// remove) over many groups, with the sequencer killed -9 and
// restarted in the middle of one round, so that later decisions come from
// group state rebuilt from the log. Whatever order the log took:
//   - every answer agrees with the log (an accepted command is there with
//     its seq; a refused one is not);
//   - the log order explains every decision: an accepted kick by the
//     demoted admin precedes its demotion, every accepted send of the
//     member precedes its removal, and replaying the whole log through the
//     rules (logcheck G6) finds no event they refuse;
//   - the store holds the member's removal at the kick's seq, and the
//     member's connection got no event of the group after it.
func TestGroupRacesDecidedInLogOrder(t *testing.T) {
	p := newPipeline(t)
	gw := p.gateway(map[string]string{"GATEWAY_RATE_PER_USER": "100000"})
	ids := map[string]string{}
	cs := map[string]*client{}
	for _, name := range []string{"own", "adm1", "adm2", "mem"} {
		ids[name] = user(name)
		cs[name] = p.connect(gw, ids[name], "d1")
	}
	own, adm1, adm2, mem := cs["own"], cs["adm1"], cs["adm2"], cs["mem"]
	send := func(c *client, f map[string]any) string {
		id := newID()
		f["client_msg_id"] = id
		c.send(f)
		return id
	}
	type round struct {
		session                   string
		demote, kickByAdm1        int64 // seqs; 0: refused
		kickByAdm2, adm2KicksAdm1 int64
		adm1KicksAdm2             int64
		memSends                  []int64
		memRefused                int
		lastSeq                   int64
		answers                   map[string]int64 // client_msg_id -> seq (0 refused)
	}
	const rounds = 12
	var rs []*round
	for i := range rounds {
		sid, _ := createGroup(own, ids["adm1"], ids["adm2"], ids["mem"])
		mustOK(own, map[string]any{"op": "group", "action": "set_role", "session_id": sid, "user_id": ids["adm1"], "role": "admin"})
		mustOK(own, map[string]any{"op": "group", "action": "set_role", "session_id": sid, "user_id": ids["adm2"], "role": "admin"})
		r := &round{session: sid, answers: map[string]int64{}}
		kick := func(target string) map[string]any {
			return map[string]any{"op": "members", "action": "remove", "session_id": sid, "user_ids": []string{ids[target]}}
		}
		// Everything below is in flight at once, from four connections.
		var memIDs []string
		for range 3 {
			memIDs = append(memIDs, send(mem, map[string]any{"op": "send", "session_id": sid, "type": "text", "body": "m"}))
		}
		kick1 := send(adm1, kick("mem"))
		demote := send(own, map[string]any{"op": "group", "action": "set_role", "session_id": sid, "user_id": ids["adm1"], "role": "member"})
		a1a2 := send(adm1, kick("adm2"))
		a2a1 := send(adm2, kick("adm1"))
		kick2 := send(adm2, kick("mem"))
		for range 3 {
			memIDs = append(memIDs, send(mem, map[string]any{"op": "send", "session_id": sid, "type": "text", "body": "m"}))
		}
		if i == rounds/2 {
			p.procs["sequencer"].Kill()
			if err := p.procs["sequencer"].Restart(); err != nil {
				t.Fatalf("restart sequencer: %v", err)
			}
		}
		res := func(c *client, id string) (int64, string) {
			seq, code := outcome(final(c, id))
			r.answers[id] = seq
			return seq, code
		}
		var code string
		r.kickByAdm1, _ = res(adm1, kick1)
		if r.demote, code = res(own, demote); r.demote == 0 {
			t.Fatalf("round %d: the owner's demotion of an admin was refused: %s", i, code)
		}
		r.adm1KicksAdm2, _ = res(adm1, a1a2)
		r.adm2KicksAdm1, _ = res(adm2, a2a1)
		r.kickByAdm2, _ = res(adm2, kick2)
		for _, id := range memIDs {
			seq, code := res(mem, id)
			if seq > 0 {
				r.memSends = append(r.memSends, seq)
			} else if code != "not_a_member" {
				t.Errorf("round %d: a send of the member refused with %s, want not_a_member", i, code)
			} else {
				r.memRefused++
			}
		}
		for _, seq := range r.answers {
			r.lastSeq = max(r.lastSeq, seq)
		}
		rs = append(rs, r)
	}

	removedAfterDemotion := 0
	for i, r := range rs {
		if r.adm1KicksAdm2 != 0 {
			t.Errorf("round %d: adm1 removed admin adm2 at seq %d: only the owner removes admins", i, r.adm1KicksAdm2)
		}
		if r.adm2KicksAdm1 != 0 && r.adm2KicksAdm1 < r.demote {
			t.Errorf("round %d: adm2 removed adm1 at seq %d, before adm1's demotion at %d made it a member", i, r.adm2KicksAdm1, r.demote)
		}
		if r.adm2KicksAdm1 != 0 {
			removedAfterDemotion++
		}
		if r.kickByAdm1 != 0 && r.kickByAdm1 > r.demote {
			t.Errorf("round %d: adm1's kick accepted at seq %d, after its demotion at %d", i, r.kickByAdm1, r.demote)
		}
		if (r.kickByAdm1 == 0) == (r.kickByAdm2 == 0) {
			t.Errorf("round %d: kicks of the member by adm1 (%d) and adm2 (%d): want exactly one accepted", i, r.kickByAdm1, r.kickByAdm2)
		}
		kick := max(r.kickByAdm1, r.kickByAdm2)
		for _, s := range r.memSends {
			if s > kick {
				t.Errorf("round %d: a send of the member accepted at seq %d, after its removal at %d", i, s, kick)
			}
		}
	}

	t.Logf("%d of %d rounds: the demoted admin was removed by the other admin", removedAfterDemotion, len(rs))

	// The groups of the rounds before the restart are decided from state
	// the new sequencer rebuilt from the log: the demoted admin may no
	// longer mute the group, the owner may.
	for i, r := range rs {
		if r.adm2KicksAdm1 != 0 {
			continue
		}
		f := final(adm1, send(adm1, map[string]any{"op": "group", "action": "mute_all", "session_id": r.session, "muted": true}))
		if seq, code := outcome(f); seq != 0 || code != "not_permitted" {
			t.Errorf("round %d: the demoted admin's mute_all answered seq %d %s, want not_permitted", i, seq, code)
		}
	}

	// The committed log: answers agree with it, and the rules replayed
	// over it refuse nothing in it.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := logcheck.Read(ctx, p.st.KafkaBrokers, p.topics)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.NotAllowed) > 0 {
		t.Errorf("the rules refuse %d events of the log: %v", len(l.NotAllowed), l.NotAllowed)
	}
	inLog := map[string]int64{}
	for _, ev := range l.Events {
		inLog[ev.SessionID+"/"+ev.ClientMsgID] = ev.Seq
	}
	refusals := map[string]bool{}
	for _, rf := range l.Refusals {
		refusals[rf.SessionId+"/"+rf.ClientMsgId] = true
	}
	for i, r := range rs {
		for id, seq := range r.answers {
			k := r.session + "/" + id
			if inLog[k] != seq {
				t.Errorf("round %d: %s answered seq %d, the log holds %d", i, id, seq, inLog[k])
			}
		}
	}
	if len(refusals) == 0 {
		t.Errorf("no refusal records: the races never reached the sequencer's rules")
	}

	// The store and the member's connection agree with the log.
	for i, r := range rs {
		p.waitStored(r.session, r.lastSeq)
		kick := max(r.kickByAdm1, r.kickByAdm2)
		var left *int64
		if err := p.pool.QueryRow(ctx, `SELECT left_seq FROM session_members WHERE session_id = $1 AND user_id = $2`, r.session, ids["mem"]).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left == nil || *left != kick {
			t.Errorf("round %d: store says the member left at %v, the log at %d", i, left, kick)
		}
		own.eventOf(r.session, r.lastSeq)
	}
	time.Sleep(500 * time.Millisecond) // let any wrong push arrive
	for _, r := range rs {
		kick := max(r.kickByAdm1, r.kickByAdm2)
		if f, ok := mem.expectWithin(0, "late event", func(f frame) bool {
			return f.Op == wire.OpEvent && f.Event.SessionID == r.session && f.Event.Seq > kick
		}); ok {
			t.Errorf("the removed member got event %s/%d after its removal at %d", f.Event.SessionID, f.Event.Seq, kick)
		}
	}
}

// TestGroupStateFromSnapshot: with snapshots every 200 ms, a sequencer
// killed -9 and restarted rebuilds its group state from the snapshot plus
// the log after it (its log says so), and decides by both the snapshot's
// changes (a role) and the tail's (a mute made after the snapshot).
func TestGroupStateFromSnapshot(t *testing.T) {
	p := newPipelineNoProcs(t)
	p.startSome([]string{"SEQUENCER_GROUP_SNAPSHOT_INTERVAL=200ms"}, "sequencer", "persister", "pusher")
	gw := p.gateway(map[string]string{"GATEWAY_RATE_PER_USER": "100000"})
	own, adm, mem := user("own"), user("adm"), user("mem")
	co, ca, cm := p.connect(gw, own, "d1"), p.connect(gw, adm, "d1"), p.connect(gw, mem, "d1")
	var sids []string
	for range 8 { // groups over several partitions
		sid, _ := createGroup(co, adm, mem)
		mustOK(co, map[string]any{"op": "group", "action": "set_role", "session_id": sid, "user_id": adm, "role": "admin"})
		sids = append(sids, sid)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // CI runs packages side by side
	defer cancel()
	for { // every partition's snapshot holds the role changes
		var n int
		if err := p.pool.QueryRow(ctx, `SELECT count(*) FROM group_snapshot_sessions WHERE topic = $1`, p.topics.Sequenced).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == len(sids) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("%d of %d groups in snapshots", n, len(sids))
		}
		time.Sleep(100 * time.Millisecond)
	}
	// After the snapshots: the sequencer is stopped before its next one,
	// so these mutes are only in the log's tail.
	p.procs["sequencer"].Kill()
	if err := p.procs["sequencer"].Restart(); err != nil {
		t.Fatal(err)
	}
	for _, sid := range sids {
		mustOK(ca, map[string]any{"op": "group", "action": "mute", "session_id": sid, "user_id": mem, "muted_until_ms": time.Now().Add(time.Hour).UnixMilli()})
	}
	p.procs["sequencer"].Kill()
	if err := p.procs["sequencer"].Restart(); err != nil {
		t.Fatal(err)
	}
	for _, sid := range sids {
		f := final(cm, func() string {
			id := newID()
			cm.send(map[string]any{"op": "send", "client_msg_id": id, "session_id": sid, "type": "text", "body": "hi"})
			return id
		}())
		if _, code := outcome(f); code != "muted" {
			t.Errorf("%s: the muted member's send answered %+v, want muted", sid, f)
		}
		if seq, code := outcome(final(ca, func() string {
			id := newID()
			ca.send(map[string]any{"op": "group", "action": "mute_all", "client_msg_id": id, "session_id": sid, "muted": true})
			return id
		}())); seq == 0 {
			t.Errorf("%s: the admin's mute_all refused (%s): the role from the snapshot was lost", sid, code)
		}
	}
	if !p.procs["sequencer"].LogContains(`"from_snapshot":true`) {
		t.Errorf("the restarted sequencer never rebuilt from a snapshot")
	}

	// The pusher: restarted, it rebuilds membership from a snapshot and
	// the log after it; a user added late and the first members both get
	// a message it pushes.
	late := user("late")
	cl := p.connect(gw, late, "d1")
	for _, sid := range sids {
		mustOK(co, map[string]any{"op": "members", "action": "add", "session_id": sid, "user_ids": []string{late}})
	}
	for _, sid := range sids { // the pusher has pushed the adds: it is past them
		cl.expect("the add of "+sid, func(f frame) bool {
			return f.Op == wire.OpEvent && f.Event.SessionID == sid && f.Event.Kind == "membership"
		})
	}
	// A pusher resumes at its committed offsets and can start from a
	// snapshot only at or before them: wait until it committed past the
	// adds (it commits every second), which the snapshots also hold.
	waitPusherCommitted(ctx, t, p)
	p.procs["pusher"].Kill()
	if err := p.procs["pusher"].Restart(); err != nil {
		t.Fatal(err)
	}
	p.waitReady("pusher")
	for _, sid := range sids {
		seq := mustOK(co, map[string]any{"op": "send", "session_id": sid, "type": "text", "body": "after the pusher's restart"}).Seq
		cl.eventOf(sid, seq)
		ca.eventOf(sid, seq)
	}
	if !p.procs["pusher"].LogContains(`"from_snapshot":true`) {
		t.Errorf("the restarted pusher never rebuilt membership from a snapshot")
	}
	l, err := logcheck.Read(ctx, p.st.KafkaBrokers, p.topics)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.NotAllowed) > 0 {
		t.Errorf("the rules refuse events of the log: %v", l.NotAllowed)
	}
}

// waitPusherCommitted waits until the pusher's group has committed the
// end of every partition of the sequenced topic.
func waitPusherCommitted(ctx context.Context, t *testing.T, p *pipeline) {
	t.Helper()
	cl, err := kgo.NewClient(eventlog.ClientOpts(p.st.KafkaBrokers, "gw-test-offsets")...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	group := "gwt-push-" + strings.TrimSuffix(strings.TrimPrefix(p.prefix, "t-"), ".")
	for {
		ends, err := adm.ListEndOffsets(ctx, p.topics.Sequenced)
		if err != nil {
			t.Fatal(err)
		}
		got, err := adm.FetchOffsets(ctx, group)
		if err != nil {
			t.Fatal(err)
		}
		behind := 0
		ends.Each(func(o kadm.ListedOffset) {
			// The end is past the last commit marker; the pusher commits
			// the offset after the last record it read, before that
			// marker. A sequencer killed -9 leaves aborted records and
			// their marker at the end of a partition nothing was written
			// to since: past the commit too, with nothing to read there.
			// A partition with no record has no commit.
			at := int64(0)
			if c, ok := got.Lookup(p.topics.Sequenced, o.Partition); ok {
				at = c.At
			}
			if at < o.Offset-1 && readableFrom(ctx, t, p, o.Partition, at) {
				behind++
			}
		})
		if behind == 0 {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("the pusher did not commit the end of %d partitions", behind)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// readableFrom reports whether a read_committed consumer finds a record
// of the sequenced topic's partition at or after offset within a second.
func readableFrom(ctx context.Context, t *testing.T, p *pipeline, partition int32, offset int64) bool {
	t.Helper()
	cl, err := kgo.NewClient(append(eventlog.ClientOpts(p.st.KafkaBrokers, "gw-test-readable"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{p.topics.Sequenced: {partition: kgo.NewOffset().At(offset)}}))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return cl.PollFetches(pctx).NumRecords() > 0
}

// TestRefusalIsFinal: a command the rules refused is refused alike when
// retried with the same client_msg_id, though the state changed since
// (the member was unmuted), also by a sequencer rebuilt from the log after
// a kill -9; only a new client_msg_id is decided again. Two attempts of
// one send in flight at once, decided either side of the unmute, would
// otherwise tell the client "refused" of a message the log holds (the
// chaos suite's refused_in_log).
func TestRefusalIsFinal(t *testing.T) {
	p := newPipeline(t)
	gw := p.gateway(nil)
	ownID, memID := user("own"), user("mem")
	own, mem := p.connect(gw, ownID, "d1"), p.connect(gw, memID, "d1")
	sid, _ := createGroup(own, memID)
	mustOK(own, map[string]any{"op": "group", "action": "mute", "session_id": sid, "user_id": memID,
		"muted_until_ms": time.Now().Add(time.Hour).UnixMilli()})
	muted := newID()
	mem.send(sendFrame(sid, muted, "while muted"))
	if e := mem.errorOf(muted); e.Error.Name != "muted" {
		t.Fatalf("send while muted: %+v, want muted", e.Error)
	}
	unmute := mustOK(own, map[string]any{"op": "group", "action": "mute", "session_id": sid, "user_id": memID, "muted_until_ms": 0})
	retry := func(when string) {
		t.Helper()
		mem.send(sendFrame(sid, muted, "while muted"))
		if f := mem.ackOf(muted); f.Op != wire.OpError || f.Error.Name != "muted" {
			t.Fatalf("retry of the refused send %s: %+v, want the same refusal (muted)", when, f)
		}
	}
	retry("after the unmute")
	p.procs["sequencer"].Kill()
	if err := p.procs["sequencer"].Restart(); err != nil {
		t.Fatalf("restart sequencer: %v", err)
	}
	retry("after a kill -9 of the sequencer")
	fresh := newID()
	mem.send(sendFrame(sid, fresh, "unmuted now"))
	if a := mem.mustAckOK(fresh); a.Seq <= unmute.Seq {
		t.Fatalf("a new send after the unmute got seq %d, want one after the unmute's %d", a.Seq, unmute.Seq)
	}
	// The log holds nothing of the refused client message.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	readAll(ctx, t, p, p.topics.Sequenced, func(r *kgo.Record) {
		var ev imv1.SequencedEvent
		if err := proto.Unmarshal(r.Value, &ev); err == nil && ev.ClientMsgId == muted {
			t.Errorf("the refused send is in the log at seq %d", ev.Seq)
		}
	})
}
