package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// unreadModel is the reference for unread counts: per session, its chat
// messages and members; per (session, user), the read cursor.
type unreadModel struct {
	msgs    map[string][]modelMsg         // session → messages in seq order
	members map[string]map[string]int64   // session → user → joined seq
	reads   map[string]map[string]int64   // session → user → read seq
	next    map[string]int64              // session → next seq
	recalls map[string]map[int64]struct{} // session → recalled seqs
}

type modelMsg struct {
	seq    int64
	sender string
}

func (m *unreadModel) unread(session, user string) int64 {
	joined, ok := m.members[session][user]
	if !ok {
		return -1
	}
	from := max(joined, m.reads[session][user])
	var n int64
	for _, msg := range m.msgs[session] {
		if _, recalled := m.recalls[session][msg.seq]; msg.seq > from && msg.sender != user && !recalled {
			n++
		}
	}
	return n
}

// TestUnreadCountsMatchAModel drives random sends, edits, recalls (by the
// sender and, refused, by others), reads (forward and, ignored, backward)
// and member adds over three sessions and five users, written in random
// batches as the persister writes them, and after every batch compares
// every user's unread counts from Changes with the model's.
func TestUnreadCountsMatchAModel(t *testing.T) {
	pool, schema := freshSchema(t)
	ctx := context.Background()
	w := NewWriter(pool, schema)
	st, err := Open(ctx, pool, schema)
	requireNoErr(t, err)
	seed := uint64(rand.Int64())
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, 7))
	users := []string{"u1", "u2", "u3", "u4", "u5"}
	sessions := []string{"sa", "sb", "sc"}
	m := &unreadModel{msgs: map[string][]modelMsg{}, members: map[string]map[string]int64{}, reads: map[string]map[string]int64{},
		next: map[string]int64{}, recalls: map[string]map[int64]struct{}{}}

	var offset int64
	for _, s := range sessions {
		// Every session starts with three of the users; the others may be
		// added later (and then count only what comes after their add).
		first := users[:3]
		if s == "sb" {
			first = users[2:]
		}
		m.members[s], m.reads[s], m.recalls[s] = map[string]int64{}, map[string]int64{}, map[int64]struct{}{}
		for _, u := range first {
			m.members[s][u] = 1
		}
		m.next[s] = 2
		offset++
		b := &Batch{Rows: rowsOf(t, createEv(s, 1, first[0], s, first[1:]...)), Offsets: []Offset{{"t", 0, offset}}}
		_, err := w.Write(ctx, b)
		requireNoErr(t, err)
	}

	for round := range 60 {
		b := &Batch{}
		for range 1 + rnd.IntN(8) {
			s := sessions[rnd.IntN(len(sessions))]
			var member []string
			for u := range m.members[s] {
				member = append(member, u)
			}
			slices.Sort(member)
			u := member[rnd.IntN(len(member))]
			seq := m.next[s]
			switch op := rnd.IntN(10); {
			case op < 5: // send
				b.Rows = append(b.Rows, rowsOf(t, msgEv(s, seq, u, fmt.Sprintf("r%d", round)))...)
				m.msgs[s] = append(m.msgs[s], modelMsg{seq, u})
				m.next[s]++
			case op == 5 && len(m.msgs[s]) > 0: // edit: never changes a count
				target := m.msgs[s][rnd.IntN(len(m.msgs[s]))]
				b.Rows = append(b.Rows, rowsOf(t, editEv(s, seq, target.sender, target.seq, "edited"))...)
				m.next[s]++
			case op == 6 && len(m.msgs[s]) > 0: // recall, by its sender or (no effect) by someone else
				target := m.msgs[s][rnd.IntN(len(m.msgs[s]))]
				by := target.sender
				if rnd.IntN(3) == 0 {
					by = u
				}
				b.Rows = append(b.Rows, rowsOf(t, recallEv(s, seq, by, target.seq))...)
				if by == target.sender {
					m.recalls[s][target.seq] = struct{}{}
				}
				m.next[s]++
			case op == 7: // add a user who is not a member yet
				var out []string
				for _, v := range users {
					if _, ok := m.members[s][v]; !ok {
						out = append(out, v)
					}
				}
				if len(out) == 0 {
					continue
				}
				v := out[rnd.IntN(len(out))]
				b.Rows = append(b.Rows, rowsOf(t, memberEv(s, seq, u, opAdd, v))...)
				m.members[s][v] = seq
				m.next[s]++
			default: // read up to a seq already stored or in this batch; cursors never go back
				to := 1 + rnd.Int64N(m.next[s]-1)
				b.Reads = append(b.Reads, ReadCursor{s, u, to})
				m.reads[s][u] = max(m.reads[s][u], to)
			}
		}
		offset++
		b.Offsets = []Offset{{"t", 0, offset}}
		_, err := w.Write(ctx, b)
		requireNoErr(t, err)

		for _, u := range users {
			states, err := st.Changes(ctx, u)
			requireNoErr(t, err)
			got := map[string]int64{}
			for _, s := range states {
				got[s.SessionID] = s.Unread
			}
			for _, s := range sessions {
				want := m.unread(s, u)
				have, member := got[s]
				if want < 0 {
					if member {
						t.Fatalf("round %d: %s listed in %s's changes, not a member", round, s, u)
					}
					continue
				}
				if have != want {
					t.Fatalf("round %d (seed %d): unread of %s in %s = %d, want %d (read %d, joined %d)",
						round, seed, u, s, have, want, m.reads[s][u], m.members[s][u])
				}
			}
		}
	}
}
