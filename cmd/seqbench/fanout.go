package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/seqflow/seqflow/client"
	"github.com/seqflow/seqflow/internal/auth"
)

// fanout creates, for each size of FanoutMembers, a group of that many
// users (in chunks of 500, the gateway's members limit per op) with
// FanoutOnline of them connected, sends FanoutMessages messages to it one
// after the other and measures send → each online member's delivery.
func (b *Bench) fanout(ctx context.Context, r *Results) error {
	var errs []error
	for _, n := range b.cfg.FanoutMembers {
		if err := b.fanoutOf(ctx, r, n); err != nil {
			errs = append(errs, fmt.Errorf("%d members: %w", n, err))
		}
	}
	return errors.Join(errs...)
}

// fanoutOf measures one group size (members).
func (b *Bench) fanoutOf(ctx context.Context, r *Results, members int) error {
	s, err := b.startServices(ctx, "fanout", nil, serviceOrder...)
	if err != nil {
		return err
	}
	defer s.stop()
	stopProfile, err := b.startProfile(".fanout")
	if err != nil {
		return err
	}
	defer stopProfile()
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
		top     = make([]int64, online+1) // each client's highest seq of the group
		lat     []float64                 // send → SDK, per delivery
		after   []float64                 // server_ts (seq assigned) → SDK, per delivery
		seqd    = map[string]float64{}    // send → server_ts, per message
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
			top[i] = max(top[i], e.Seq)
			if at, ok := sentAt[e.ClientMsgID]; ok && e.Kind == "message" && i > 0 {
				lat = append(lat, ms(now.Sub(at)))
				after = append(after, ms(now.Sub(time.UnixMilli(e.ServerTs))))
				seqd[e.ClientMsgID] = ms(time.UnixMilli(e.ServerTs).Sub(at))
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
	for i := 1; i < min(500, members); i++ {
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
	lastSetup := ack.Seq
	for lo := 500; lo < members; lo += 500 {
		var chunk []string
		for i := lo; i < min(lo+500, members); i++ {
			chunk = append(chunk, user(i))
		}
		a, err := sender.AddMembers(ctx, sid, chunk...)
		if err != nil {
			return fmt.Errorf("add members %d..%d: %w", lo, lo+len(chunk)-1, err)
		}
		lastSetup = a.Seq
	}
	// Every online member has had the last setup event: its gateway knows
	// the membership, and the setup's deliveries (each AddMembers event
	// lists 500 users, to every online member) no longer queue ahead of
	// the messages measured.
	settled := func() bool {
		return !slices.ContainsFunc(top, func(s int64) bool { return s < lastSetup })
	}
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
	if !wait(90*time.Second, settled) {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, s := range top {
			if s >= lastSetup {
				n++
			}
		}
		return fmt.Errorf("only %d of %d clients saw the group's last setup event within 90 s", n, online+1)
	}
	setupSecs := time.Since(setupStart).Seconds()
	before := b.saveMetrics(ctx, "fanout-setup", "pusher", "producer-gw")
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
	got, gotAfter := slices.Clone(lat), slices.Clone(after)
	var gotSeq []float64
	for _, v := range seqd {
		gotSeq = append(gotSeq, v)
	}
	mu.Unlock()
	end := b.saveMetrics(ctx, "fanout", "pusher", "producer-gw")
	if len(got) == 0 {
		return fmt.Errorf("no delivery of %d expected", want)
	}
	p := quantiles(got)
	src := fmt.Sprintf("go tool task bench (cmd/seqbench fanout: %d members, %d online, %d messages)", members, online, msgs)
	key := "fanout_" + sizeName(members) + "_"
	r.set(key+"deliver_p99_ms", p(0.99), src)
	r.set(key+"deliver_p50_ms", p(0.5), src)
	r.set(key+"deliveries_missing", float64(want-len(got)), src)
	// The stages either side of the seq's server_ts (the sequencer's
	// clock, the same host): sequencing, then commit, push and the SDK.
	pa, ps := quantiles(gotAfter), quantiles(gotSeq)
	r.set(key+"seq_assigned_p50_ms", ps(0.5), src+", send → server_ts per message")
	r.set(key+"after_seq_p50_ms", pa(0.5), src+", server_ts → SDK per delivery")
	r.set(key+"after_seq_p99_ms", pa(0.99), src+", server_ts → SDK per delivery")
	// Stage means of the messages, from the services' histograms (end
	// minus after-setup): sum/count is exact where quantiles of 2× buckets
	// are not.
	for _, st := range []struct{ key, svc, series string }{
		{key + "pusher_read_mean_ms", "pusher", "seqflow_pusher_read_latency_seconds"},
		{key + "presence_lookup_mean_ms", "pusher", "seqflow_pusher_presence_lookup_seconds"},
		{key + "pusher_handoff_mean_ms", "pusher", "seqflow_pusher_push_latency_seconds"},
		{key + "gateway_batch_lag_mean_ms", "producer-gw", "seqflow_gateway_push_batch_lag_seconds"},
	} {
		if m, ok := histMean(before[st.svc], end[st.svc], st.series); ok {
			r.set(st.key, 1000*m, src+", mean of "+st.series+" over the messages")
		}
	}
	r.Details = append(r.Details, fmt.Sprintf(`### Fanout: one message to a %d-member group, %d online

The four services as processes on a fresh prefix; the group is created
with 500 members and grown by AddMembers of 500 (%.1f s until every online
member had an event of it); %d messages sent 200 ms apart by a member;
latency = send → each online member's SDK handing the message over.

| deliveries expected | got | p50 ms | p99 ms | max ms |
|---|---|---|---|---|
| %d | %d | %s | %s | %s |
`, members, online, setupSecs, msgs, want, len(got), num(p(0.5)), num(p(0.99)), num(p(1))))
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

// quantiles sorts v and returns its quantile function (0 when v is empty).
func quantiles(v []float64) func(q float64) float64 {
	slices.Sort(v)
	return func(q float64) float64 {
		if len(v) == 0 {
			return 0
		}
		return v[min(len(v)-1, int(q*float64(len(v))))]
	}
}

// saveMetrics writes each named service's /metrics to
// <logDir>/<phase>-<service>.metrics, for the per-stage histograms
// (pusher presence lookup and hand-off, gateway batch lag; the fanout
// phase saves them after the setup and at the end, so their difference
// is the messages'), and returns them by service; a failure only leaves
// the service out.
func (b *Bench) saveMetrics(ctx context.Context, phase string, svcs ...string) map[string]string {
	out := map[string]string{}
	for _, svc := range svcs {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+b.adminAddr(svc)+"/metrics", nil)
		if err != nil {
			continue
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			continue
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil {
			out[svc] = string(body)
			_ = os.WriteFile(filepath.Join(b.logDir, phase+"-"+svc+".metrics"), body, 0o644)
		}
	}
	return out
}

// histMean is the mean of histogram series between two scrapes of the
// Prometheus text format: Δsum / Δcount; false when nothing was observed.
func histMean(before, after, series string) (float64, bool) {
	read := func(text, name string) float64 {
		for line := range strings.Lines(text) {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				if err == nil {
					return f
				}
			}
		}
		return 0
	}
	n := read(after, series+"_count") - read(before, series+"_count")
	if n <= 0 || after == "" {
		return 0, false
	}
	return (read(after, series+"_sum") - read(before, series+"_sum")) / n, true
}
