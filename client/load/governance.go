package load

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"time"

	"github.com/seqflow/seqflow/client"
	"github.com/seqflow/seqflow/internal/wire"
)

// GovernanceOp counts one kind of governance operation of a run.
type GovernanceOp struct {
	Issued int64 `json:"issued"`
	OK     int64 `json:"ok"`
	// Refused: answered with a final error (not_permitted, not_a_member,
	// invalid_field...), by name. The actor picks from what it knows, which
	// may be stale or against the rules (an admin kicking an admin): the
	// rules decide.
	Refused map[string]int64 `json:"refused,omitempty"`
	// Failed: no answer within govOpTimeout, or the client closed.
	Failed int64 `json:"failed"`
}

// govOpTimeout bounds the wait for one governance operation's answer;
// the actor of a group waits for each before the next.
const govOpTimeout = 30 * time.Second

// change is one membership event of a governed group.
type change struct {
	seq   int64
	users []int
	in    bool // added or joined; false: removed or left
}

// govState is what a run knows of a governed group's members: its first
// members and every membership event known, from the ACKs of the run's
// own operations and from the events its clients were handed (by
// settleHistory, from the group's history itself). The actor's view of
// roles is kept apart.
type govState struct {
	first   []int
	changes []change // in seq order, one per seq
	seqs    map[int64]bool
	ever    map[int]bool    // users ever members
	admins  map[int]bool    // the actor's view: acked set_role admin
	handed  map[int][]int64 // per user: the seqs its app was handed
}

func newGovState(first []int) *govState {
	g := &govState{first: slices.Clone(first), ever: map[int]bool{}, admins: map[int]bool{},
		handed: map[int][]int64{}, seqs: map[int64]bool{}}
	for _, u := range first {
		g.ever[u] = true
	}
	return g
}

// membersBefore returns the members after every change known below seq,
// sorted.
func (g *govState) membersBefore(seq int64) []int {
	in := map[int]bool{}
	for _, u := range g.first {
		in[u] = true
	}
	for _, c := range g.changes {
		if c.seq >= seq {
			break
		}
		for _, u := range c.users {
			in[u] = c.in
		}
	}
	out := make([]int, 0, len(in))
	for u, ok := range in {
		if ok {
			out = append(out, u)
		}
	}
	slices.Sort(out)
	return out
}

func (g *govState) current() []int { return g.membersBefore(1 << 62) }

func (g *govState) isMember(u int) bool { return slices.Contains(g.current(), u) }

// add records a change; false when its seq is known already.
func (g *govState) add(c change) bool {
	if g.seqs[c.seq] {
		return false
	}
	g.seqs[c.seq] = true
	i, _ := slices.BinarySearchFunc(g.changes, c.seq, func(a change, s int64) int { return cmpInt(a.seq, s) })
	g.changes = slices.Insert(g.changes, i, c)
	if c.in {
		for _, u := range c.users {
			g.ever[u] = true
		}
	}
	return true
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// afterRemoval counts the events handed to a user at a seq where it was
// not a member (neither a member before it, nor added or joining by it)
// and that it did not rejoin after: a removed member must get its removal
// and nothing after it. Events handed after a later rejoin are its
// history, which sync serves to members.
func (g *govState) afterRemoval() (n int64) {
	for u, seqs := range g.handed {
		for _, e := range seqs {
			member := slices.Contains(g.first, u)
			rejoined, byIt := false, false
			for _, c := range g.changes {
				if !slices.Contains(c.users, u) {
					continue
				}
				switch {
				case c.seq < e:
					member = c.in
				case c.seq == e:
					byIt = c.in
				case c.in:
					rejoined = true
				}
			}
			if !member && !byIt && !rejoined {
				n++
			}
		}
	}
	return n
}

// observeLocked learns from an event handed to user u's app: the seq it
// was handed, and the membership change it is.
func (r *run) observeLocked(s *session, u int, e client.Event) {
	g := s.gov
	g.handed[u] = append(g.handed[u], e.Seq)
	var in bool
	switch {
	case e.Kind == wire.KindMembership && e.Action == wire.ActionAdd:
		in = true
	case e.Kind == wire.KindMembership && e.Action == wire.ActionRemove:
	case e.Kind == wire.KindGroupChange && e.Action == wire.ActionJoin:
		in = true
	default:
		return
	}
	var users []int
	for _, name := range e.UserIDs {
		if i, ok := r.byUser[name]; ok {
			users = append(users, i)
		}
	}
	r.noteChangeLocked(s, change{seq: e.Seq, users: users, in: in})
}

// noteChangeLocked records a membership change of s: the senders' view
// (r.of) follows the members it leaves, and the expected deliveries of the
// messages acked after it are counted again.
func (r *run) noteChangeLocked(s *session, c change) {
	if !s.gov.add(c) {
		return
	}
	r.membersChangedLocked(s)
}

func (r *run) membersChangedLocked(s *session) {
	now := s.gov.current()
	for u := range s.gov.admins {
		if !slices.Contains(now, u) {
			delete(s.gov.admins, u)
		}
	}
	if r.of != nil {
		for u := range r.of {
			has := slices.Contains(r.of[u], s)
			switch in := slices.Contains(now, u); {
			case in && !has:
				r.of[u] = append(r.of[u], s)
			case !in && has:
				r.of[u] = slices.DeleteFunc(r.of[u], func(x *session) bool { return x == s })
			}
		}
	}
	r.recountLocked(s)
}

// recountLocked sets every acked message's recipients of s from the
// member history known now, and s's undelivered pairs with them.
func (r *run) recountLocked(s *session) {
	slices.SortFunc(s.acked, func(a, b *sent) int { return cmpInt(a.seq, b.seq) })
	g := s.gov
	in := map[int]bool{}
	for _, u := range g.first {
		in[u] = true
	}
	next := 0
	var n int64
	for _, m := range s.acked {
		for ; next < len(g.changes) && g.changes[next].seq < m.seq; next++ {
			for _, u := range g.changes[next].users {
				in[u] = g.changes[next].in
			}
		}
		m.expect = m.expect[:0]
		for u, ok := range in {
			if ok && u != m.sender {
				m.expect = append(m.expect, u)
				if !m.deliveredTo[u] {
					n++
				}
			}
		}
	}
	r.undelivered += n - s.undelivered
	s.undelivered = n
	r.signal()
}

// settleHistory adds to what the run gathered of each governed group's
// membership events those of the group's history as its owner syncs it
// (the owner is a member throughout), so the expected deliveries and the
// removal check follow the log, whatever answers or events the faults
// cost. It adds and never replaces: the store trails the log, and what
// the ACKs and events told is the log's already. A group whose history
// cannot be read keeps what was gathered (verify_history_failed).
func (r *run) settleHistory(ctx context.Context) {
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 60*time.Second)
	defer cancel()
	r.mu.Lock()
	var governed []*session
	for _, s := range r.sessions {
		if s.governed {
			governed = append(governed, s)
		}
	}
	r.mu.Unlock()
	for _, s := range governed {
		var changes []change
		var after int64
		var err error
		for {
			var evs []client.Event
			var more bool
			evs, more, err = r.clients[s.members[0]].Sync(hctx, s.id, after, 200)
			if err != nil {
				break
			}
			r.mu.Lock()
			for _, e := range evs {
				after = e.Seq
				c := change{seq: e.Seq}
				switch {
				case e.Kind == wire.KindMembership:
					c.in = e.Action == wire.ActionAdd
				case e.Kind == wire.KindGroupChange && e.Action == wire.ActionJoin:
					c.in = true
				default:
					continue
				}
				for _, name := range e.UserIDs {
					if i, ok := r.byUser[name]; ok {
						c.users = append(c.users, i)
					}
				}
				changes = append(changes, c)
			}
			r.mu.Unlock()
			if !more || len(evs) == 0 {
				break
			}
		}
		r.mu.Lock()
		if err != nil {
			r.errs["verify_history_failed"]++
		}
		added := false
		for _, c := range changes {
			added = s.gov.add(c) || added
		}
		if added {
			r.errs["history_found_by_sync"]++
			r.membersChangedLocked(s)
		}
		r.mu.Unlock()
	}
}

// govern is the governance actor of group s: until sctx ends, every
// Options.Governance (±50%) one operation, each answered (or given up
// after govOpTimeout, under ctx) before the next. The owner (the creator)
// acts, or for a kick or mute now and then an admin; a member leaves by
// itself, and one that left or was removed rejoins by the invite code the
// actor sets first. Groups stay between 2 and GroupSize+2 members; a mute
// lasts 1–3 s, a group muted for all is unmuted by the next operation.
func (r *run) govern(sctx, ctx context.Context, s *session, i uint64) {
	rnd := mrand.New(mrand.NewPCG(uint64(time.Now().UnixNano()), 17+i))
	owner := s.members[0]
	code := fmt.Sprintf("load-%016x", rnd.Uint64())
	rule := wire.JoinCode
	r.govOp(ctx, "edit", func(c context.Context) (client.Ack, error) {
		return r.clients[owner].EditGroup(c, s.id, wire.GroupSettings{JoinRule: &rule, InviteCode: &code})
	}, nil)
	mutedAll := false
	maxSize := r.o.GroupSize + 2
	for {
		d := r.o.Governance/2 + time.Duration(rnd.Int64N(int64(r.o.Governance)))
		select {
		case <-sctx.Done():
			return
		case <-time.After(d):
		}
		r.mu.Lock()
		members := s.gov.current()
		var others, admins, outside, former []int
		for _, u := range members {
			if u != owner {
				others = append(others, u)
			}
			if s.gov.admins[u] {
				admins = append(admins, u)
			}
		}
		for u := range r.o.Users {
			if !slices.Contains(members, u) {
				outside = append(outside, u)
				if s.gov.ever[u] {
					former = append(former, u)
				}
			}
		}
		r.mu.Unlock()
		one := func(us []int) int { return us[rnd.IntN(len(us))] }
		// An admin acts instead of the owner now and then: its kicks and
		// mutes of other admins are refused, and a demotion may race it.
		actor := owner
		if len(admins) > 0 && rnd.IntN(10) < 3 {
			actor = one(admins)
		}
		op := "mute_all_off"
		if !mutedAll {
			op = pickOp(rnd, len(members), len(others), len(outside), len(former), maxSize)
		}
		// do carries the operation out; applied (under r.mu) records what
		// an accepted one changed.
		var do func(context.Context) (client.Ack, error)
		var applied func(client.Ack)
		member := func(t int, in bool) func(client.Ack) {
			return func(a client.Ack) { r.noteChangeLocked(s, change{seq: a.Seq, users: []int{t}, in: in}) }
		}
		switch op {
		case "mute", "unmute":
			t, until := one(others), time.Time{}
			if op == "mute" {
				until = time.Now().Add(time.Second + time.Duration(rnd.Int64N(int64(2*time.Second))))
			}
			do = func(cx context.Context) (client.Ack, error) {
				return r.clients[actor].Mute(cx, s.id, r.users[t], until)
			}
		case "mute_all_on", "mute_all_off":
			on := op == "mute_all_on"
			do = func(cx context.Context) (client.Ack, error) { return r.clients[owner].MuteAll(cx, s.id, on) }
			applied = func(client.Ack) { mutedAll = on }
		case "set_role":
			t, role := one(others), wire.RoleAdmin
			r.mu.Lock()
			if s.gov.admins[t] {
				role = wire.RoleMember
			}
			r.mu.Unlock()
			do = func(cx context.Context) (client.Ack, error) {
				return r.clients[owner].SetRole(cx, s.id, r.users[t], role)
			}
			applied = func(client.Ack) { s.gov.admins[t] = role == wire.RoleAdmin }
		case "remove":
			t, by := one(others), actor
			if t == by {
				by = owner
			}
			do = func(cx context.Context) (client.Ack, error) { return r.clients[by].RemoveMembers(cx, s.id, r.users[t]) }
			applied = member(t, false)
		case "add":
			t := one(outside)
			do = func(cx context.Context) (client.Ack, error) { return r.clients[owner].AddMembers(cx, s.id, r.users[t]) }
			applied = member(t, true)
		case "leave":
			t := one(others)
			do = func(cx context.Context) (client.Ack, error) { return r.clients[t].Leave(cx, s.id) }
			applied = member(t, false)
		case "rejoin":
			t := one(former)
			do = func(cx context.Context) (client.Ack, error) { return r.clients[t].Join(cx, s.id, code) }
			applied = member(t, true)
		}
		r.govOp(ctx, op, do, applied)
	}
}

// pickOp draws the next operation by weight among those the group's
// size allows.
func pickOp(rnd *mrand.Rand, members, others, outside, former, maxSize int) string {
	type w struct {
		op string
		n  int
	}
	var ops []w
	if others > 0 {
		ops = append(ops, w{"mute", 3}, w{"unmute", 1}, w{"set_role", 2})
	}
	ops = append(ops, w{"mute_all_on", 1})
	if members > 2 {
		ops = append(ops, w{"remove", 2}, w{"leave", 1})
	}
	if members < maxSize && outside > 0 {
		ops = append(ops, w{"add", 2})
	}
	if members < maxSize && former > 0 {
		ops = append(ops, w{"rejoin", 1})
	}
	total := 0
	for _, o := range ops {
		total += o.n
	}
	k := rnd.IntN(total)
	for _, o := range ops {
		if k < o.n {
			return o.op
		}
		k -= o.n
	}
	return ops[len(ops)-1].op
}

// govOp carries out one governance operation and counts its outcome;
// applied, when set, runs under r.mu with the ACK of an accepted one.
func (r *run) govOp(ctx context.Context, name string, do func(context.Context) (client.Ack, error), applied func(client.Ack)) {
	r.mu.Lock()
	st := r.govOps[name]
	if st == nil {
		st = &GovernanceOp{Refused: map[string]int64{}}
		r.govOps[name] = st
	}
	st.Issued++
	r.mu.Unlock()
	octx, cancel := context.WithTimeout(ctx, govOpTimeout)
	a, err := do(octx)
	cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	var se *client.ServerError
	switch {
	case err == nil:
		st.OK++
		if applied != nil {
			applied(a)
		}
	case errors.As(err, &se) && !se.Retryable:
		st.Refused[se.Name]++
	default:
		st.Failed++
	}
}
