package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/seqflow/seqflow/internal/auth"
	"github.com/seqflow/seqflow/internal/testkit/clienttest"
	"github.com/seqflow/seqflow/internal/testkit/stack"
	"github.com/seqflow/seqflow/internal/wire"
)

// TestRateLimitAcrossGateways: the buckets live in Redis, so a user who
// moves to another gateway finds them as it left them; when Redis goes
// away each gateway decides with its own buckets (counted) and serves on,
// and once Redis is back the shared buckets decide again.
func TestRateLimitAcrossGateways(t *testing.T) {
	p := newPipelineNoProcs(t)
	// 1 request a second, a burst of 3.
	tight := map[string]string{"GATEWAY_RATE_PER_USER": "1", "GATEWAY_RATE_BURST": "3"}
	gwA, gwB := p.gateway(tight), p.gateway(tight)

	// changes is a rate-limited request that needs no sequencer.
	changes := func(c *client, n int) string {
		t.Helper()
		id := fmt.Sprintf("c%d", n)
		c.send(map[string]any{"op": "changes", "req_id": id})
		r := c.result(id)
		if r.Op == wire.OpError {
			return r.Error.Name
		}
		return "ok"
	}

	t.Run("the bucket follows the user to another gateway", func(t *testing.T) {
		p.t = t
		u := user("mover")
		a := p.connect(gwA, u, "phone")
		for i := range 3 {
			if got := changes(a, i); got != "ok" {
				t.Fatalf("request %d on gateway A: %s, want ok (burst 3)", i, got)
			}
		}
		b := p.connect(gwB, u, "laptop")
		if got := changes(b, 3); got != "rate_limited" {
			t.Fatalf("fourth request, on gateway B: %s, want rate_limited (the bucket is the user's, in Redis)", got)
		}
		if n := testutil.ToFloat64(gwA.g.m.rateFallbacks) + testutil.ToFloat64(gwB.g.m.rateFallbacks); n != 0 {
			t.Fatalf("fallbacks = %v with Redis up, want 0", n)
		}
	})

	t.Run("a Redis outage falls back to local buckets, never refuses all traffic", func(t *testing.T) {
		p.t = t
		px := newTCPProxy(t, p.st.RedisAddr)
		over := map[string]string{"SEQFLOW_REDIS_ADDR": px.addr()}
		for k, v := range tight {
			over[k] = v
		}
		gw := p.gateway(over)
		u := user("outage")
		c := p.connect(gw, u, "phone")
		got := []string{changes(c, 0), changes(c, 1), changes(c, 2), changes(c, 3)}
		if fmt.Sprint(got) != "[ok ok ok rate_limited]" {
			t.Fatalf("with Redis up: %v, want the burst of 3 then rate_limited", got)
		}
		px.stop()
		// The bucket in Redis is empty, this gateway's own is full: served
		// while Redis is away, up to the local burst.
		got = []string{changes(c, 4), changes(c, 5), changes(c, 6), changes(c, 7)}
		if fmt.Sprint(got) != "[ok ok ok rate_limited]" {
			t.Fatalf("with Redis down: %v, want the local burst of 3 then rate_limited", got)
		}
		down := testutil.ToFloat64(gw.g.m.rateFallbacks)
		if down != 4 {
			t.Fatalf("fallbacks = %v, want 4 (one per request while Redis was down)", down)
		}
		px.start()
		time.Sleep(redisLimitCooldown + 200*time.Millisecond)
		// Redis decides again, with no fallback: its bucket has refilled by
		// about a token a second since it was emptied, at most 3, so five
		// requests back to back meet the limit.
		got = nil
		for i := 8; i < 13; i++ {
			got = append(got, changes(c, i))
		}
		if got[len(got)-1] != "rate_limited" || got[0] != "ok" {
			t.Fatalf("after Redis came back: %v, want some served, then rate_limited", got)
		}
		if n := testutil.ToFloat64(gw.g.m.rateFallbacks); n != down {
			t.Fatalf("fallbacks went from %v to %v after Redis came back", down, n)
		}
	})
}

// tcpProxy forwards connections to a backend; stop closes the listener
// and every open connection, start listens again on the same address.
type tcpProxy struct {
	t       *testing.T
	backend string
	listen  string

	mu    sync.Mutex
	ln    net.Listener
	conns []net.Conn
}

func newTCPProxy(t *testing.T, backend string) *tcpProxy {
	px := &tcpProxy{t: t, backend: backend, listen: "127.0.0.1:0"}
	px.start()
	px.listen = px.addr()
	t.Cleanup(px.stop)
	return px
}

func (px *tcpProxy) addr() string {
	px.mu.Lock()
	defer px.mu.Unlock()
	return px.ln.Addr().String()
}

func (px *tcpProxy) start() {
	ln, err := net.Listen("tcp", px.listen)
	if err != nil {
		px.t.Fatal(err)
	}
	px.mu.Lock()
	px.ln = ln
	px.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b, err := net.Dial("tcp", px.backend)
			if err != nil {
				c.Close()
				continue
			}
			px.mu.Lock()
			px.conns = append(px.conns, c, b)
			px.mu.Unlock()
			go func() { _, _ = io.Copy(b, c); b.Close() }()
			go func() { _, _ = io.Copy(c, b); c.Close() }()
		}
	}()
}

func (px *tcpProxy) stop() {
	px.mu.Lock()
	defer px.mu.Unlock()
	if err := px.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		px.t.Errorf("close proxy: %v", err)
	}
	for _, c := range px.conns {
		c.Close()
	}
	px.conns = nil
}

// evalCounter counts the scripts a Redis client runs by hash (redis_rate's
// one call each; an EVAL after a NOSCRIPT reply only loads it).
type evalCounter struct{ n atomic.Int64 }

func (c *evalCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *evalCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "evalsha" {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (c *evalCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestLimiterLeasesTokens, against the stack's Redis: a gateway takes a
// busy user's tokens in leases that double up to 25 (burst 100), so Redis
// sees 8 of 100 requests; the shared bucket is never overdrawn, and
// another gateway finds it as the first left it; an expired lease is
// dropped and the next request asks Redis again.
func TestLimiterLeasesTokens(t *testing.T) {
	st := stack.Require(t, "redis")
	counter := &evalCounter{}
	rdb := redis.NewClient(&redis.Options{Addr: st.RedisAddr})
	defer rdb.Close()
	rdb.AddHook(counter)
	now := time.Now()
	clock := func() time.Time { return now }
	cfg := Config{RatePerUser: 1, RateBurst: 100}
	m := newMetrics(prometheus.NewRegistry())
	a := newLimiter(rdb, cfg, slog.New(slog.DiscardHandler), m, clock)
	b := newLimiter(rdb, cfg, slog.New(slog.DiscardHandler), newMetrics(prometheus.NewRegistry()), clock)
	p := auth.Principal{UserID: clienttest.User("lease"), DeviceID: "d"}
	served := 0
	for range 100 {
		if a.allow(t.Context(), p) {
			served++
		}
	}
	if served != 100 {
		t.Fatalf("the burst of 100: %d served", served)
	}
	if n := counter.n.Load(); n != 8 {
		t.Errorf("%d scripts in Redis for 100 requests, want 8 (leases of 1, 2, 4, 8, 16, 25, 25 and the last 19)", n)
	}
	if n := testutil.ToFloat64(m.rateLeases); n != 8 {
		t.Errorf("leases counted %v, want 8", n)
	}
	// The bucket is empty (1 token a second refills it): neither gateway
	// may serve, whichever the user moves to.
	if a.allow(t.Context(), p) || b.allow(t.Context(), p) {
		t.Fatal("a request past the burst was served: the shared bucket was overdrawn")
	}
	if n := testutil.ToFloat64(m.rateFallbacks); n != 0 {
		t.Fatalf("fallbacks = %v with Redis up", n)
	}
	// A lease left unspent past leaseTTL is dropped.
	q := auth.Principal{UserID: clienttest.User("lease"), DeviceID: "d"}
	if !a.allow(t.Context(), q) {
		t.Fatal("a new user refused")
	}
	before := counter.n.Load()
	now = now.Add(leaseTTL)
	if !a.allow(t.Context(), q) {
		t.Fatal("refused with tokens in the bucket")
	}
	if counter.n.Load() != before+1 {
		t.Errorf("an expired lease was spent: %d scripts, want %d", counter.n.Load(), before+1)
	}
}

// TestLimiterLeasesFollowThePace, against the stack's Redis: a user who
// sends less than once per lease period takes one token at a time, so a
// bucket of 40 serves 40 such requests, spread over four gateways, and
// refuses the 41st; leases of a fixed size would have wasted most of them
// (each gateway's lease expiring nearly unspent).
func TestLimiterLeasesFollowThePace(t *testing.T) {
	st := stack.Require(t, "redis")
	counter := &evalCounter{}
	rdb := redis.NewClient(&redis.Options{Addr: st.RedisAddr})
	defer rdb.Close()
	rdb.AddHook(counter)
	now := time.Now()
	clock := func() time.Time { return now }
	// 1 token a second refills nothing that matters within the test.
	cfg := Config{RatePerUser: 1, RateBurst: 40}
	var gws []*limiter
	for range 4 {
		gws = append(gws, newLimiter(rdb, cfg, slog.New(slog.DiscardHandler), newMetrics(prometheus.NewRegistry()), clock))
	}
	p := auth.Principal{UserID: clienttest.User("pace"), DeviceID: "d"}
	for i := range 40 {
		if !gws[i%4].allow(t.Context(), p) {
			t.Fatalf("request %d of 40 refused: leases wasted the bucket", i+1)
		}
		now = now.Add(leaseTTL)
	}
	if n := counter.n.Load(); n != 40 {
		t.Errorf("%d scripts for 40 requests a lease period apart, want 40 (one token each)", n)
	}
	if gws[0].allow(t.Context(), p) {
		t.Fatal("the 41st request was served: the bucket was overdrawn")
	}
}
