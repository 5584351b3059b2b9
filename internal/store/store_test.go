package store

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/seqflow/seqflow/schemas/imv1"
)

const (
	opAdd    = imv1.MembershipChange_OP_ADD
	opRemove = imv1.MembershipChange_OP_REMOVE
)

func TestWriteProjectsSessionState(t *testing.T) {
	pool, schema := freshSchema(t)
	ctx := context.Background()
	w := NewWriter(pool, schema)
	st, err := Open(ctx, pool, schema)
	requireNoErr(t, err)
	s := "s1"
	// Batch 1: create, messages, an edit and a recall of the same batch's
	// messages, one by the wrong sender (kept as a row, no effect).
	b1 := &Batch{Rows: rowsOf(t,
		createEv(s, 1, "alice", "team", "bob", "carol"),
		msgEv(s, 2, "alice", "hello"),
		msgEv(s, 3, "bob", "hi"),
		editEv(s, 4, "alice", 2, "hello!"),
		editEv(s, 5, "bob", 2, "hijacked"),
		recallEv(s, 6, "carol", 3),
		msgEv(s, 7, "bob", "second"),
	), Reads: []ReadCursor{{s, "bob", 3}, {s, "bob", 2}}, Offsets: []Offset{{"topic", 0, 7}}}
	res, err := w.Write(ctx, b1)
	requireNoErr(t, err)
	require(t, res.Inserted, 7, "inserted")
	before, err := st.Changes(ctx, "bob")
	requireNoErr(t, err)
	require(t, len(before), 1, "sessions of bob")
	require(t, before[0].ReadSeq, int64(3), "read seq moves forward only")
	// Batch 2: recall by the sender; membership remove and re-add in one
	// batch; a remove of carol.
	b2 := &Batch{Rows: rowsOf(t,
		recallEv(s, 8, "bob", 7),
		memberEv(s, 9, "alice", opRemove, "bob", "carol"),
		memberEv(s, 10, "alice", opAdd, "bob", "dave"),
		editEv(s, 11, "alice", 2, "hello again"),
	), Offsets: []Offset{{"topic", 0, 11}, {"topic", 0, 9}}}
	res, err = w.Write(ctx, b2)
	requireNoErr(t, err)
	require(t, res.Inserted, 4, "inserted")

	msgs, err := st.MessagesAfter(ctx, s, 0, 100)
	requireNoErr(t, err)
	require(t, len(msgs), 11, "messages")
	require(t, string(msgs[1].Body), "hello again", "edited body")
	require(t, msgs[1].EditedSeq, int64(11), "edited seq")
	require(t, msgs[2].RecalledSeq, int64(0), "recall by another sender has no effect")
	require(t, string(msgs[2].Body), "hi", "body of a message recalled by someone else")
	require(t, msgs[6].RecalledSeq, int64(8), "recalled seq")
	require(t, msgs[6].Body == nil, true, "recalled body withheld")
	require(t, msgs[0].Kind, KindSessionCreate, "kind")
	require(t, slices.Equal(msgs[0].MemberIDs, []string{"bob", "carol", "alice"}), true, "create members with sender")

	members, err := st.Members(ctx, s)
	requireNoErr(t, err)
	require(t, slices.Equal(members, []string{"alice", "bob", "dave"}), true, "members "+join(members))
	lists, err := st.MembersOf(ctx, []string{s, "no-such-session"})
	requireNoErr(t, err)
	require(t, len(lists), 1, "sessions with members")
	require(t, slices.Equal(lists[s], members), true, "MembersOf "+join(lists[s]))
	for _, c := range []struct {
		user     string
		want     bool
		standing Standing
	}{{"alice", true, CurrentMember}, {"bob", true, CurrentMember}, {"carol", false, FormerMember}, {"dave", true, CurrentMember}, {"eve", false, NotMember}} {
		t.Run("IsMember/"+c.user, func(t *testing.T) {
			ok, err := st.IsMember(ctx, s, c.user)
			requireNoErr(t, err)
			require(t, ok, c.want, "member")
			standing, err := st.Standing(ctx, s, c.user)
			requireNoErr(t, err)
			require(t, standing, c.standing, "standing")
		})
	}
	changes, err := st.Changes(ctx, "bob")
	requireNoErr(t, err)
	require(t, len(changes), 1, "sessions of bob")
	c := changes[0]
	require(t, c.MaxSeq, int64(11), "max seq")
	require(t, c.ReadSeq, int64(0), "a re-added member's read seq (the cursor of before the removal is gone)")
	require(t, c.JoinedSeq, int64(10), "re-added member's joined seq")
	require(t, c.Kind, "group", "kind")
	require(t, c.Title, "team", "title")
	require(t, c.LastPreview, "[recalled]", "preview of a recalled last message")
	require(t, c.LastPreviewSeq, int64(7), "preview seq")

	offs, err := w.StoredOffsets(ctx, "topic")
	requireNoErr(t, err)
	require(t, offs[0], int64(11), "stored offset")

	// Writing both batches again changes nothing.
	for i, b := range []*Batch{b1, b2} {
		res, err := w.Write(ctx, b)
		requireNoErr(t, err)
		require(t, res.Inserted, 0, "inserted on rewrite")
		require(t, res.Duplicates, len(b.Rows), "duplicates on rewrite")
		require(t, len(res.Conflicts), 0, "conflicts on rewrite")
		_ = i
	}
	again, err := st.MessagesAfter(ctx, s, 0, 100)
	requireNoErr(t, err)
	require(t, len(again), len(msgs), "rows after rewrite")
	for i := range again {
		require(t, string(again[i].Body), string(msgs[i].Body), "body after rewrite")
		require(t, again[i].RecalledSeq, msgs[i].RecalledSeq, "recall after rewrite")
	}
	members, err = st.Members(ctx, s)
	requireNoErr(t, err)
	require(t, join(members), "alice,bob,dave", "members after rewrite")
}

func join(ss []string) string {
	out := ""
	for i, s := range ss {
		if i > 0 {
			out += ","
		}
		out += s
	}
	return out
}

func TestWriteRefusesConflicts(t *testing.T) {
	pool, schema := freshSchema(t)
	ctx := context.Background()
	w := NewWriter(pool, schema)
	_, err := w.Write(ctx, &Batch{Rows: rowsOf(t, msgEv("a", 1, "u", "one"), msgEv("a", 2, "u", "two"))})
	requireNoErr(t, err)
	otherID := func(e *imv1.SequencedEvent, id int64) *imv1.SequencedEvent { e.MsgId = id; return e }
	for _, c := range []struct {
		name      string
		rows      []*imv1.SequencedEvent
		inserted  int
		dups      int
		conflicts []int
	}{
		{"stored seq, other msg_id", []*imv1.SequencedEvent{otherID(msgEv("a", 1, "u", "x"), 777)}, 0, 0, []int{0}},
		{"stored msg_id, other seq", []*imv1.SequencedEvent{otherID(msgEv("a", 9, "u", "x"), msgID("a", 2))}, 0, 0, []int{0}},
		{"exact repeat", []*imv1.SequencedEvent{msgEv("a", 2, "u", "two"), msgEv("a", 3, "u", "three")}, 1, 1, nil},
		{"repeat within batch", []*imv1.SequencedEvent{msgEv("a", 4, "u", "x"), msgEv("a", 4, "u", "x")}, 1, 1, nil},
		{"clash within batch", []*imv1.SequencedEvent{msgEv("a", 5, "u", "x"), otherID(msgEv("a", 5, "u", "y"), 778)}, 1, 0, []int{1}},
		{"msg_id twice in batch", []*imv1.SequencedEvent{otherID(msgEv("a", 6, "u", "x"), 779), otherID(msgEv("b", 1, "u", "y"), 779)}, 1, 0, []int{1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			res, err := w.Write(ctx, &Batch{Rows: rowsOf(t, c.rows...)})
			requireNoErr(t, err)
			require(t, res.Inserted, c.inserted, "inserted")
			require(t, res.Duplicates, c.dups, "duplicates")
			var got []int
			for _, k := range res.Conflicts {
				got = append(got, k.Index)
				t.Log(k.Reason)
			}
			require(t, slices.Equal(got, c.conflicts), true, "conflict indexes")
		})
	}
	// The store still holds exactly the first versions.
	st, err := Open(ctx, pool, schema)
	requireNoErr(t, err)
	msgs, err := st.MessagesAfter(ctx, "a", 0, 100)
	requireNoErr(t, err)
	var seqs []int64
	for _, m := range msgs {
		seqs = append(seqs, m.Seq)
	}
	require(t, slices.Equal(seqs, []int64{1, 2, 3, 4, 5, 6}), true, "stored seqs")
	require(t, string(msgs[4].Body), "x", "first version wins")
	var orphan int
	requireNoErr(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+schema+".message_ids x WHERE NOT EXISTS (SELECT 1 FROM "+schema+".messages m WHERE m.session_id = x.session_id AND m.seq = x.seq AND m.msg_id = x.msg_id)").Scan(&orphan))
	require(t, orphan, 0, "message_ids rows without their message")
}

func TestSwitchMovesFollowers(t *testing.T) {
	pool, home := freshSchema(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := Open(ctx, pool, home)
	requireNoErr(t, err)
	require(t, st.Schema(), home, "schema before switch")
	seen := make(chan string, 4)
	done := make(chan error, 1)
	go func() { done <- Watch(ctx, pool, home, func(s string) { seen <- s }) }()
	require(t, <-seen, home, "first callback")
	requireNoErr(t, Switch(ctx, pool, home, "replay_x"))
	require(t, <-seen, "replay_x", "callback after switch")
	got, err := Resolve(ctx, pool, home)
	requireNoErr(t, err)
	require(t, got, "replay_x", "resolved")
	cancel()
	<-done
}

// TestWriteRacingWriters writes the same rows from two writers at once, in
// opposite batch orders (a zombie persister and its successor): both must
// succeed (no deadlock, the fast path's COPYs lock keys in sorted order),
// every row must be stored once, and each writer's result must account
// for every row.
func TestWriteRacingWriters(t *testing.T) {
	pool, schema := freshSchema(t)
	ctx := context.Background()
	w := NewWriter(pool, schema)
	const sessions, perSession = 20, 50
	for round := range 3 {
		var evs []*imv1.SequencedEvent
		for q := 1; q <= perSession; q++ {
			for s := range sessions {
				evs = append(evs, msgEv(fmt.Sprintf("race%d-%02d", round, s), int64(q), "u", "m"))
			}
		}
		rows := rowsOf(t, evs...)
		reversed := slices.Clone(rows)
		slices.Reverse(reversed)
		results := make([]Result, 2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i, b := range [][]Row{rows, reversed} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i], errs[i] = w.Write(ctx, &Batch{Rows: b})
			}()
		}
		wg.Wait()
		for i := range 2 {
			requireNoErr(t, errs[i])
			require(t, results[i].Inserted+results[i].Duplicates, len(rows), "rows accounted for by one writer")
			require(t, len(results[i].Conflicts), 0, "conflicts")
		}
		require(t, results[0].Inserted+results[1].Inserted, len(rows), "rows inserted by both writers")
		var stored, lastSeq int64
		requireNoErr(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+schema+".messages WHERE session_id LIKE $1", fmt.Sprintf("race%d-%%", round)).Scan(&stored))
		require(t, stored, int64(len(rows)), "stored rows")
		requireNoErr(t, pool.QueryRow(ctx, "SELECT min(last_seq) FROM "+schema+".sessions WHERE session_id LIKE $1", fmt.Sprintf("race%d-%%", round)).Scan(&lastSeq))
		require(t, lastSeq, int64(perSession), "sessions' last seq")
	}
}

// TestRecallScrubsBodies: a recall by the sender leaves no body in the
// table, not the message's, its current edit's, or any edit row's aimed at
// it, whether the edits came before the recall or after it, in one batch
// or several; another message keeps its body.
func TestRecallScrubsBodies(t *testing.T) {
	ctx := context.Background()
	s := "s-scrub"
	evs := []*imv1.SequencedEvent{
		createEv(s, 1, "alice", "team", "bob"),
		msgEv(s, 2, "alice", "one"),
		editEv(s, 3, "alice", 2, "one!"),
		editEv(s, 4, "bob", 2, "bob's edit"),
		msgEv(s, 5, "alice", "kept"),
		recallEv(s, 6, "alice", 2),
		editEv(s, 7, "alice", 2, "after the recall"),
	}
	for _, split := range [][]int{{7}, {2, 5, 6, 7}, {6, 7}} {
		pool, schema := freshSchema(t)
		w := NewWriter(pool, schema)
		rows := rowsOf(t, evs...)
		from := 0
		for _, to := range split {
			_, err := w.Write(ctx, &Batch{Rows: rows[from:to]})
			requireNoErr(t, err)
			from = to
		}
		var withBody []int64
		var kept string
		err := pool.QueryRow(ctx, fmt.Sprintf(`SELECT COALESCE(array_agg(seq ORDER BY seq) FILTER (WHERE seq <> 5 AND (body IS NOT NULL AND body <> '' OR edited_body IS NOT NULL)), '{}'),
			(SELECT convert_from(body, 'UTF8') FROM %[1]s.messages WHERE seq = 5 AND session_id = $1)
			FROM %[1]s.messages WHERE session_id = $1 AND kind IN ('message', 'edit')`, schema), s).Scan(&withBody, &kept)
		requireNoErr(t, err)
		if len(withBody) != 0 || kept != "kept" {
			t.Errorf("batches ending at %v: rows with a body left %v, the other message's body %q", split, withBody, kept)
		}
	}
}
