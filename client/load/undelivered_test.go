package load

import (
	"fmt"
	"math/rand/v2"
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
