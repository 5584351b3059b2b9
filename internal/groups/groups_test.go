package groups

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/schemas/imv1"
)

const gid = "g-1"

// world is a group with an owner, an admin, a member, a muted member and a
// muted admin; "x" is not a member.
func world(t *testing.T) *Partition {
	t.Helper()
	p := NewPartition(10)
	steps := []*imv1.Uplink{
		up("own", &imv1.Uplink_SessionCreate{SessionCreate: &imv1.SessionCreate{Kind: imv1.SessionKind_SESSION_KIND_GROUP,
			MemberUserIds: []string{"adm", "mem", "mut", "madm"}}}),
		group("own", &imv1.GroupChange{Op: &imv1.GroupChange_SetRole_{SetRole: &imv1.GroupChange_SetRole{UserId: "adm", Role: imv1.GroupRole_GROUP_ROLE_ADMIN}}}),
		group("own", &imv1.GroupChange{Op: &imv1.GroupChange_SetRole_{SetRole: &imv1.GroupChange_SetRole{UserId: "madm", Role: imv1.GroupRole_GROUP_ROLE_ADMIN}}}),
		group("adm", &imv1.GroupChange{Op: &imv1.GroupChange_Mute_{Mute: &imv1.GroupChange_Mute{UserId: "mut", UntilMs: 2000}}}),
		group("own", &imv1.GroupChange{Op: &imv1.GroupChange_Mute_{Mute: &imv1.GroupChange_Mute{UserId: "madm", UntilMs: 2000}}}),
	}
	for i, u := range steps {
		if r := p.Sequence(u, 500); r != nil {
			t.Fatalf("setup step %d refused: %v", i, r)
		}
	}
	return p
}

var n int

func up(sender string, cmd any) *imv1.Uplink {
	n++
	u := &imv1.Uplink{SessionId: gid, SenderUserId: sender, ClientMsgId: fmt.Sprint("c", n)}
	switch c := cmd.(type) {
	case *imv1.Uplink_SessionCreate:
		u.Command = c
	case *imv1.Uplink_Membership:
		u.Command = c
	case *imv1.Uplink_Message:
		u.Command = c
	case *imv1.Uplink_Recall:
		u.Command = c
	}
	return u
}

func group(sender string, g *imv1.GroupChange) *imv1.Uplink {
	u := up(sender, nil)
	u.Command = &imv1.Uplink_Group{Group: g}
	return u
}

func members(op imv1.MembershipChange_Op, ids ...string) *imv1.Uplink_Membership {
	return &imv1.Uplink_Membership{Membership: &imv1.MembershipChange{Op: op, UserIds: ids}}
}

var (
	add    = imv1.MembershipChange_OP_ADD
	remove = imv1.MembershipChange_OP_REMOVE
	ok     = imv1.ErrorCode_ERROR_CODE_UNSPECIFIED
	denied = imv1.ErrorCode_ERROR_CODE_NOT_PERMITTED
	muted  = imv1.ErrorCode_ERROR_CODE_MUTED
	notMem = imv1.ErrorCode_ERROR_CODE_NOT_A_MEMBER
	bad    = imv1.ErrorCode_ERROR_CODE_INVALID_FIELD
)

func str(s string) *string { return &s }

// TestRules is every role × operation on the pure rules; the same table
// runs through the real pipeline in producer-gw's TestGroupRules.
func TestRules(t *testing.T) {
	type op struct {
		name string
		make func(actor string) *imv1.Uplink
	}
	ops := []op{
		{"send", func(a string) *imv1.Uplink {
			return up(a, &imv1.Uplink_Message{Message: &imv1.MessageContent{Type: "text", Body: []byte("hi")}})
		}},
		{"recall", func(a string) *imv1.Uplink { return up(a, &imv1.Uplink_Recall{Recall: &imv1.Recall{TargetSeq: 1}}) }},
		{"add", func(a string) *imv1.Uplink { return up(a, members(add, "new")) }},
		{"kick member", func(a string) *imv1.Uplink { return up(a, members(remove, "mem")) }},
		{"kick admin", func(a string) *imv1.Uplink { return up(a, members(remove, "adm")) }},
		{"kick owner", func(a string) *imv1.Uplink { return up(a, members(remove, "own")) }},
		{"leave", func(a string) *imv1.Uplink { return up(a, members(remove, a)) }},
		{"join", func(a string) *imv1.Uplink {
			return group(a, &imv1.GroupChange{Op: &imv1.GroupChange_Join_{Join: &imv1.GroupChange_Join{}}})
		}},
		{"make admin", func(a string) *imv1.Uplink {
			return group(a, &imv1.GroupChange{Op: &imv1.GroupChange_SetRole_{SetRole: &imv1.GroupChange_SetRole{UserId: "mem", Role: imv1.GroupRole_GROUP_ROLE_ADMIN}}})
		}},
		{"transfer", func(a string) *imv1.Uplink {
			return group(a, &imv1.GroupChange{Op: &imv1.GroupChange_TransferOwnership_{TransferOwnership: &imv1.GroupChange_TransferOwnership{UserId: "mem"}}})
		}},
		{"mute member", func(a string) *imv1.Uplink {
			return group(a, &imv1.GroupChange{Op: &imv1.GroupChange_Mute_{Mute: &imv1.GroupChange_Mute{UserId: "mem", UntilMs: 9000}}})
		}},
		{"mute admin", func(a string) *imv1.Uplink {
			return group(a, &imv1.GroupChange{Op: &imv1.GroupChange_Mute_{Mute: &imv1.GroupChange_Mute{UserId: "adm", UntilMs: 9000}}})
		}},
		{"mute all", func(a string) *imv1.Uplink {
			return group(a, &imv1.GroupChange{Op: &imv1.GroupChange_MuteAll_{MuteAll: &imv1.GroupChange_MuteAll{Muted: true}}})
		}},
		{"edit", func(a string) *imv1.Uplink {
			return group(a, &imv1.GroupChange{Op: &imv1.GroupChange_Edit{Edit: &imv1.GroupChange_EditGroup{Title: str("new title")}}})
		}},
		{"dissolve", func(a string) *imv1.Uplink {
			return group(a, &imv1.GroupChange{Op: &imv1.GroupChange_Dissolve_{Dissolve: &imv1.GroupChange_Dissolve{}}})
		}},
	}
	actors := []string{"own", "adm", "mem", "mut", "x"}
	want := map[string][]imv1.ErrorCode{
		//              own     adm     mem     mut     x
		"send":   {ok, ok, ok, muted, notMem},
		"recall": {ok, ok, ok, ok, notMem},
		"add":    {ok, ok, denied, denied, notMem},
		// Removing yourself alone is a leave (mem in "kick member", adm
		// in "kick admin").
		"kick member": {ok, ok, ok, denied, notMem},
		"kick admin":  {ok, ok, denied, denied, notMem},
		"kick owner":  {denied, denied, denied, denied, notMem},
		"leave":       {denied, ok, ok, ok, notMem},
		"join":        {bad, bad, bad, bad, denied},
		"make admin":  {ok, denied, denied, denied, notMem},
		"transfer":    {ok, denied, denied, denied, notMem},
		"mute member": {ok, ok, denied, denied, notMem},
		"mute admin":  {ok, denied, denied, denied, notMem},
		"mute all":    {ok, ok, denied, denied, notMem},
		"edit":        {ok, ok, denied, denied, notMem},
		"dissolve":    {ok, denied, denied, denied, notMem},
	}
	for _, o := range ops {
		for i, a := range actors {
			t.Run(o.name+"/"+a, func(t *testing.T) {
				p := world(t)
				before := p.Clone()
				r := p.Sequence(o.make(a), 1000)
				got := ok
				if r != nil {
					got = r.Code
					if r.Reason == "" {
						t.Errorf("refusal %v without a reason", r.Code)
					}
					if !reflect.DeepEqual(p.sessions, before.sessions) {
						t.Errorf("a refused %s changed the state", o.name)
					}
				}
				if got != want[o.name][i] {
					t.Errorf("%s by %s: got %v (%v), want %v", o.name, a, got, r, want[o.name][i])
				}
			})
		}
	}
}

func TestMuteExpiresAndMuteAllSparesAdmins(t *testing.T) {
	p := world(t)
	send := func(a string, now int64) *Refusal {
		return p.Sequence(up(a, &imv1.Uplink_Message{Message: &imv1.MessageContent{Type: "text"}}), now)
	}
	if r := send("mut", 1999); r == nil || r.Code != muted {
		t.Fatalf("muted until 2000, sending at 1999: %v", r)
	}
	if r := send("mut", 2000); r != nil {
		t.Fatalf("mute over at 2000: %v", r)
	}
	if r := p.Sequence(group("adm", &imv1.GroupChange{Op: &imv1.GroupChange_MuteAll_{MuteAll: &imv1.GroupChange_MuteAll{Muted: true}}}), 3000); r != nil {
		t.Fatal(r)
	}
	if r := send("mem", 3001); r == nil || r.Code != muted {
		t.Fatalf("member during mute-all: %v", r)
	}
	for _, a := range []string{"adm", "own"} {
		if r := send(a, 3001); r != nil {
			t.Fatalf("%s during mute-all: %v", a, r)
		}
	}
}

func TestJoinRulesAndInviteCodes(t *testing.T) {
	p := world(t)
	join := func(a, code string) (*imv1.Uplink, *Refusal) {
		u := group(a, &imv1.GroupChange{Op: &imv1.GroupChange_Join_{Join: &imv1.GroupChange_Join{InviteCode: code}}})
		return u, p.Sequence(u, 1000)
	}
	edit := func(e *imv1.GroupChange_EditGroup) *imv1.Uplink {
		u := group("adm", &imv1.GroupChange{Op: &imv1.GroupChange_Edit{Edit: e}})
		if r := p.Sequence(u, 1000); r != nil {
			t.Fatal(r)
		}
		return u
	}
	rule := imv1.JoinRule_JOIN_RULE_CODE
	e := edit(&imv1.GroupChange_EditGroup{JoinRule: &rule, InviteCode: str("s3cret")})
	if got := e.GetGroup().GetEdit(); got.GetInviteCode() != "" || len(got.InviteCodeSha256) != 32 {
		t.Fatalf("the sealed edit keeps the code or lacks its hash: %v", got)
	}
	if _, r := join("x", "wrong"); r == nil || r.Code != denied {
		t.Fatalf("wrong code: %v", r)
	}
	u, r := join("x", "s3cret")
	if r != nil {
		t.Fatalf("right code: %v", r)
	}
	if j := u.GetGroup().GetJoin(); j.InviteCode != "" || !j.ByInviteCode {
		t.Fatalf("sealed join: %v", j)
	}
	edit(&imv1.GroupChange_EditGroup{InviteCode: str("")})
	if _, r := join("y", "s3cret"); r == nil || r.Code != denied {
		t.Fatalf("join after the code was removed: %v", r)
	}
	open := imv1.JoinRule_JOIN_RULE_OPEN
	edit(&imv1.GroupChange_EditGroup{JoinRule: &open})
	if _, r := join("y", ""); r != nil {
		t.Fatalf("open group: %v", r)
	}
	// The limit is 10: own adm mem mut madm x y = 7; three more fit.
	for _, u := range []string{"a", "b", "c"} {
		if _, r := join(u, ""); r != nil {
			t.Fatal(r)
		}
	}
	if _, r := join("d", ""); r == nil || r.Code != imv1.ErrorCode_ERROR_CODE_GROUP_FULL {
		t.Fatalf("join past the limit: %v", r)
	}
}

func TestDirectSessionsAreFixed(t *testing.T) {
	p := NewPartition(0)
	c := &imv1.Uplink{SessionId: "d-1", SenderUserId: "a", Command: &imv1.Uplink_SessionCreate{SessionCreate: &imv1.SessionCreate{
		Kind: imv1.SessionKind_SESSION_KIND_DIRECT, MemberUserIds: []string{"a", "b"}}}}
	if r := p.Sequence(c, 1); r != nil {
		t.Fatal(r)
	}
	for _, u := range []*imv1.Uplink{
		{SessionId: "d-1", SenderUserId: "a", Command: members(add, "c")},
		{SessionId: "d-1", SenderUserId: "a", Command: members(remove, "b")},
		{SessionId: "d-1", SenderUserId: "a", Command: members(remove, "a")},
		{SessionId: "d-1", SenderUserId: "c", Command: &imv1.Uplink_Group{Group: &imv1.GroupChange{Op: &imv1.GroupChange_Join_{Join: &imv1.GroupChange_Join{}}}}},
		{SessionId: "d-1", SenderUserId: "a", Command: &imv1.Uplink_Group{Group: &imv1.GroupChange{Op: &imv1.GroupChange_Dissolve_{Dissolve: &imv1.GroupChange_Dissolve{}}}}},
	} {
		if r := p.Sequence(u, 2); r == nil || r.Code != denied {
			t.Errorf("%v on a direct session: %v", u.Command, r)
		}
	}
	if r := p.Sequence(&imv1.Uplink{SessionId: "d-1", SenderUserId: "b", Command: &imv1.Uplink_Message{Message: &imv1.MessageContent{Type: "text"}}}, 3); r != nil {
		t.Errorf("b sends: %v", r)
	}
}

func TestDissolvedRefusesEverything(t *testing.T) {
	p := world(t)
	if r := p.Sequence(group("own", &imv1.GroupChange{Op: &imv1.GroupChange_Dissolve_{Dissolve: &imv1.GroupChange_Dissolve{}}}), 1000); r != nil {
		t.Fatal(r)
	}
	for _, a := range []string{"own", "adm", "x"} {
		if r := p.Sequence(up(a, &imv1.Uplink_Message{Message: &imv1.MessageContent{Type: "text"}}), 1001); r == nil || r.Code != imv1.ErrorCode_ERROR_CODE_GROUP_DISSOLVED {
			t.Errorf("%s sends after dissolve: %v", a, r)
		}
	}
}

// TestRollbackRestoresTheState sequences random commands in transactions,
// rolls back every other one, and compares with a partition that only
// ever saw the committed ones.
func TestRollbackRestoresTheState(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	live := world(t)
	shadow := world(t)
	for txn := 0; txn < 300; txn++ {
		abort := txn%2 == 1
		live.Begin()
		var batch []*imv1.Uplink
		for range 1 + rng.IntN(6) {
			u := randomCommand(rng)
			c := proto.Clone(u).(*imv1.Uplink)
			if live.Sequence(u, int64(1000+txn)) == nil {
				batch = append(batch, c)
			}
		}
		if abort {
			live.Rollback()
			continue
		}
		live.Commit()
		for _, u := range batch {
			if r := shadow.Sequence(u, int64(1000+txn)); r != nil {
				t.Fatalf("txn %d: the shadow refused what live accepted: %v", txn, r)
			}
		}
		if !reflect.DeepEqual(live.sessions, shadow.sessions) {
			t.Fatalf("txn %d: live and shadow differ", txn)
		}
	}
}

// TestReplayReachesTheSameState: events of accepted commands, replayed
// into an empty partition, give the live state, and Check allows each.
func TestReplayReachesTheSameState(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	live := NewPartition(10)
	replayed := NewPartition(10)
	create := up("own", &imv1.Uplink_SessionCreate{SessionCreate: &imv1.SessionCreate{Kind: imv1.SessionKind_SESSION_KIND_GROUP,
		MemberUserIds: []string{"adm", "mem"}, Settings: &imv1.GroupSettings{InviteCode: "c0de", JoinRule: imv1.JoinRule_JOIN_RULE_CODE}}})
	cmds := []*imv1.Uplink{create}
	for range 3000 {
		cmds = append(cmds, randomCommand(rng))
	}
	seq := int64(0)
	accepted := 0
	for i, u := range cmds {
		now := int64(1000 + i)
		if live.Sequence(u, now) != nil {
			continue
		}
		accepted++
		seq++
		ev := eventOf(u, seq, now)
		if r := replayed.Check(ev); r != nil {
			t.Fatalf("Check refuses accepted command %d (%v): %v", i, u.Command, r)
		}
		replayed.Replay(ev)
	}
	if accepted < 300 {
		t.Fatalf("only %d commands accepted: the generator tests little", accepted)
	}
	if !reflect.DeepEqual(live.sessions, replayed.sessions) {
		t.Fatalf("replayed state differs from live")
	}
}

func eventOf(u *imv1.Uplink, seq, now int64) *imv1.SequencedEvent {
	ev := &imv1.SequencedEvent{SessionId: u.SessionId, Seq: seq, SenderUserId: u.SenderUserId, ServerTsMs: now}
	switch c := u.Command.(type) {
	case *imv1.Uplink_Message:
		ev.Payload = &imv1.SequencedEvent_Message{Message: c.Message}
	case *imv1.Uplink_Recall:
		ev.Payload = &imv1.SequencedEvent_Recall{Recall: c.Recall}
	case *imv1.Uplink_SessionCreate:
		ev.Payload = &imv1.SequencedEvent_SessionCreate{SessionCreate: c.SessionCreate}
	case *imv1.Uplink_Membership:
		ev.Payload = &imv1.SequencedEvent_Membership{Membership: c.Membership}
	case *imv1.Uplink_Group:
		ev.Payload = &imv1.SequencedEvent_Group{Group: c.Group}
	}
	return ev
}

func randomCommand(rng *rand.Rand) *imv1.Uplink {
	users := []string{"own", "adm", "mem", "mut", "madm", "x", "y", "z"}
	pick := func() string { return users[rng.IntN(len(users))] }
	a := pick()
	roles := []imv1.GroupRole{imv1.GroupRole_GROUP_ROLE_ADMIN, imv1.GroupRole_GROUP_ROLE_MEMBER, imv1.GroupRole_GROUP_ROLE_OWNER}
	rules := []imv1.JoinRule{imv1.JoinRule_JOIN_RULE_OPEN, imv1.JoinRule_JOIN_RULE_CODE, imv1.JoinRule_JOIN_RULE_INVITE_ONLY}
	switch rng.IntN(11) {
	case 0, 1:
		return up(a, &imv1.Uplink_Message{Message: &imv1.MessageContent{Type: "text"}})
	case 2:
		return up(a, members(add, pick(), pick()))
	case 3:
		return up(a, members(remove, pick()))
	case 4:
		code := []string{"", "c0de", "nope"}[rng.IntN(3)]
		return group(a, &imv1.GroupChange{Op: &imv1.GroupChange_Join_{Join: &imv1.GroupChange_Join{InviteCode: code}}})
	case 5:
		return group(a, &imv1.GroupChange{Op: &imv1.GroupChange_SetRole_{SetRole: &imv1.GroupChange_SetRole{UserId: pick(), Role: roles[rng.IntN(3)]}}})
	case 6:
		return group(a, &imv1.GroupChange{Op: &imv1.GroupChange_TransferOwnership_{TransferOwnership: &imv1.GroupChange_TransferOwnership{UserId: pick()}}})
	case 7:
		return group(a, &imv1.GroupChange{Op: &imv1.GroupChange_Mute_{Mute: &imv1.GroupChange_Mute{UserId: pick(), UntilMs: int64(rng.IntN(4000))}}})
	case 8:
		return group(a, &imv1.GroupChange{Op: &imv1.GroupChange_MuteAll_{MuteAll: &imv1.GroupChange_MuteAll{Muted: rng.IntN(2) == 0}}})
	case 9:
		r := rules[rng.IntN(3)]
		e := &imv1.GroupChange_EditGroup{JoinRule: &r}
		if rng.IntN(2) == 0 {
			e.InviteCode = str([]string{"", "c0de"}[rng.IntN(2)])
		}
		return group(a, &imv1.GroupChange{Op: &imv1.GroupChange_Edit{Edit: e}})
	default:
		if rng.IntN(400) == 0 {
			return group(a, &imv1.GroupChange{Op: &imv1.GroupChange_Dissolve_{Dissolve: &imv1.GroupChange_Dissolve{}}})
		}
		return up(a, &imv1.Uplink_Recall{Recall: &imv1.Recall{TargetSeq: 1}})
	}
}

// TestErasureLeaves: an erased user's leave passes whatever their role
// (the owner's too, leaving the group without one) and in a direct
// session; it removes the sender alone, and only a member.
func TestErasureLeaves(t *testing.T) {
	erasure := func(sender string, op imv1.MembershipChange_Op, ids ...string) *imv1.Uplink {
		m := members(op, ids...)
		m.Membership.Erasure = &imv1.Erasure{Actor: "dpo", ErasedAtMs: 1}
		return up(sender, m)
	}
	p := world(t)
	for _, c := range []struct {
		name string
		u    *imv1.Uplink
		want imv1.ErrorCode
	}{
		{"an erasure removing someone else", erasure("mem", remove, "adm"), bad},
		{"an erasure removing two", erasure("mem", remove, "mem", "mut"), bad},
		{"an erasure adding", erasure("mem", add, "mem"), bad},
		{"an erasure of a non-member", erasure("x", remove, "x"), notMem},
		{"the muted member's erasure", erasure("mut", remove, "mut"), ok},
		{"the owner's erasure", erasure("own", remove, "own"), ok},
	} {
		r := p.Sequence(c.u, 600)
		if got := ok; r != nil {
			got = r.Code
			if got != c.want {
				t.Errorf("%s: %v, want %v", c.name, r, c.want)
			}
		} else if c.want != ok {
			t.Errorf("%s: accepted, want %v", c.name, c.want)
		}
	}
	s := p.Session(gid)
	if _, in := s.Members["own"]; in || s.Owner != "" {
		t.Errorf("after the owner's erasure: owner %q, members %v", s.Owner, s.Members)
	}
	if _, in := s.Members["mut"]; in {
		t.Error("the erased member is still a member")
	}
	// Without an owner, owner-only operations are refused to everyone.
	if r := p.Sequence(group("adm", &imv1.GroupChange{Op: &imv1.GroupChange_Dissolve_{Dissolve: &imv1.GroupChange_Dissolve{}}}), 700); r == nil || r.Code != denied {
		t.Errorf("an admin dissolving the ownerless group: %v", r)
	}

	d := NewPartition(0)
	if r := d.Sequence(&imv1.Uplink{SessionId: "d-1", SenderUserId: "a", Command: &imv1.Uplink_SessionCreate{SessionCreate: &imv1.SessionCreate{
		Kind: imv1.SessionKind_SESSION_KIND_DIRECT, MemberUserIds: []string{"a", "b"}}}}, 1); r != nil {
		t.Fatal(r)
	}
	u := erasure("a", remove, "a")
	u.SessionId = "d-1"
	if r := d.Sequence(u, 2); r != nil {
		t.Errorf("an erasure in a direct session: %v", r)
	}
	if _, in := d.Session("d-1").Members["a"]; in {
		t.Error("the erased user is still in the direct session")
	}
}

// TestUngovernedSessions: a session with no create gets no members and no
// settings from anyone, and no command of a client; a tool's message, an
// erased user's leave and an operator's reclaim pass. The last step
// creates the session: the create is accepted, so a squatter's earlier
// join cannot have taken it.
func TestUngovernedSessions(t *testing.T) {
	const sid = "d-taken"
	p := NewPartition(0)
	notFound := imv1.ErrorCode_ERROR_CODE_SESSION_NOT_FOUND
	join := &imv1.Uplink_Group{Group: &imv1.GroupChange{Op: &imv1.GroupChange_Join_{Join: &imv1.GroupChange_Join{}}}}
	text := &imv1.Uplink_Message{Message: &imv1.MessageContent{Type: "text"}}
	erased := members(remove, "x")
	erased.Membership.Erasure = &imv1.Erasure{Actor: "dpo"}
	reclaim := members(remove, "x", "y")
	reclaim.Membership.Reclaim = &imv1.Reclaim{Actor: "ops", Reason: "ticket 7"}
	badReclaim := members(add, "x")
	badReclaim.Membership.Reclaim = &imv1.Reclaim{Actor: "ops"}
	for _, c := range []struct {
		name     string
		sender   string
		cmd      any
		governed bool
		want     imv1.ErrorCode
	}{
		{"a client's join", "x", join, true, notFound},
		{"a tool's join", "x", join, false, notFound},
		{"a client's add", "x", members(add, "x", "y"), true, notFound},
		{"a tool's add", "x", members(add, "y"), false, notFound},
		{"a tool's removal", "x", members(remove, "y"), false, notFound},
		{"a tool's group edit", "x", &imv1.Uplink_Group{Group: &imv1.GroupChange{Op: &imv1.GroupChange_Edit{Edit: &imv1.GroupChange_EditGroup{Title: str("mine")}}}}, false, notFound},
		{"a client's message", "x", text, true, notFound},
		{"a client's erasure leave", "x", erased, true, notFound},
		{"a tool's message", "x", text, false, ok},
		{"an erased user's leave", "x", erased, false, ok},
		{"a reclaim adding", "ops", badReclaim, false, bad},
		{"a reclaim", "ops", reclaim, false, ok},
	} {
		u := up(c.sender, c.cmd)
		if g, isGroup := c.cmd.(*imv1.Uplink_Group); isGroup {
			u.Command = g
		}
		u.SessionId, u.Governed = sid, c.governed
		r := p.Sequence(u, 10)
		switch {
		case r == nil && c.want != ok:
			t.Errorf("%s: accepted, want %v", c.name, c.want)
		case r != nil && r.Code != c.want:
			t.Errorf("%s: %v, want %v", c.name, r, c.want)
		}
		if p.Session(sid) != nil {
			t.Fatalf("%s made %s governed", c.name, sid)
		}
	}
	create := &imv1.Uplink{SessionId: sid, SenderUserId: "a", Governed: true, Command: &imv1.Uplink_SessionCreate{SessionCreate: &imv1.SessionCreate{
		Kind: imv1.SessionKind_SESSION_KIND_DIRECT, MemberUserIds: []string{"a", "b"}}}}
	if r := p.Sequence(create, 11); r != nil {
		t.Fatalf("the pair's create after the refused join: %v", r)
	}
	if got := p.Session(sid).Members; len(got) != 2 {
		t.Errorf("members after the create: %v", got)
	}
	reclaim2 := &imv1.Uplink{SessionId: sid, SenderUserId: "ops", Command: reclaim}
	if r := p.Sequence(reclaim2, 12); r == nil || r.Code != denied {
		t.Errorf("a reclaim of a created session: %v", r)
	}
}
