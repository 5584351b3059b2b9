package main

import (
	"context"
	"errors"
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

// idleResult is one idle run.
type idleResult struct {
	asked, held, failed int
	before, after       int64
	dialSecs            float64
	firstErr            error
}

func (r idleResult) perConn() float64 { return float64(r.after-r.before) / float64(max(r.held, 1)) }

func (r idleResult) row(name string) string {
	return fmt.Sprintf("| %s | %d | %d | %d | %.1f | %.1f | %.1f | %s |", name, r.asked, r.held, r.failed, r.dialSecs,
		float64(r.before)/(1<<20), float64(r.after)/(1<<20), num(r.perConn()))
}

// idle opens IdleConns WebSocket connections, one user each, to one fresh
// gateway process, keeps them open answering pings and nothing else, and
// divides the growth of the gateway's VmRSS by the connections open. A
// second run with GATEWAY_CONN_QUEUE=64 shows what the per-connection
// send queue (512 slots, allocated up front) costs.
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
	src := fmt.Sprintf("SEQBENCH_IDLE_CONNS=%d go tool task bench (cmd/seqbench idle: VmRSS of the gateway before and 5 s after the dials)", b.cfg.IdleConns)
	def, err := b.idleRun(ctx, n, nil)
	if err != nil {
		return err
	}
	r.set("idle_conns", float64(def.held), src)
	r.set("gateway_rss_bytes_per_conn", def.perConn(), src)
	r.set("idle_conns_asked", float64(b.cfg.IdleConns), src)
	r.set("idle_rlimit_nofile", float64(limit), src)
	rows := []string{def.row("defaults (GATEWAY_CONN_QUEUE=512)")}
	q64, qerr := b.idleRun(ctx, n, []string{"GATEWAY_CONN_QUEUE=64"})
	if qerr == nil {
		r.set("gateway_rss_bytes_per_conn_queue64", q64.perConn(), src+" with GATEWAY_CONN_QUEUE=64")
		rows = append(rows, q64.row("experiment: GATEWAY_CONN_QUEUE=64"))
	}
	r.Details = append(r.Details, fmt.Sprintf(`### Idle WebSocket connections on one gateway

One fresh gateway process per row; %d connections opened, one user each,
64 dials at a time; each client only answers pings. VmRSS from
/proc/<pid>/status before the dials and 5 s after the last one.%s

| gateway settings | asked | held 5 s after | failed dials | dial time s | VmRSS before MiB | VmRSS after MiB | bytes per connection |
|---|---|---|---|---|---|---|---|
%s

Where it goes: `+"`SEQFLOW_BENCH_HEAPPROFILE=heap.pprof go test -run XXX -bench BenchmarkIdle_Conns2k -benchtime 1x ./producer-gw`"+`
reports heap and goroutine stacks per connection (both ends, client and
gateway in one process) and `+"`go tool pprof -sample_index=inuse_space -top heap.pprof`"+`
splits the heap by function: the largest item is the connection's send
queue, `+"`make(chan []byte, GATEWAY_CONN_QUEUE)`"+` in serveWS (512 × 24 B ≈
12 KiB of heap per connection, mostly untouched zero pages, so it weighs
less in RSS, as the second row shows), then the 4 KiB bufio reader and
writer net/http keeps for a hijacked connection; the gateway also runs
about three goroutines per connection, whose stacks are the other large
share.
`, n, capped, joinLines(rows)))
	var errs []error
	if def.failed > 0 {
		errs = append(errs, fmt.Errorf("%d of %d dials failed, first: %v", def.failed, n, def.firstErr))
	}
	if qerr != nil {
		errs = append(errs, fmt.Errorf("GATEWAY_CONN_QUEUE=64 run: %w", qerr))
	}
	return errors.Join(errs...)
}

// idleRun starts one gateway with extra env and holds n connections.
func (b *Bench) idleRun(ctx context.Context, n int, extra []string) (idleResult, error) {
	res := idleResult{asked: n}
	s, err := b.startServices(ctx, "idle", extra, "producer-gw")
	if err != nil {
		return res, err
	}
	defer s.stop()
	pid := s.pid("producer-gw")
	time.Sleep(2 * time.Second)
	if res.before, err = vmRSS(pid); err != nil {
		return res, err
	}
	signer, err := auth.NewHS256Signer([]byte(benchSecret))
	if err != nil {
		return res, fmt.Errorf("token signer: %w", err)
	}
	prefix := "idle" + randHex(3)
	conns := make([]*websocket.Conn, n)
	var open, failed atomic.Int64
	var errMu sync.Mutex
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
			errMu.Lock()
			if res.firstErr == nil {
				res.firstErr = err
			}
			errMu.Unlock()
		})
	}
	wg.Wait()
	res.dialSecs = time.Since(start).Seconds()
	// Let the gateway's per-connection setup (presence, member cache)
	// settle.
	time.Sleep(5 * time.Second)
	if res.after, err = vmRSS(pid); err != nil {
		return res, err
	}
	res.held, res.failed = int(open.Load()), int(failed.Load())
	for _, c := range conns {
		if c != nil {
			_ = c.CloseNow()
		}
	}
	if res.held == 0 {
		return res, fmt.Errorf("no connection held (%d failed, first: %v)", res.failed, res.firstErr)
	}
	return res, s.exited()
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
