package main

import (
	"slices"
	"testing"
	"time"

	"github.com/seqflow/seqflow/internal/store"
	"github.com/seqflow/seqflow/internal/wire"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// unreadStep is one thing a connection's counts see: an event pushed to
// it (ev) or a read of the user's (read > 0), with what it must return.
type unreadStep struct {
	session string
	ev      *imv1.SequencedEvent
	read    int64
	// For an event: whether its frame carries the counts, and which. For
	// a read: whether the counts changed, and the store must recount.
	attach, recount     bool
	wantUnread, wantTot int64
}

func uMsg(s string, seq int64, from string) *imv1.SequencedEvent {
	return &imv1.SequencedEvent{SessionId: s, Seq: seq, SenderUserId: from,
		Payload: &imv1.SequencedEvent_Message{Message: &imv1.MessageContent{Type: "text", Body: []byte("x")}}}
}

func uEdit(s string, seq int64, from string, target int64) *imv1.SequencedEvent {
	e := uMsg(s, seq, from)
	e.Payload = &imv1.SequencedEvent_Edit{Edit: &imv1.Edit{TargetSeq: target, Content: &imv1.MessageContent{Type: "text", Body: []byte("y")}}}
	return e
}

func uRecall(s string, seq int64, from string, target int64) *imv1.SequencedEvent {
	e := uMsg(s, seq, from)
	e.Payload = &imv1.SequencedEvent_Recall{Recall: &imv1.Recall{TargetSeq: target}}
	return e
}

func uMember(s string, seq int64, from string, op imv1.MembershipChange_Op, users ...string) *imv1.SequencedEvent {
	e := uMsg(s, seq, from)
	e.Payload = &imv1.SequencedEvent_Membership{Membership: &imv1.MembershipChange{Op: op, UserIds: users}}
	return e
}

// uErasureLeave is the leave an erasure writes for user (internal/erasure).
func uErasureLeave(s string, seq int64, user string) *imv1.SequencedEvent {
	e := uMember(s, seq, user, imv1.MembershipChange_OP_REMOVE, user)
	e.GetMembership().Erasure = &imv1.Erasure{Actor: "dpo", ErasedAtMs: 1}
	return e
}

func uCreate(s string, seq int64, from string, members ...string) *imv1.SequencedEvent {
	e := uMsg(s, seq, from)
	e.Payload = &imv1.SequencedEvent_SessionCreate{SessionCreate: &imv1.SessionCreate{Kind: imv1.SessionKind_SESSION_KIND_GROUP, MemberUserIds: members}}
	return e
}

func uGroup(s string, seq int64, from string, g *imv1.GroupChange) *imv1.SequencedEvent {
	e := uMsg(s, seq, from)
	e.Payload = &imv1.SequencedEvent_Group{Group: g}
	return e
}

// TestUnreadCounts drives one connection's counts (alice's) from a seed
// through pushed events and reads, and checks what each returns and the
// counts of every session and the total at the end: messages of others
// above the read cursor count, her own do not, edits, membership and
// governance events never do, a recalled unread message stops counting.
func TestUnreadCounts(t *testing.T) {
	const me = "alice"
	// s1: read up to 4 of 5, one unread; s2: three unread up to 10.
	seed := []store.SessionState{
		{SessionID: "s1", MaxSeq: 5, ReadSeq: 4, JoinedSeq: 1, Unread: 1},
		{SessionID: "s2", MaxSeq: 10, ReadSeq: 7, JoinedSeq: 1, Unread: 3},
	}
	opAdd, opRemove := imv1.MembershipChange_OP_ADD, imv1.MembershipChange_OP_REMOVE
	for _, c := range []struct {
		name     string
		steps    []unreadStep
		want     map[string]int64 // every session's count at the end
		wantTot  int64
		sessions []string // the sessions counted at the end (nil: s1, s2)
	}{
		{
			name:  "seed only",
			want:  map[string]int64{"s1": 1, "s2": 3},
			steps: nil, wantTot: 4,
		},
		{
			name: "messages of others above the cursor count",
			steps: []unreadStep{
				{session: "s1", ev: uMsg("s1", 6, "bob"), attach: true, wantUnread: 2, wantTot: 5},
				{session: "s1", ev: uMsg("s1", 7, "carol"), attach: true, wantUnread: 3, wantTot: 6},
				{session: "s2", ev: uMsg("s2", 11, "bob"), attach: true, wantUnread: 4, wantTot: 7},
			},
			want: map[string]int64{"s1": 3, "s2": 4}, wantTot: 7,
		},
		{
			name: "own messages do not count",
			steps: []unreadStep{
				{session: "s1", ev: uMsg("s1", 6, me), attach: true, wantUnread: 1, wantTot: 4},
				{session: "s1", ev: uMsg("s1", 7, "bob"), attach: true, wantUnread: 2, wantTot: 5},
				{session: "s1", ev: uMsg("s1", 8, me), attach: true, wantUnread: 2, wantTot: 5},
			},
			want: map[string]int64{"s1": 2, "s2": 3}, wantTot: 5,
		},
		{
			name: "edits, membership and governance do not count",
			steps: []unreadStep{
				{session: "s1", ev: uEdit("s1", 6, "bob", 5)},
				{session: "s1", ev: uMember("s1", 7, "bob", opAdd, "dave")},
				{session: "s1", ev: uMember("s1", 8, "bob", opRemove, "dave")},
				{session: "s1", ev: uGroup("s1", 9, "bob", &imv1.GroupChange{Op: &imv1.GroupChange_Mute_{Mute: &imv1.GroupChange_Mute{UserId: "carol", UntilMs: 1}}})},
				{session: "s1", ev: uGroup("s1", 10, "erin", &imv1.GroupChange{Op: &imv1.GroupChange_Join_{Join: &imv1.GroupChange_Join{ByInviteCode: true}}})},
				{session: "s2", ev: uEdit("s2", 11, "bob", 9)},
			},
			want: map[string]int64{"s1": 1, "s2": 3}, wantTot: 4,
		},
		{
			name: "a recall of a read or own message does not count",
			steps: []unreadStep{
				{session: "s1", ev: uRecall("s1", 6, "bob", 3), attach: true, wantUnread: 1, wantTot: 4},
				{session: "s1", ev: uMsg("s1", 7, me), attach: true, wantUnread: 1, wantTot: 4},
				{session: "s1", ev: uRecall("s1", 8, me, 7), attach: true, wantUnread: 1, wantTot: 4},
			},
			want: map[string]int64{"s1": 1, "s2": 3}, wantTot: 4,
		},
		{
			name: "a recalled unread message stops counting",
			steps: []unreadStep{
				{session: "s1", ev: uMsg("s1", 6, "bob"), attach: true, wantUnread: 2, wantTot: 5},
				{session: "s1", ev: uMsg("s1", 7, "bob"), attach: true, wantUnread: 3, wantTot: 6},
				// A message pushed since the seed,
				{session: "s1", ev: uRecall("s1", 8, "bob", 6), attach: true, wantUnread: 2, wantTot: 5},
				// and one the seed counted.
				{session: "s2", ev: uRecall("s2", 11, "carol", 9), attach: true, wantUnread: 2, wantTot: 4},
			},
			want: map[string]int64{"s1": 2, "s2": 2}, wantTot: 4,
		},
		{
			name: "reads move the counts; below the seed the store recounts",
			steps: []unreadStep{
				{session: "s1", ev: uMsg("s1", 6, "bob"), attach: true, wantUnread: 2, wantTot: 5},
				{session: "s1", ev: uMsg("s1", 7, "bob"), attach: true, wantUnread: 3, wantTot: 6},
				{session: "s1", read: 6, attach: true, wantUnread: 1, wantTot: 4},
				{session: "s1", read: 6}, // not past the cursor: nothing
				{session: "s1", ev: uMsg("s1", 8, "bob"), attach: true, wantUnread: 2, wantTot: 5},
				// Part of the seed's (7, 10] may stay unread: the counts
				// stay as they are until the store answers (TestUnreadRecounted).
				{session: "s2", read: 8, attach: true, recount: true, wantUnread: 3, wantTot: 5},
			},
			want: map[string]int64{"s1": 2, "s2": 3}, wantTot: 5,
		},
		{
			name: "a session joined after the seed counts only after the join",
			steps: []unreadStep{
				{session: "s3", ev: uCreate("s3", 1, "bob", me, "carol")},
				{session: "s3", ev: uMsg("s3", 2, "bob"), attach: true, wantUnread: 1, wantTot: 5},
				{session: "s3", ev: uMsg("s3", 3, me), attach: true, wantUnread: 1, wantTot: 5},
				{session: "s3", ev: uEdit("s3", 4, "bob", 2)},
			},
			want: map[string]int64{"s1": 1, "s2": 3, "s3": 1}, wantTot: 5, sessions: []string{"s1", "s2", "s3"},
		},
		{
			// The leave's frame carries the session's 0 and the total
			// without it, so an app's total drops with it.
			name: "leaving a session takes its count out of the total",
			steps: []unreadStep{
				{session: "s2", ev: uMsg("s2", 11, "bob"), attach: true, wantUnread: 4, wantTot: 5},
				{session: "s2", ev: uMember("s2", 12, "bob", opRemove, "carol", me), attach: true, wantUnread: 0, wantTot: 1},
				{session: "s1", ev: uMsg("s1", 6, "bob"), attach: true, wantUnread: 2, wantTot: 2},
			},
			want: map[string]int64{"s1": 2}, wantTot: 2, sessions: []string{"s1"},
		},
		{
			name: "the erasure leave takes the count out of the total",
			steps: []unreadStep{
				{session: "s1", ev: uErasureLeave("s1", 6, me), attach: true, wantUnread: 0, wantTot: 3},
				// Another member's leave moves nothing.
				{session: "s2", ev: uErasureLeave("s2", 11, "bob")},
			},
			want: map[string]int64{"s2": 3}, wantTot: 3, sessions: []string{"s2"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			u := newUnreadCounts(me)
			u.begin(nil)
			u.seed(seed)
			for i, st := range c.steps {
				if st.ev != nil {
					attach, unread, total := u.event(st.session, noteOf(st.ev))
					if attach != st.attach || unread != st.wantUnread || total != st.wantTot {
						t.Fatalf("step %d (%s seq %d): event = (%v, %d, %d), want (%v, %d, %d)",
							i, st.session, st.ev.Seq, attach, unread, total, st.attach, st.wantUnread, st.wantTot)
					}
					continue
				}
				changed, recount, unread, total := u.read(st.session, st.read)
				if changed != st.attach || recount != st.recount || unread != st.wantUnread || total != st.wantTot {
					t.Fatalf("step %d (read %s to %d): read = (%v, %v, %d, %d), want (%v, %v, %d, %d)",
						i, st.session, st.read, changed, recount, unread, total, st.attach, st.recount, st.wantUnread, st.wantTot)
				}
			}
			sessions := c.sessions
			if sessions == nil {
				sessions = []string{"s1", "s2"}
			}
			if len(u.sessions) != len(sessions) {
				t.Fatalf("%d sessions counted, want %v", len(u.sessions), sessions)
			}
			var sum int64
			for _, s := range sessions {
				us := u.sessions[s]
				if us == nil {
					t.Fatalf("session %s not counted", s)
				}
				if us.unread() != c.want[s] {
					t.Errorf("unread of %s = %d, want %d", s, us.unread(), c.want[s])
				}
				sum += us.unread()
			}
			if u.total != c.wantTot || u.total != sum {
				t.Errorf("total = %d, want %d (sessions sum to %d)", u.total, c.wantTot, sum)
			}
		})
	}
}

// TestUnreadEventsWhileSeeding: events written while a changes is being
// answered are replayed after the seed, those the store already counted
// (at or below its max seq) left alone.
func TestUnreadEventsWhileSeeding(t *testing.T) {
	u := newUnreadCounts("alice")
	u.begin(nil)
	for _, ev := range []*imv1.SequencedEvent{uMsg("s1", 5, "bob"), uMsg("s1", 6, "bob"), uMsg("s1", 7, "alice")} {
		if attach, _, _ := u.event("s1", noteOf(ev)); attach {
			t.Fatalf("seq %d: counts attached while seeding", ev.Seq)
		}
	}
	u.seed([]store.SessionState{{SessionID: "s1", MaxSeq: 5, ReadSeq: 3, JoinedSeq: 1, Unread: 2}})
	if got := u.sessions["s1"].unread(); got != 3 || u.total != 3 {
		t.Fatalf("after the seed: unread %d, total %d, want 3, 3 (2 counted by the store, seq 6 by the gateway)", got, u.total)
	}
}

// TestUnreadSeedReplaysRecent: what a connection wrote and learned
// shortly before a changes, and the store does not hold yet (the
// persister lags the pushes), counts in the seed as if it came during it;
// what the store held, a session the store no longer lists, and what is
// older than recentFor do not.
func TestUnreadSeedReplaysRecent(t *testing.T) {
	now := time.Now()
	var r recentNotes
	add := func(at time.Time, session string, ev *imv1.SequencedEvent, read int64) {
		p := pendingNote{session: session, read: read}
		if ev != nil {
			p.note = noteOf(ev)
		}
		r.add(at, p)
	}
	add(now.Add(-recentFor-time.Second), "s3", uMsg("s3", 2, "carol"), 0) // too old to replay
	add(now, "s1", uMsg("s1", 5, "alice"), 0)                             // the store holds it
	add(now, "s1", uMsg("s1", 6, "alice"), 0)                             // it does not
	add(now, "s2", uMsg("s2", 9, "alice"), 0)                             // bob left s2 since
	add(now, "s1", nil, 6)                                                // bob read up to 6 on another device
	add(now, "s1", uMsg("s1", 7, "alice"), 0)
	add(now, "s1", uMsg("s1", 8, "alice"), 0)
	if got := len(r.since(now)); got != 6 {
		t.Fatalf("%d recent notes, want 6 (the old one pruned)", got)
	}
	u := newUnreadCounts("bob")
	u.begin(r.since(now))
	u.event("s1", noteOf(uMsg("s1", 9, "alice"))) // while seeding
	reads := u.seed([]store.SessionState{
		{SessionID: "s1", MaxSeq: 5, ReadSeq: 3, JoinedSeq: 1, Unread: 2},
		{SessionID: "s3", MaxSeq: 1, ReadSeq: 1, JoinedSeq: 1},
	})
	if got := u.sessions["s1"].unread(); got != 3 {
		t.Errorf("s1 unread %d, want 3 (7, 8 and 9: above the read of 6)", got)
	}
	if u.sessions["s2"] != nil {
		t.Errorf("s2, which the store no longer lists, came back: %+v", u.sessions["s2"])
	}
	if got := u.sessions["s3"].unread(); got != 0 {
		t.Errorf("s3 unread %d, want 0 (its message is older than recentFor)", got)
	}
	if u.total != 3 {
		t.Errorf("total %d, want 3", u.total)
	}
	if len(reads) != 1 || reads[0] != (seededRead{"s1", 6, false}) {
		t.Errorf("reads to tell the client: %+v, want s1 at 6", reads)
	}
	for range 2 * recentMax {
		add(now, "s1", uMsg("s1", 10, "alice"), 0)
	}
	if got := len(r.since(now)); got > recentMax || got < recentMax*3/4 {
		t.Errorf("%d recent notes kept, want %d to %d (at most recentMax, dropped a quarter at a time)", got, recentMax*3/4, recentMax)
	}
	if r.since(now.Add(2 * recentFor)); r.notes != nil {
		t.Errorf("an idle connection keeps %d notes", len(r.notes))
	}
}

// TestUnreadRecounted: the store's recount after a read below the seed
// replaces the seed's part, leaves out a recalled message the store does
// not know is recalled yet, and is dropped when the cursor moved since.
func TestUnreadRecounted(t *testing.T) {
	u := newUnreadCounts("alice")
	u.begin(nil)
	u.seed([]store.SessionState{{SessionID: "s1", MaxSeq: 10, ReadSeq: 2, JoinedSeq: 1, Unread: 5}})
	// bob recalls seq 8 (counted by the seed): 4 left.
	if _, unread, total := u.event("s1", noteOf(uRecall("s1", 11, "bob", 8))); unread != 4 || total != 4 {
		t.Fatalf("after the recall: %d, %d, want 4, 4", unread, total)
	}
	if _, recount, _, _ := u.read("s1", 6); !recount {
		t.Fatal("a read below the seed's max did not ask for a recount")
	}
	if ok, _, _ := u.recounted("s1", 5, 1, 10); ok {
		t.Fatal("a recount for an older cursor was taken")
	}
	// The store held seqs up to 10 but not the recall (11): it counted
	// 7..10 of others, 8 among them.
	ok, unread, total := u.recounted("s1", 6, 3, 10)
	if !ok || unread != 2 || total != 2 {
		t.Fatalf("recounted = (%v, %d, %d), want (true, 2, 2)", ok, unread, total)
	}
}

// TestUnreadReadsWhileSeeding: a read learned while a changes is being
// answered is kept and applied after the seed, in order with the events
// written meanwhile, unless the store's answer already held it; seed
// reports where each moved cursor stands (or that the store must
// recount), for the unread frame that follows the changes result.
func TestUnreadReadsWhileSeeding(t *testing.T) {
	// The store: s1 read up to 3 of 5 (2 unread), s2 read up to 8 of 10.
	seed := []store.SessionState{
		{SessionID: "s1", MaxSeq: 5, ReadSeq: 3, JoinedSeq: 1, Unread: 2},
		{SessionID: "s2", MaxSeq: 10, ReadSeq: 8, JoinedSeq: 1, Unread: 2},
	}
	type step struct {
		ev   *imv1.SequencedEvent
		read int64 // of s1
	}
	for _, c := range []struct {
		name    string
		during  []step
		want    int64 // s1's count after the seed
		wantTot int64
		reads   []seededRead
	}{
		{name: "a read past what the store held", during: []step{{ev: uMsg("s1", 6, "bob")}, {read: 6}},
			want: 0, wantTot: 2, reads: []seededRead{{"s1", 6, false}}},
		{name: "a read, then a message", during: []step{{read: 5}, {ev: uMsg("s1", 6, "bob")}},
			want: 1, wantTot: 3, reads: []seededRead{{"s1", 5, false}}},
		{name: "two reads: the last stands", during: []step{{read: 4}, {ev: uMsg("s1", 6, "bob")}, {read: 6}},
			want: 0, wantTot: 2, reads: []seededRead{{"s1", 6, false}}},
		{name: "a read below the store's max asks a recount", during: []step{{read: 4}},
			// The seed's count stays until the store answers.
			want: 2, wantTot: 4, reads: []seededRead{{"s1", 4, true}}},
		{name: "a read the store already held", during: []step{{read: 3}},
			want: 2, wantTot: 4},
		{name: "a read, then the user leaves", during: []step{{read: 5}, {ev: uMember("s1", 6, "bob", imv1.MembershipChange_OP_REMOVE, "alice")}},
			want: -1, wantTot: 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			u := newUnreadCounts("alice")
			u.begin(nil)
			for _, st := range c.during {
				if st.ev != nil {
					u.event("s1", noteOf(st.ev))
					continue
				}
				if changed, _, _, _ := u.read("s1", st.read); changed {
					t.Fatalf("read %d: counts changed while seeding", st.read)
				}
			}
			reads := u.seed(seed)
			got := int64(-1)
			if s := u.sessions["s1"]; s != nil {
				got = s.unread()
			}
			if got != c.want || u.total != c.wantTot {
				t.Errorf("after the seed: s1 %d, total %d; want %d, %d", got, u.total, c.want, c.wantTot)
			}
			if !slices.Equal(reads, c.reads) {
				t.Errorf("seed's reads = %+v, want %+v", reads, c.reads)
			}
		})
	}
}

// TestUnreadAnswer: the changes result carries the connection's counts
// after the seed, not the store's: a message the store did not hold yet
// counts, a session left meanwhile has 0, a session joined meanwhile with
// an unread message is listed, and total_unread is the sum.
func TestUnreadAnswer(t *testing.T) {
	states := []store.SessionState{
		{SessionID: "s1", MaxSeq: 5, ReadSeq: 3, JoinedSeq: 1, Unread: 2},
		{SessionID: "s2", MaxSeq: 10, ReadSeq: 7, JoinedSeq: 1, Unread: 3},
		{SessionID: "s3", MaxSeq: 4, ReadSeq: 4, JoinedSeq: 1, Unread: 0},
	}
	res := wire.ChangesResult{Op: wire.OpResult, ReqID: "c1", TotalUnread: 5}
	for _, st := range states {
		res.Sessions = append(res.Sessions, wire.SessionChange{SessionID: st.SessionID, MaxSeq: st.MaxSeq, ReadSeq: st.ReadSeq, Unread: st.Unread})
	}
	u := newUnreadCounts("alice")
	u.begin(nil)
	for _, w := range []struct {
		session string
		ev      *imv1.SequencedEvent
	}{
		{"s1", uMsg("s1", 6, "bob")},
		{"s2", uMember("s2", 11, "bob", imv1.MembershipChange_OP_REMOVE, "alice")},
		{"s9", uCreate("s9", 1, "bob", "alice")},
		{"s9", uMsg("s9", 2, "bob")},
		{"s8", uCreate("s8", 1, "bob", "alice")}, // nothing unread: not listed
	} {
		u.event(w.session, noteOf(w.ev))
	}
	u.seed(states)
	u.answer(&res, map[string]int64{"s1": 6, "s2": 11, "s8": 1, "s9": 2})
	want := []wire.SessionChange{
		{SessionID: "s1", MaxSeq: 5, ReadSeq: 3, Unread: 3},
		{SessionID: "s2", MaxSeq: 10, ReadSeq: 7, Unread: 0},
		{SessionID: "s3", MaxSeq: 4, ReadSeq: 4, Unread: 0},
		{SessionID: "s9", MaxSeq: 2, Unread: 1},
	}
	if !slices.Equal(res.Sessions, want) || res.TotalUnread != 4 || u.total != 4 {
		t.Fatalf("answer: %+v total %d (counts' total %d), want %+v total 4", res.Sessions, res.TotalUnread, u.total, want)
	}
}
