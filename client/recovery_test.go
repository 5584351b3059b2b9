package client

import (
	"fmt"
	"syscall"
	"testing"
	"time"
)

// TestPausedPusherKeepsFillsInBudget makes the push path lag on purpose:
// the pipeline's only pusher is paused (SIGSTOP, longer than its group
// session timeout) while a member sends to a group of four, then resumed.
// The other members' clients resync every second, so they find the
// messages in the store and fill them while no push comes, and get every
// one of them pushed again after the pusher resumes. Every message must
// reach every member once, in order; the history they fetch must stay
// within 1.5 times the messages, and their sync pages within their
// budget.
func TestPausedPusherKeepsFillsInBudget(t *testing.T) {
	p := newPipeline(t)
	gw := p.gateway(t, "gw-a")
	const (
		n      = 240
		budget = 4.0 // pages per second, burst 8
		page   = 4   // small pages: the fills need more than the budget
	)
	tune := func(o *Options) { o.ResyncInterval, o.SyncBudget, o.SyncLimit = time.Second, budget, page }
	names := []string{user("sender"), user("m1"), user("m2"), user("m3")}
	var cs []*running
	for _, u := range names {
		cs = append(cs, p.start(t, u, "phone", []string{gw.url}, tune))
	}
	ctx := ctxT(t, 3*time.Minute)
	g, err := cs[0].CreateGroup(ctx, "paused pusher", names[1:]...)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs[1:] {
		c.rec.waitFor(t, 30*time.Second, "the group's creation", func(evs []Event) bool { return len(evs) > 0 })
	}
	before := make([]Stats, len(cs))
	for i, c := range cs {
		before[i] = c.Stats()
	}
	p.Pusher.Signal(syscall.SIGSTOP)
	paused := true
	defer func() {
		if paused {
			p.Pusher.Signal(syscall.SIGCONT)
		}
	}()
	began := time.Now()
	sent := map[string]int{}
	var pend []*Pending
	for i := range n {
		pp, err := cs[0].Post(ctx, g.SessionID, Text(fmt.Sprintf("m%03d", i)))
		if err != nil {
			t.Fatalf("post %d: %v", i, err)
		}
		sent[pp.ClientMsgID] = i
		pend = append(pend, pp)
		time.Sleep(40 * time.Millisecond) // ~10 s of sending while paused
	}
	for i, pp := range pend {
		if _, err := pp.Wait(ctx); err != nil {
			t.Fatalf("message %d: %v (ACKs do not need the pusher)", i, err)
		}
	}
	p.Pusher.Signal(syscall.SIGCONT)
	paused = false
	for i, c := range cs[1:] {
		evs := c.rec.waitFor(t, 2*time.Minute, "every message", func(evs []Event) bool { return countMessages(evs, g.SessionID) >= n })
		checkOnceInOrder(t, evs, g.SessionID, sent)
		elapsed := time.Since(began).Seconds()
		st := c.Stats()
		synced, pages := st.Synced-before[i+1].Synced, st.SyncPages-before[i+1].SyncPages
		if synced == 0 {
			t.Fatalf("member %d synced nothing: the pause did not make the clients recover (stats %+v)", i+1, st)
		}
		if synced > n*3/2 {
			t.Fatalf("member %d fetched %d events as history for %d messages, want at most 1.5 times", i+1, synced, n)
		}
		if limit := int64(budget*elapsed) + 2*int64(budget) + 1; pages > limit {
			t.Fatalf("member %d asked for %d sync pages in %.0fs, budget %d", i+1, pages, elapsed, limit)
		}
		if st.SyncsPaced-before[i+1].SyncsPaced == 0 {
			t.Fatalf("member %d: no sync page waited for the budget (%d pages in %.0fs)", i+1, pages, elapsed)
		}
		t.Logf("member %d: %d events synced in %d pages (%d paced) for %d messages, %d pushes dropped as held",
			i+1, synced, pages, st.SyncsPaced-before[i+1].SyncsPaced, n, st.DuplicatesDropped-before[i+1].DuplicatesDropped)
	}
}
