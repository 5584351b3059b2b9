package load

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/seqflow/seqflow/client"
)

// TestUndeliveredFollowsMissing checks the count drain waits on against
// the full scan verify uses: ACKs and events in every order (an event
// before its ACK, twice, to the sender, out of order), and after each step
// r.undelivered is the number of pairs missingLocked lists. An in-process
// run with no clients: onEvent and ackLocked are what the clients' readers
// call.
func TestUndeliveredFollowsMissing(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 1))
		const users = 5
		r := &run{msgs: map[string]*sent{}, created: map[string]map[int]bool{}, wake: make(chan struct{}, 1)}
		for u := range users {
			r.users = append(r.users, fmt.Sprintf("u%d", u))
			r.lastSeq = append(r.lastSeq, map[string]int64{})
		}
		sessions := []*session{
			{id: "direct", direct: true, members: []int{0, 1}},
			{id: "group", members: []int{0, 1, 2, 3, 4}},
		}
		type step struct {
			ack bool
			id  string
			u   int
			seq int64
		}
		var steps []step
		seqs := map[string]int64{}
		for i := range 30 {
			s := sessions[rng.IntN(len(sessions))]
			id := fmt.Sprintf("m%d", i)
			seqs[s.id]++
			m := &sent{sender: s.members[rng.IntN(len(s.members))], session: s, seq: seqs[s.id]}
			r.msgs[id] = m
			steps = append(steps, step{ack: true, id: id, seq: m.seq})
			for _, u := range s.members { // the sender's own device gets it too
				for range 1 + rng.IntN(2) { // sometimes twice
					steps = append(steps, step{id: id, u: u, seq: m.seq})
				}
			}
		}
		rng.Shuffle(len(steps), func(i, j int) { steps[i], steps[j] = steps[j], steps[i] })
		for n, st := range steps {
			m := r.msgs[st.id]
			if st.ack {
				r.ackLocked(m, st.seq)
			} else {
				r.onEvent(st.u, client.Event{SessionID: m.session.id, Seq: st.seq, Kind: "message", ClientMsgID: st.id})
			}
			want := 0
			for _, ids := range r.missingLocked() {
				want += len(ids)
			}
			if r.undelivered != int64(want) {
				t.Fatalf("seed %d, step %d (%+v): undelivered %d, missingLocked lists %d", seed, n, st, r.undelivered, want)
			}
		}
	}
}

// TestUndeliveredFollowsMembers is TestUndeliveredFollowsMissing for a
// governed group: membership changes (adds, removals, their ACK known
// before or after the messages around them) interleaved with ACKs and
// events. After each step r.undelivered is what missingLocked lists, and
// every acked message expects exactly the members at its seq but the
// sender, as the complete history says.
func TestUndeliveredFollowsMembers(t *testing.T) {
	for seed := range uint64(30) {
		rng := rand.New(rand.NewPCG(seed, 2))
		const users = 6
		r := &run{msgs: map[string]*sent{}, created: map[string]map[int]bool{}, sessions: map[string]*session{},
			byUser: map[string]int{}, wake: make(chan struct{}, 1)}
		for u := range users {
			r.users = append(r.users, fmt.Sprintf("u%d", u))
			r.byUser[r.users[u]] = u
			r.lastSeq = append(r.lastSeq, map[string]int64{})
		}
		r.of = make([][]*session, users)
		s := &session{id: "group", members: []int{0, 1, 2}, governed: true, gov: newGovState([]int{0, 1, 2})}
		r.sessions[s.id] = s
		// A history: seq by seq, a change or a message by a member.
		in := map[int]bool{0: true, 1: true, 2: true}
		var all []change
		type step struct {
			kind string // ack, event, change
			id   string
			u    int
			c    change
		}
		var steps []step
		for seq := int64(2); seq < 40; seq++ {
			if rng.IntN(4) == 0 {
				u := 1 + rng.IntN(users-1) // never the owner
				c := change{seq: seq, users: []int{u}, in: !in[u]}
				in[u] = c.in
				all = append(all, c)
				steps = append(steps, step{kind: "change", c: c})
				continue
			}
			var members []int
			for u, ok := range in {
				if ok {
					members = append(members, u)
				}
			}
			id := fmt.Sprintf("m%d", seq)
			m := &sent{sender: members[rng.IntN(len(members))], session: s, seq: seq}
			r.msgs[id] = m
			steps = append(steps, step{kind: "ack", id: id})
			for _, u := range members {
				if rng.IntN(5) > 0 { // some never arrive
					steps = append(steps, step{kind: "event", id: id, u: u})
				}
			}
		}
		rng.Shuffle(len(steps), func(i, j int) { steps[i], steps[j] = steps[j], steps[i] })
		for n, st := range steps {
			switch st.kind {
			case "ack":
				r.ackLocked(r.msgs[st.id], r.msgs[st.id].seq)
			case "event":
				m := r.msgs[st.id]
				r.onEvent(st.u, client.Event{SessionID: s.id, Seq: m.seq, Kind: "message", ClientMsgID: st.id})
			case "change":
				r.noteChangeLocked(s, st.c)
			}
			want := 0
			for _, ids := range r.missingLocked() {
				want += len(ids)
			}
			if r.undelivered != int64(want) || s.undelivered != int64(want) {
				t.Fatalf("seed %d, step %d (%+v): undelivered %d (session %d), missingLocked lists %d", seed, n, st, r.undelivered, s.undelivered, want)
			}
		}
		g := newGovState([]int{0, 1, 2})
		for _, c := range all {
			g.add(c)
		}
		for id, m := range r.msgs {
			var want []int
			for _, u := range g.membersBefore(m.seq) {
				if u != m.sender {
					want = append(want, u)
				}
			}
			got := slices.Sorted(slices.Values(m.expect))
			if !slices.Equal(got, want) {
				t.Fatalf("seed %d: %s at seq %d expects %v, members then but the sender are %v", seed, id, m.seq, got, want)
			}
		}
	}
}

// TestDeliveredAfterRemoval checks the removal check on a small history:
// u1 removed at 5 and never back, u2 left at 6 and rejoined at 9, u3
// added at 7.
func TestDeliveredAfterRemoval(t *testing.T) {
	g := newGovState([]int{0, 1, 2})
	for _, c := range []change{{seq: 5, users: []int{1}}, {seq: 6, users: []int{2}}, {seq: 7, users: []int{3}, in: true}, {seq: 9, users: []int{2}, in: true}} {
		g.add(c)
	}
	cases := []struct {
		name   string
		user   int
		handed []int64
		want   int64
	}{
		{"a member's events", 0, []int64{1, 2, 5, 6, 7, 8, 9, 10}, 0},
		{"a removed member's removal, nothing after", 1, []int64{4, 5}, 0},
		{"a removed member handed later events", 1, []int64{5, 6, 8}, 2},
		{"a rejoined member's history", 2, []int64{6, 7, 8, 9, 10}, 0},
		{"an added member, from its add", 3, []int64{7, 8}, 0},
		{"an added member's history", 3, []int64{2, 7}, 0},
		{"never a member", 4, []int64{3}, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g.handed = map[int][]int64{c.user: c.handed}
			if got := g.afterRemoval(); got != c.want {
				t.Fatalf("user %d handed %v: %d after removal, want %d", c.user, c.handed, got, c.want)
			}
		})
	}
}
