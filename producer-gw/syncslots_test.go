package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seqflow/seqflow/internal/wire"
)

// TestSyncSlotsUnit is a unit test of the slot logic alone (no store, no
// gateway): a request beyond the bound waits at most the queue wait and
// is then shed, counted by op; one freed within the wait is taken; the
// gauge follows the slots held.
func TestSyncSlotsUnit(t *testing.T) {
	ctx := context.Background()
	newSlots := func(n int, wait time.Duration) (*syncSlots, *metrics) {
		m := newMetrics(prometheus.NewRegistry())
		return newSyncSlots(n, wait, m), m
	}

	t.Run("beyond the bound: shed after the queue wait", func(t *testing.T) {
		const wait = 80 * time.Millisecond
		s, m := newSlots(1, wait)
		if err := s.acquire(ctx, wire.OpSync); err != nil {
			t.Fatalf("first acquire: %v", err)
		}
		if n := testutil.ToFloat64(m.syncSlotsInUse); n != 1 {
			t.Fatalf("slots in use %v, want 1", n)
		}
		start := time.Now()
		err := s.acquire(ctx, wire.OpChanges)
		took := time.Since(start)
		if err != errSyncBusy || !err.Retryable() {
			t.Fatalf("second acquire: %v, want errSyncBusy (retryable)", err)
		}
		if took < wait || took > wait+time.Second {
			t.Fatalf("shed after %v, want after the queue wait of %v", took, wait)
		}
		if n := testutil.ToFloat64(m.syncShed.WithLabelValues(wire.OpChanges)); n != 1 {
			t.Fatalf("shed{changes} = %v, want 1", n)
		}
		if n := testutil.ToFloat64(m.syncShed.WithLabelValues(wire.OpSync)); n != 0 {
			t.Fatalf("shed{sync} = %v, want 0", n)
		}
		s.release()
		if err := s.acquire(ctx, wire.OpSync); err != nil {
			t.Fatalf("acquire after release: %v", err)
		}
		s.release()
		if n := testutil.ToFloat64(m.syncSlotsInUse); n != 0 {
			t.Fatalf("slots in use %v after every release, want 0", n)
		}
	})

	t.Run("no queue wait: shed at once", func(t *testing.T) {
		s, _ := newSlots(1, 0)
		if err := s.acquire(ctx, wire.OpSync); err != nil {
			t.Fatal(err)
		}
		defer s.release()
		start := time.Now()
		if err := s.acquire(ctx, wire.OpSync); err != errSyncBusy {
			t.Fatalf("acquire: %v, want errSyncBusy", err)
		}
		if took := time.Since(start); took > 50*time.Millisecond {
			t.Fatalf("shed after %v with no queue wait, want at once", took)
		}
	})

	t.Run("a slot freed within the wait is taken", func(t *testing.T) {
		s, m := newSlots(1, 2*time.Second)
		if err := s.acquire(ctx, wire.OpSync); err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(50*time.Millisecond, s.release)
		start := time.Now()
		if err := s.acquire(ctx, wire.OpSync); err != nil {
			t.Fatalf("waiting acquire: %v, want the freed slot", err)
		}
		if took := time.Since(start); took > time.Second {
			t.Fatalf("took the freed slot after %v, want soon after its release at 50ms", took)
		}
		if n := testutil.ToFloat64(m.syncSlotsInUse); n != 1 {
			t.Fatalf("slots in use %v, want 1", n)
		}
	})

	t.Run("the request's own deadline ends the wait", func(t *testing.T) {
		s, _ := newSlots(1, 2*time.Second)
		if err := s.acquire(ctx, wire.OpSync); err != nil {
			t.Fatal(err)
		}
		dctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
		defer cancel()
		start := time.Now()
		if err := s.acquire(dctx, wire.OpSync); err != errSyncBusy {
			t.Fatalf("acquire: %v, want errSyncBusy", err)
		}
		if took := time.Since(start); took > time.Second {
			t.Fatalf("shed after %v, want at the request's deadline (30ms)", took)
		}
	})

	t.Run("the bound holds under concurrency", func(t *testing.T) {
		const n = 3
		s, _ := newSlots(n, time.Second)
		var held, most atomic.Int64
		var wg sync.WaitGroup
		for range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if s.acquire(ctx, wire.OpSync) != nil {
					return
				}
				h := held.Add(1)
				for {
					m := most.Load()
					if h <= m || most.CompareAndSwap(m, h) {
						break
					}
				}
				time.Sleep(20 * time.Millisecond)
				held.Add(-1)
				s.release()
			}()
		}
		wg.Wait()
		if most.Load() != n {
			t.Fatalf("at most %d slots held at once, want %d", most.Load(), n)
		}
	})

	t.Run("nil bounds nothing", func(t *testing.T) {
		var s *syncSlots
		if err := s.acquire(ctx, wire.OpSync); err != nil {
			t.Fatalf("nil acquire: %v", err)
		}
		s.release()
	})
}

// TestSyncShedding runs a gateway of the real stack with one sync slot,
// which the test holds: a sync or changes beyond it is answered
// unavailable (retryable) once the queue wait is over, over WebSocket
// and HTTP (503 with Retry-After), and counted by op; meanwhile the
// gateway serves everything else, and pushes reach a member whose own
// sync waits and members of a flood of shed syncs alike; with the slot
// free, sync is served again.
func TestSyncShedding(t *testing.T) {
	const (
		wait   = 300 * time.Millisecond
		pushed = 20 // events sent while syncs are shed
	)
	p := newPipeline(t)
	gw := p.gateway(map[string]string{"GATEWAY_SYNC_CONCURRENCY": "1", "GATEWAY_SYNC_QUEUE_WAIT": wait.String()})
	alice, bob, carol := user("alice"), user("bob"), user("carol")
	ac, bc := p.connect(gw, alice, "phone"), p.connect(gw, bob, "phone")
	sid, createSeq := createGroup(ac, bob, carol)
	p.waitStored(sid, createSeq)
	m := gw.g.m
	shed := func(op string) float64 { return testutil.ToFloat64(m.syncShed.WithLabelValues(op)) }
	syncAll := func(c *client, req string) frame {
		c.t.Helper()
		c.send(map[string]any{"op": "sync", "req_id": req, "session_id": sid, "after_seq": 0, "limit": 100})
		return c.result(req)
	}
	if r := syncAll(ac, "before"); r.Op != wire.OpResult || len(r.Messages) != 1 {
		t.Fatalf("sync with the slot free: %+v, want the session's create", r)
	}

	// The one slot, held by the test: every sync and changes now waits.
	slots := gw.g.history.slots
	if err := slots.acquire(context.Background(), "test"); err != nil {
		t.Fatalf("hold the slot: %v", err)
	}
	lastSeq := createSeq
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(slots.release) }
	t.Cleanup(release)
	wantUnavailable := func(t *testing.T, what string, r frame) {
		t.Helper()
		if r.Op != wire.OpError || r.Error.Name != "unavailable" || r.Error.Code != 5001 || !r.Error.Retryable {
			t.Fatalf("%s with the slot held: %+v, want error unavailable (5001, retryable)", what, r)
		}
	}
	wantShed := func(t *testing.T, what string, r frame, took time.Duration) {
		t.Helper()
		wantUnavailable(t, what, r)
		if took < wait || took > wait+3*time.Second {
			t.Fatalf("%s answered after %v, want just after the queue wait of %v", what, took, wait)
		}
	}

	t.Run("beyond the bound: unavailable after the queue wait", func(t *testing.T) {
		p.t, ac.t = t, t
		start := time.Now()
		r := syncAll(ac, "held-ws")
		wantShed(t, "sync over WebSocket", r, time.Since(start))

		start = time.Now()
		ac.send(map[string]any{"op": "changes", "req_id": "changes-ws"})
		wantShed(t, "changes over WebSocket", ac.result("changes-ws"), time.Since(start))

		req, _ := http.NewRequest(http.MethodGet, "http://"+gw.addr+"/v1/sessions/"+sid+"/messages?after_seq=0", nil)
		req.Header.Set("Authorization", "Bearer "+p.token(alice, "laptop", time.Hour))
		start = time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body frame
		mustDecodeBody(t, resp, &body)
		wantShed(t, "sync over HTTP", body, time.Since(start))
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" {
			t.Fatalf("sync over HTTP: status %d, Retry-After %q, want 503 with Retry-After 1", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
		if shed(wire.OpSync) != 2 || shed(wire.OpChanges) != 1 {
			t.Fatalf("shed{sync} = %v, shed{changes} = %v, want 2 and 1", shed(wire.OpSync), shed(wire.OpChanges))
		}
		if n := testutil.ToFloat64(m.syncSlotsInUse); n != 1 {
			t.Fatalf("slots in use %v, want 1 (the test's)", n)
		}

		// The gateway keeps serving what takes no slot.
		ac.send(map[string]any{"op": "ping", "req_id": "alive"})
		ac.expect("pong", func(f frame) bool { return f.Op == wire.OpPong && f.ReqID == "alive" })
		ac.send(map[string]any{"op": "seen_by", "req_id": "seen", "session_id": sid, "seq": createSeq})
		if r := ac.result("seen"); r.Op != wire.OpResult {
			t.Fatalf("seen_by with the sync slot held: %+v, want a result", r)
		}
		id := newID()
		ac.send(sendFrame(sid, id, "still sending"))
		a := ac.mustAckOK(id)
		bc.eventOf(sid, a.Seq)
		lastSeq = a.Seq
	})

	t.Run("pushes arrive while syncs are shed", func(t *testing.T) {
		p.t, ac.t, bc.t = t, t, t
		before := shed(wire.OpSync)
		// A flood of syncs from carol, over HTTP (each request its own
		// waiter) and over WebSocket, shed throughout.
		stop := make(chan struct{})
		var flood sync.WaitGroup
		var answered atomic.Int64
		hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}, Timeout: 10 * time.Second}
		defer hc.CloseIdleConnections()
		tok := p.token(carol, "laptop", time.Hour)
		for range 6 {
			flood.Add(1)
			go func() {
				defer flood.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					req, _ := http.NewRequest(http.MethodGet, "http://"+gw.addr+"/v1/sessions/"+sid+"/messages?after_seq=0", nil)
					req.Header.Set("Authorization", "Bearer "+tok)
					resp, err := hc.Do(req)
					if err != nil {
						t.Errorf("flood sync: %v", err)
						return
					}
					resp.Body.Close()
					if resp.StatusCode != http.StatusServiceUnavailable {
						t.Errorf("flood sync: status %d, want 503 while the slot is held", resp.StatusCode)
						return
					}
					answered.Add(1)
				}
			}()
		}
		cc := p.connect(gw, carol, "tablet")
		flood.Add(1)
		go func() {
			defer flood.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				req := fmt.Sprintf("flood-%d", i)
				cc.send(map[string]any{"op": "sync", "req_id": req, "session_id": sid, "after_seq": 0})
				r, ok := cc.expectWithin(10*time.Second, req, func(f frame) bool { return f.ReqID == req })
				if !ok || r.Op != wire.OpError || r.Error.Name != "unavailable" {
					t.Errorf("flood sync over WebSocket: %+v (answered: %v), want unavailable", r, ok)
					return
				}
				answered.Add(1)
			}
		}()

		// Bob's own connection waits for a slot too while events are
		// pushed to it.
		bc.send(map[string]any{"op": "sync", "req_id": "bob-waits", "session_id": sid, "after_seq": 0})
		var slowest time.Duration
		for i := range pushed {
			id := newID()
			start := time.Now()
			ac.send(sendFrame(sid, id, fmt.Sprintf("pushed %d", i)))
			lastSeq = ac.mustAckOK(id).Seq
			bc.eventOf(sid, lastSeq)
			slowest = max(slowest, time.Since(start))
		}
		wantUnavailable(t, "bob's sync", bc.result("bob-waits"))
		close(stop)
		flood.Wait()
		if got := shed(wire.OpSync) - before; got < float64(answered.Load()) || answered.Load() == 0 {
			t.Fatalf("shed{sync} rose by %v during the flood of %d answered syncs, want at least as many, and some", got, answered.Load())
		}
		t.Logf("%d events pushed to bob while %v syncs were shed; the slowest from send to bob's event: %v", pushed, shed(wire.OpSync)-before, slowest)
	})

	t.Run("with the slot free, sync is served again", func(t *testing.T) {
		p.t, ac.t = t, t
		release()
		p.waitStored(sid, lastSeq)
		r := syncAll(ac, "after")
		if r.Op != wire.OpResult || len(r.Messages) != int(lastSeq) {
			t.Fatalf("sync after the slot was freed: op %s error %+v, %d messages, want a result of %d", r.Op, r.Error, len(r.Messages), lastSeq)
		}
		if n := testutil.ToFloat64(m.syncSlotsInUse); n != 0 {
			t.Fatalf("slots in use %v, want 0", n)
		}
	})
}

// mustDecodeBody decodes an HTTP response's JSON body into v and closes it.
func mustDecodeBody(t *testing.T, resp *http.Response, v any) {
	t.Helper()
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("decode response body (status %d): %v", resp.StatusCode, err)
	}
}
