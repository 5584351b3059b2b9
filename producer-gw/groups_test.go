package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/wire"
	"github.com/seqflow/seqflow/schemas"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// groupWorld is a fresh group: own the owner, adm an admin, mem a member,
// mut a member muted for an hour; x is connected but not a member.
type groupWorld struct {
	session string
	seq     int64 // the last setup event's seq
}

type groupActors struct {
	own, adm, mem, mut, x *client
	ids                   map[*client]string
}

func (a *groupActors) byName(name string) *client {
	return map[string]*client{"own": a.own, "adm": a.adm, "mem": a.mem, "mut": a.mut, "x": a.x}[name]
}

// command sends a frame and waits for its answer: the ACK (status ok) or
// the error frame.
func command(c *client, f map[string]any) frame {
	c.t.Helper()
	id := newID()
	f["client_msg_id"] = id
	c.send(f)
	return c.ackOf(id)
}

func mustOK(c *client, f map[string]any) frame {
	c.t.Helper()
	a := command(c, f)
	if a.Op != wire.OpAck || a.Status != wire.StatusOK {
		c.t.Fatalf("%s: %v answered %+v, want ok", c.name, f, a)
	}
	return a
}

// newGroupWorlds makes n fresh groups, each command phase sent for all of
// them before any answer is awaited.
func newGroupWorlds(a *groupActors, n int) []groupWorld {
	t := a.own.t
	t.Helper()
	// Chunks of 50 stay inside a connection's window of sends in flight.
	phase := func(c *client, frames []map[string]any) []frame {
		var out []frame
		for len(frames) > 0 {
			chunk := frames[:min(50, len(frames))]
			frames = frames[len(chunk):]
			ids := make([]string, len(chunk))
			for i, f := range chunk {
				ids[i] = newID()
				f["client_msg_id"] = ids[i]
				c.send(f)
			}
			for _, id := range ids {
				out = append(out, c.mustAckOK(id))
			}
		}
		return out
	}
	creates := make([]map[string]any, n)
	for i := range creates {
		creates[i] = map[string]any{"op": "create_session", "kind": "group", "title": "t",
			"member_user_ids": []string{a.ids[a.adm], a.ids[a.mem], a.ids[a.mut]}}
	}
	ws := make([]groupWorld, n)
	roles := make([]map[string]any, n)
	for i, c := range phase(a.own, creates) {
		ws[i].session = c.SessionID
		roles[i] = map[string]any{"op": "group", "action": "set_role", "session_id": c.SessionID, "user_id": a.ids[a.adm], "role": "admin"}
	}
	phase(a.own, roles)
	mutes := make([]map[string]any, n)
	for i, w := range ws {
		mutes[i] = map[string]any{"op": "group", "action": "mute", "session_id": w.session, "user_id": a.ids[a.mut],
			"muted_until_ms": time.Now().Add(time.Hour).UnixMilli()}
	}
	for i, m := range phase(a.adm, mutes) {
		ws[i].seq = m.Seq
	}
	return ws
}

// TestGroupRules runs every role × operation through the real pipeline
// (gateway, sequencer, persister, pusher on Kafka and PostgreSQL): each
// answer carries the rule's stable code, and a refused command leaves
// nothing in im.sequenced.v1 but a Refusal on im.duplicates.v1.
func TestGroupRules(t *testing.T) {
	p := newPipeline(t)
	gw := p.gateway(map[string]string{"GATEWAY_RATE_PER_USER": "100000"})
	a := &groupActors{ids: map[*client]string{}}
	for _, name := range []string{"own", "adm", "mem", "mut", "x"} {
		id := user(name)
		c := p.connect(gw, id, "d1")
		a.ids[c] = id
		switch name {
		case "own":
			a.own = c
		case "adm":
			a.adm = c
		case "mem":
			a.mem = c
		case "mut":
			a.mut = c
		case "x":
			a.x = c
		}
	}
	const (
		ok     = "ok"
		denied = "not_permitted"
		muted  = "muted"
		notMem = "not_a_member"
		bad    = "invalid_field"
	)
	type op struct {
		name  string
		frame func(w groupWorld, actor *client) map[string]any
		want  [5]string // own, adm, mem, mut, x
	}
	g := func(action string, kv ...any) func(groupWorld, *client) map[string]any {
		return func(w groupWorld, _ *client) map[string]any {
			f := map[string]any{"op": "group", "action": action, "session_id": w.session}
			for i := 0; i < len(kv); i += 2 {
				f[kv[i].(string)] = kv[i+1]
			}
			return f
		}
	}
	ops := []op{
		{"send", func(w groupWorld, _ *client) map[string]any {
			return map[string]any{"op": "send", "session_id": w.session, "type": "text", "body": "hi"}
		}, [5]string{ok, ok, ok, muted, notMem}},
		{"add", func(w groupWorld, _ *client) map[string]any {
			return map[string]any{"op": "members", "action": "add", "session_id": w.session, "user_ids": []string{user("new")}}
		}, [5]string{ok, ok, denied, denied, notMem}},
		{"kick member", func(w groupWorld, _ *client) map[string]any {
			return map[string]any{"op": "members", "action": "remove", "session_id": w.session, "user_ids": []string{a.ids[a.mem]}}
		}, [5]string{ok, ok, ok /* a leave */, denied, notMem}},
		{"kick admin", func(w groupWorld, _ *client) map[string]any {
			return map[string]any{"op": "members", "action": "remove", "session_id": w.session, "user_ids": []string{a.ids[a.adm]}}
		}, [5]string{ok, ok /* a leave */, denied, denied, notMem}},
		{"kick owner", func(w groupWorld, _ *client) map[string]any {
			return map[string]any{"op": "members", "action": "remove", "session_id": w.session, "user_ids": []string{a.ids[a.own]}}
		}, [5]string{denied, denied, denied, denied, notMem}},
		{"leave", func(w groupWorld, _ *client) map[string]any {
			return map[string]any{"op": "members", "action": "leave", "session_id": w.session}
		}, [5]string{denied, ok, ok, ok, notMem}},
		{"join", g("join"), [5]string{bad, bad, bad, bad, denied}},
		{"make admin", func(w groupWorld, _ *client) map[string]any {
			return g("set_role", "user_id", a.ids[a.mem], "role", "admin")(w, nil)
		}, [5]string{ok, denied, denied, denied, notMem}},
		{"transfer", func(w groupWorld, _ *client) map[string]any {
			return g("transfer_ownership", "user_id", a.ids[a.mem])(w, nil)
		}, [5]string{ok, denied, denied, denied, notMem}},
		{"mute member", func(w groupWorld, _ *client) map[string]any {
			return g("mute", "user_id", a.ids[a.mem], "muted_until_ms", time.Now().Add(time.Hour).UnixMilli())(w, nil)
		}, [5]string{ok, ok, denied, denied, notMem}},
		{"mute admin", func(w groupWorld, _ *client) map[string]any {
			return g("mute", "user_id", a.ids[a.adm], "muted_until_ms", time.Now().Add(time.Hour).UnixMilli())(w, nil)
		}, [5]string{ok, denied, denied, denied, notMem}},
		{"mute all", g("mute_all", "muted", true), [5]string{ok, ok, denied, denied, notMem}},
		{"edit", g("edit", "settings", map[string]any{"title": "new", "join_rule": "open"}), [5]string{ok, ok, denied, denied, notMem}},
		{"dissolve", g("dissolve"), [5]string{ok, denied, denied, denied, notMem}},
	}
	actors := []string{"own", "adm", "mem", "mut", "x"}
	type outcome struct {
		session  string
		setup    int64
		accepted bool
	}
	var outcomes []outcome
	worlds := newGroupWorlds(a, len(ops)*len(actors))
	for _, o := range ops {
		for i, name := range actors {
			w := worlds[0]
			worlds = worlds[1:]
			c := a.byName(name)
			ans := command(c, o.frame(w, c))
			got := ok
			if ans.Op == wire.OpError {
				got = ans.Error.Name
				if ans.Error.Message == "" {
					t.Errorf("%s by %s: refusal %s without a reason", o.name, name, got)
				}
			} else if ans.Status != wire.StatusOK || ans.Seq <= w.seq {
				t.Errorf("%s by %s: answered %+v, want ok with a seq after %d", o.name, name, ans, w.seq)
			}
			if got != o.want[i] {
				t.Errorf("%s by %s: got %s (%s), want %s", o.name, name, got, ans.Error.Message, o.want[i])
			}
			outcomes = append(outcomes, outcome{w.session, w.seq, got == ok})
		}
	}

	// Over HTTP: a refusal decided by the sequencer is the registry's
	// status and error; history renders group events.
	w := newGroupWorlds(a, 1)[0]
	body := func(kv string) string {
		return `{"client_msg_id":"` + newID() + `","session_id":"` + w.session + `",` + kv + `}`
	}
	code, f := httpCall(t, gw, p.token(a.ids[a.mem], "d1", time.Hour), "POST", "/v1/group", body(`"action":"dissolve"`))
	if code != 403 || f.Error.Name != "not_permitted" || f.Error.Message == "" {
		t.Errorf("a member's dissolve over HTTP: %d %+v, want 403 not_permitted with a reason", code, f.Error)
	}
	code, f = httpCall(t, gw, p.token(a.ids[a.own], "d1", time.Hour), "POST", "/v1/group", body(`"action":"edit","settings":{"description":"d","invite_code":"c"}`))
	if code != 200 || f.Status != wire.StatusOK || f.Seq != w.seq+1 {
		t.Fatalf("the owner's edit over HTTP: %d %+v", code, f)
	}
	p.waitStored(w.session, f.Seq)
	code, f = httpCall(t, gw, p.token(a.ids[a.own], "d1", time.Hour), "GET", "/v1/sessions/"+w.session+"/messages?after_seq=0&limit=10", "")
	if code != 200 || len(f.Messages) != 4 {
		t.Fatalf("history: %d, %d messages, want 4", code, len(f.Messages))
	}
	roleEv, editEv := f.Messages[1], f.Messages[3]
	if roleEv.Kind != "group" || roleEv.Action != "set_role" || roleEv.Group == nil || roleEv.Group.UserID != a.ids[a.adm] || roleEv.Group.Role != "admin" {
		t.Errorf("history's set_role event: %+v (group %+v)", roleEv, roleEv.Group)
	}
	if editEv.Group == nil || editEv.Group.Settings == nil || editEv.Group.Settings.HasInviteCode == nil || !*editEv.Group.Settings.HasInviteCode ||
		editEv.Group.Settings.InviteCode != nil || editEv.Group.Settings.Description == nil || *editEv.Group.Settings.Description != "d" {
		t.Errorf("history's edit event: %+v (group %+v)", editEv, editEv.Group)
	}

	// The log holds each setup event and each accepted command, nothing
	// of a refused one; refusals decided by the sequencer are on the
	// duplicates topic.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	events := map[string]int{}
	readAll(ctx, t, p, p.topics.Sequenced, func(r *kgo.Record) {
		events[string(r.Key)]++
	})
	outcomes = append(outcomes, outcome{w.session, w.seq, true})
	for _, o := range outcomes {
		want := 3 // create, set_role, mute
		if o.accepted {
			want++
		}
		if events[o.session] != want {
			t.Errorf("session %s: %d events in the log, want %d", o.session, events[o.session], want)
		}
	}
	refusals := 0
	readAll(ctx, t, p, p.topics.Duplicates, func(r *kgo.Record) {
		if eventlog.Header(r, schemas.HeaderEventType) != "refusal" {
			return
		}
		var rf imv1.Refusal
		if err := proto.Unmarshal(r.Value, &rf); err != nil || rf.Code == imv1.ErrorCode_ERROR_CODE_UNSPECIFIED || rf.Reason == "" {
			t.Errorf("refusal record %v (%v) lacks a code or reason", &rf, err)
		}
		refusals++
	})
	// Every refusal is the sequencer's, x's not_a_member too: the gateway
	// does not refuse on the store's view of membership.
	wantRefusals := 0
	for _, o := range ops {
		for i := range actors {
			if o.want[i] != ok {
				wantRefusals++
			}
		}
	}
	wantRefusals++ // the member's dissolve over HTTP
	if refusals != wantRefusals {
		t.Errorf("%d refusal records, want %d", refusals, wantRefusals)
	}
}

// readAll reads every committed record of topic (4 partitions) up to its
// last stable offset as of now.
func readAll(ctx context.Context, t *testing.T, p *pipeline, topic string, fn func(*kgo.Record)) {
	t.Helper()
	cl, err := kgo.NewClient(eventlog.ClientOpts(p.st.KafkaBrokers, "gw-test-ends")...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	lso, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	lso.Each(func(o kadm.ListedOffset) {
		if _, err := eventlog.ReadCommitted(ctx, eventlog.ClientOpts(p.st.KafkaBrokers, "gw-test-read"), topic, o.Partition, -1, o.Offset, 10*time.Second, fn); err != nil {
			t.Fatalf("read %s/%d: %v", topic, o.Partition, err)
		}
	})
}

// TestMemberListAndSync: a member list paged with roles, the member
// version in changes, and member_changes from any version (paged) bringing
// a client's copy of the list to the store's.
func TestMemberListAndSync(t *testing.T) {
	p := newPipeline(t)
	gw := p.gateway(map[string]string{"GATEWAY_RATE_PER_USER": "100000"})
	owner := user("own")
	c := p.connect(gw, owner, "d1")
	var others []string
	for i := range 6 {
		others = append(others, fmt.Sprintf("%s-%d", user("m"), i))
	}
	sid, _ := createGroup(c, others...)
	g := func(kv ...any) map[string]any {
		f := map[string]any{"op": "group", "session_id": sid}
		for i := 0; i < len(kv); i += 2 {
			f[kv[i].(string)] = kv[i+1]
		}
		return f
	}
	mustOK(c, g("action", "set_role", "user_id", others[0], "role", "admin"))
	mid := mustOK(c, g("action", "mute", "user_id", others[1], "muted_until_ms", int64(4102444800000))).Seq
	mustOK(c, map[string]any{"op": "members", "action": "remove", "session_id": sid, "user_ids": []string{others[2]}})
	mustOK(c, g("action", "transfer_ownership", "user_id", others[3]))
	last := mustOK(c, map[string]any{"op": "send", "session_id": sid, "type": "text", "body": "not a member event"}).Seq
	p.waitStored(sid, last)

	want := map[string]string{owner: "admin", others[0]: "admin", others[1]: "member", others[3]: "owner", others[4]: "member", others[5]: "member"}
	// The page size is 2: four pages, the last one short.
	got := map[string]string{}
	after := ""
	var version int64
	for pages := 0; ; pages++ {
		id := newID()
		c.send(map[string]any{"op": "member_list", "req_id": id, "session_id": sid, "after_user_id": after, "limit": 2})
		r := c.result(id)
		var res wire.MemberListResult
		mustDecode(t, r.raw, &res)
		for _, m := range res.Members {
			got[m.UserID] = m.Role
			after = m.UserID
		}
		version = res.MemberVersion
		if !res.HasMore {
			break
		}
		if pages > 5 {
			t.Fatal("member_list never ends")
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("member list %v, want %v", got, want)
	}
	if version != last-1 {
		t.Errorf("member_version %d, want %d (the transfer, the last membership event)", version, last-1)
	}
	id := newID()
	c.send(map[string]any{"op": "changes", "req_id": id})
	for _, s := range c.result(id).Sessions {
		if s.SessionID == sid && (s.MemberVersion != version || s.Role != "admin") {
			t.Errorf("changes: member_version %d role %q, want %d admin", s.MemberVersion, s.Role, version)
		}
	}

	// From scratch, one event per page, and from just before the mute.
	sync := func(since int64, limit int) (map[string]wire.MemberChange, int64) {
		out := map[string]wire.MemberChange{}
		for {
			id := newID()
			c.send(map[string]any{"op": "member_changes", "req_id": id, "session_id": sid, "since_version": since, "limit": limit})
			var res wire.MemberChangesResult
			mustDecode(t, c.result(id).raw, &res)
			for _, ch := range res.Changes {
				prev, ok := out[ch.UserID]
				if ok && ch.Member && ch.Role == "" {
					ch.Role = prev.Role
				}
				if ok && ch.Member && ch.MutedUntilMs == nil {
					ch.MutedUntilMs = prev.MutedUntilMs
				}
				out[ch.UserID] = ch
			}
			since = res.MemberVersion
			if !res.HasMore {
				return out, since
			}
		}
	}
	for _, limit := range []int{1, 200} {
		all, v := sync(0, limit)
		if v != version {
			t.Errorf("limit %d: synced to version %d, want %d", limit, v, version)
		}
		members := map[string]string{}
		for u, ch := range all {
			if ch.Member {
				members[u] = ch.Role
			}
		}
		if fmt.Sprint(members) != fmt.Sprint(want) {
			t.Errorf("limit %d: members from member_changes %v, want %v", limit, members, want)
		}
		if ch := all[others[2]]; ch.Member || ch.Seq == 0 {
			t.Errorf("limit %d: the removed member's change %+v, want member false with its seq", limit, ch)
		}
		if m := all[others[1]].MutedUntilMs; m == nil || *m != 4102444800000 {
			t.Errorf("limit %d: the muted member's muted_until_ms %v", limit, m)
		}
	}
	since, v := sync(mid-1, 200)
	if v != version || len(since) != 4 {
		t.Errorf("since the mute: %d users changed up to %d (%v), want 4 (mute, remove, transfer's two) up to %d", len(since), v, since, version)
	}
}
