package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/seqflow/seqflow/client"
	"github.com/seqflow/seqflow/internal/auth"
)

// fanout creates a group of FanoutMembers users (in chunks of 500, the
// gateway's members limit per op) with FanoutOnline of them connected,
// sends FanoutMessages messages to it one after the other and measures
// send → each online member's delivery.
func (b *Bench) fanout(ctx context.Context, r *Results) error {
	s, err := b.startServices(ctx, "fanout", nil, serviceOrder...)
	if err != nil {
		return err
	}
	defer s.stop()
	signer, err := auth.NewHS256Signer([]byte(benchSecret))
	if err != nil {
		return fmt.Errorf("token signer: %w", err)
	}
	prefix := "fo" + randHex(3)
	user := func(i int) string { return fmt.Sprintf("%s-u%05d", prefix, i) }
	online := b.cfg.FanoutOnline
	var (
		mu      sync.Mutex
		sid     string
		sentAt  = map[string]time.Time{}
		seen    = make([]bool, online+1)
		nSeen   int
		lat     []float64
		wake    = make(chan struct{}, 1)
		runErrs = make(chan error, online+1)
	)
	onEvent := func(i int) func(client.Event) {
		return func(e client.Event) {
			now := time.Now()
			mu.Lock()
			defer mu.Unlock()
			if sid == "" || e.SessionID != sid {
				return
			}
			if !seen[i] {
				seen[i] = true
				nSeen++
			}
			if at, ok := sentAt[e.ClientMsgID]; ok && e.Kind == "message" && i > 0 {
				lat = append(lat, ms(now.Sub(at)))
			}
			select {
			case wake <- struct{}{}:
			default:
			}
		}
	}
	cctx, stopClients := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	defer func() { stopClients(); wg.Wait() }()
	clients := make([]*client.Client, online+1) // 0 is the sender
	for i := range clients {
		tok, err := signer.Mint(user(i), "fanout", time.Hour)
		if err != nil {
			return fmt.Errorf("mint token: %w", err)
		}
		c, err := client.New(client.Options{URLs: []string{"ws://" + b.gatewayAddr()}, Token: tok, SkipHistory: true,
			ResyncInterval: -1, OnEvent: onEvent(i)})
		if err != nil {
			return err
		}
		clients[i] = c
		wg.Go(func() {
			if err := c.Run(cctx); err != nil && !errors.Is(err, context.Canceled) {
				runErrs <- fmt.Errorf("client %d: %w", i, err)
			}
		})
	}
	sender := clients[0]
	var first []string
	for i := 1; i < min(500, b.cfg.FanoutMembers); i++ {
		first = append(first, user(i))
	}
	setupStart := time.Now()
	mu.Lock() // onEvent must not see events before sid is set
	ack, err := sender.CreateGroup(ctx, "fanout", first...)
	sid = ack.SessionID
	mu.Unlock()
	if err != nil {
		return fmt.Errorf("create group: %w", err)
	}
	for lo := 500; lo < b.cfg.FanoutMembers; lo += 500 {
		var chunk []string
		for i := lo; i < min(lo+500, b.cfg.FanoutMembers); i++ {
			chunk = append(chunk, user(i))
		}
		if _, err := sender.AddMembers(ctx, sid, chunk...); err != nil {
			return fmt.Errorf("add members %d..%d: %w", lo, lo+len(chunk)-1, err)
		}
	}
	// Every online member has had an event of the group: its gateway
	// knows the membership.
	wait := func(d time.Duration, done func() bool) bool {
		deadline := time.After(d)
		for {
			mu.Lock()
			ok := done()
			mu.Unlock()
			if ok {
				return true
			}
			select {
			case <-wake:
			case <-deadline:
				return false
			case <-ctx.Done():
				return false
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	if !wait(90*time.Second, func() bool { return nSeen >= online+1 }) {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Errorf("only %d of %d online members saw the group within 90 s", nSeen, online)
	}
	setupSecs := time.Since(setupStart).Seconds()
	msgs := b.cfg.FanoutMessages
	for n := range msgs {
		id := client.NewMessageID()
		mu.Lock()
		sentAt[id] = time.Now()
		mu.Unlock()
		if _, err := sender.PostWithID(ctx, id, sid, client.Text(fmt.Sprintf("fanout %d %0180d", n, 0))); err != nil {
			return fmt.Errorf("post: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	want := msgs * online
	wait(30*time.Second, func() bool { return len(lat) >= want })
	mu.Lock()
	got := slices.Clone(lat)
	mu.Unlock()
	if len(got) == 0 {
		return fmt.Errorf("no delivery of %d expected", want)
	}
	slices.Sort(got)
	p := func(q float64) float64 { return got[min(len(got)-1, int(q*float64(len(got))))] }
	src := fmt.Sprintf("go tool task bench (cmd/seqbench fanout: %d members, %d online, %d messages)", b.cfg.FanoutMembers, online, msgs)
	r.set("fanout_10k_deliver_p99_ms", p(0.99), src)
	r.set("fanout_deliveries_missing", float64(want-len(got)), src)
	r.Details = append(r.Details, fmt.Sprintf(`### Fanout: one message to a %d-member group, %d online

The four services as processes on a fresh prefix; the group is created
with 500 members and grown by AddMembers of 500 (%.1f s until every online
member had an event of it); %d messages sent 200 ms apart by a member;
latency = send → each online member's SDK handing the message over.

| deliveries expected | got | p50 ms | p99 ms | max ms |
|---|---|---|---|---|
| %d | %d | %s | %s | %s |
`, b.cfg.FanoutMembers, online, setupSecs, msgs, want, len(got), num(p(0.5)), num(p(0.99)), num(got[len(got)-1])))
	var errs []error
	if len(got) < want {
		errs = append(errs, fmt.Errorf("%d of %d deliveries missing after 30 s", want-len(got), want))
	}
	select {
	case err := <-runErrs:
		errs = append(errs, err)
	default:
	}
	return errors.Join(append(errs, s.exited())...)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
