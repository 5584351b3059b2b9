package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coder/websocket"

	"github.com/seqflow/seqflow/internal/auth"
)

// raiseNoFile lifts RLIMIT_NOFILE of this process, and so of the
// services it starts (they inherit it), towards n; without
// CAP_SYS_RESOURCE only up to the hard limit. It returns the soft limit
// in force afterwards.
func raiseNoFile(n uint64) (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("get RLIMIT_NOFILE: %w", err)
	}
	if lim.Cur >= n {
		return lim.Cur, nil
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: n, Max: max(n, lim.Max)}); err == nil {
		return n, nil
	}
	// Not permitted above the hard limit (no CAP_SYS_RESOURCE here).
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: lim.Max, Max: lim.Max}); err != nil {
		return 0, fmt.Errorf("raise RLIMIT_NOFILE to its hard limit %d: %w", lim.Max, err)
	}
	return lim.Max, nil
}

// fdReserve is what the gateway and the orchestrator keep for everything
// but the idle connections (Kafka, PostgreSQL, Redis, listeners, logs).
const fdReserve = 256

// vmRSS reads VmRSS of pid in bytes.
func vmRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read status of %d: %w", pid, err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) == 2 && f[1] == "kB" {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				if err != nil {
					return 0, fmt.Errorf("parse VmRSS %q: %w", rest, err)
				}
				return kb << 10, nil
			}
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}

// idle opens IdleConns WebSocket connections, one user each, to one fresh
// gateway process, keeps them open answering pings and nothing else, and
// divides the growth of the gateway's VmRSS by the connections open.
func (b *Bench) idle(ctx context.Context, r *Results) error {
	limit, err := raiseNoFile(uint64(b.cfg.IdleConns) + 10_000)
	if err != nil {
		return err
	}
	n := b.cfg.IdleConns
	capped := ""
	if n > int(limit)-fdReserve {
		n = int(limit) - fdReserve
		capped = fmt.Sprintf(" Capped from %d: RLIMIT_NOFILE is %d here and cannot be raised (no CAP_SYS_RESOURCE), and the gateway and this process each need a descriptor per connection plus %d for the rest.", b.cfg.IdleConns, limit, fdReserve)
	}
	s, err := b.startServices(ctx, "idle", "producer-gw")
	if err != nil {
		return err
	}
	defer s.stop()
	pid := s.pid("producer-gw")
	time.Sleep(2 * time.Second)
	before, err := vmRSS(pid)
	if err != nil {
		return err
	}
	signer, err := auth.NewHS256Signer([]byte(benchSecret))
	if err != nil {
		return fmt.Errorf("token signer: %w", err)
	}
	prefix := "idle" + randHex(3)
	conns := make([]*websocket.Conn, n)
	var open, failed atomic.Int64
	var firstErr atomic.Value
	cctx, closeAll := context.WithCancel(context.WithoutCancel(ctx))
	defer closeAll()
	hc := &http.Client{Timeout: 30 * time.Second}
	url := "ws://" + b.gatewayAddr() + "/v1/ws"
	start := time.Now()
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	for i := range n {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			tok, err := signer.Mint(fmt.Sprintf("%s-u%06d", prefix, i), "idle", time.Hour)
			if err == nil {
				var c *websocket.Conn
				c, err = dialIdle(ctx, hc, url, tok)
				if err == nil {
					conns[i] = c
					open.Add(1)
					// CloseRead answers pings and notices the close.
					done := c.CloseRead(cctx)
					go func() { <-done.Done(); open.Add(-1) }()
					return
				}
			}
			failed.Add(1)
			firstErr.CompareAndSwap(nil, err)
		})
	}
	wg.Wait()
	dialSecs := time.Since(start).Seconds()
	// Let the gateway's per-connection setup (presence, member cache)
	// settle, and check the connections survive a heartbeat or two.
	time.Sleep(5 * time.Second)
	after, err := vmRSS(pid)
	if err != nil {
		return err
	}
	held := open.Load()
	for _, c := range conns {
		if c != nil {
			_ = c.CloseNow()
		}
	}
	if held == 0 {
		return fmt.Errorf("no connection held (%d failed, first: %v)", failed.Load(), firstErr.Load())
	}
	perConn := float64(after-before) / float64(held)
	src := fmt.Sprintf("SEQBENCH_IDLE_CONNS=%d go tool task bench (cmd/seqbench idle: VmRSS of the gateway before and 5 s after the dials)", n)
	r.set("idle_conns", float64(held), src)
	r.set("idle_conns_asked", float64(b.cfg.IdleConns), src)
	r.set("idle_rlimit_nofile", float64(limit), src)
	r.set("gateway_rss_bytes_per_conn", perConn, src)
	r.Details = append(r.Details, fmt.Sprintf(`### Idle WebSocket connections on one gateway

One fresh gateway process (RLIMIT_NOFILE raised by the orchestrator);
%d connections opened, one user each, 64 dials at a time; each client only
answers pings. VmRSS from /proc/<pid>/status before the dials and 5 s after
the last one.%s

| asked | held 5 s after | failed dials | dial time s | VmRSS before MiB | VmRSS after MiB | bytes per connection |
|---|---|---|---|---|---|---|
| %d | %d | %d | %.1f | %.1f | %.1f | %s |
`, n, capped, n, held, failed.Load(), dialSecs, float64(before)/(1<<20), float64(after)/(1<<20), num(perConn)))
	if f := failed.Load(); f > 0 {
		return fmt.Errorf("%d of %d dials failed, first: %v", f, n, firstErr.Load())
	}
	return s.exited()
}

// dialIdle opens one connection and reads the gateway's hello.
func dialIdle(ctx context.Context, hc *http.Client, url, token string) (*websocket.Conn, error) {
	h := http.Header{}
	h.Set("Authorization", "Bearer "+token)
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(dctx, url, &websocket.DialOptions{HTTPHeader: h, HTTPClient: hc})
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	if _, _, err := c.Read(dctx); err != nil {
		_ = c.CloseNow()
		return nil, fmt.Errorf("read hello: %w", err)
	}
	return c, nil
}
