package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seqflow/seqflow/internal/delivery"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// fakeSender is an in-process stand-in for a transport, for these unit
// tests only: gateways in hang block every Send until its context ends;
// gateways in gone answer ErrNoReceiver; the rest succeed.
type fakeSender struct {
	mu   sync.Mutex
	hang map[string]bool
	gone map[string]bool
	sent map[string]int
}

func newFakeSender() *fakeSender {
	return &fakeSender{hang: map[string]bool{}, gone: map[string]bool{}, sent: map[string]int{}}
}

func (f *fakeSender) Send(ctx context.Context, b *imv1.PushBatch) error {
	f.mu.Lock()
	hang, gone := f.hang[b.GatewayId], f.gone[b.GatewayId]
	f.mu.Unlock()
	switch {
	case hang:
		<-ctx.Done()
		return &delivery.SendError{GatewayID: b.GatewayId, Err: ctx.Err()}
	case gone:
		return &delivery.SendError{GatewayID: b.GatewayId, Err: delivery.ErrNoReceiver}
	}
	f.mu.Lock()
	f.sent[b.GatewayId] += len(b.Items)
	f.mu.Unlock()
	return nil
}

func (f *fakeSender) Close() error { return nil }

func (f *fakeSender) count(gw string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sent[gw]
}

func testLanes(ctx context.Context, s delivery.Sender, depth int) (*lanes, *metrics) {
	m := newMetrics(prometheus.NewRegistry())
	cfg := Config{SendTimeout: 500 * time.Millisecond, QueueDepth: depth, LaneIdle: time.Minute}
	return newLanes(ctx, s, cfg, m, slog.New(slog.DiscardHandler)), m
}

func batch(gw string, seq int64) *imv1.PushBatch {
	return &imv1.PushBatch{GatewayId: gw, Items: []*imv1.PushItem{{Item: &imv1.PushItem_Event{Event: textEv("s", seq, "u", "x")}}}}
}

func isDone(t *ticket) bool {
	select {
	case <-t.done:
		return true
	default:
		return false
	}
}

// TestLanesSlowGatewayDoesNotHoldOthers: one gateway never answers; the
// others get every batch, the hung one's batches are dropped with reasons,
// and every poll's ticket finishes, so commits keep moving.
func TestLanesSlowGatewayDoesNotHoldOthers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		s := newFakeSender()
		s.hang["gw-slow"] = true
		ls, m := testLanes(ctx, s, 4)
		var tickets []*ticket
		const polls = 40
		for i := range polls {
			tk := newTicket(nil)
			for _, gw := range []string{"gw-a", "gw-slow", "gw-b"} {
				tk.hold()
				ls.dispatch(job{b: batch(gw, int64(i+1)), t: tk})
			}
			tk.release()
			tickets = append(tickets, tk)
			time.Sleep(10 * time.Millisecond) // one poll every 10 ms
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		for i, tk := range tickets {
			if !isDone(tk) {
				t.Fatalf("ticket of poll %d never finished: a hung gateway holds commits", i)
			}
		}
		if s.count("gw-a") != polls || s.count("gw-b") != polls {
			t.Fatalf("healthy gateways got %d and %d items, want %d each", s.count("gw-a"), s.count("gw-b"), polls)
		}
		dropped := 0.0
		for _, r := range []string{"timeout", "queue_full", "stale", "gateway_down"} {
			dropped += value(m.droppedItems.WithLabelValues(r))
		}
		if dropped != polls || value(m.droppedItems.WithLabelValues("timeout")) < 1 {
			t.Fatalf("hung gateway: %v items dropped (timeouts %v), want all %d", dropped,
				value(m.droppedItems.WithLabelValues("timeout")), polls)
		}
		cancel()
		ls.wait()
	})
}

// TestLanesCoolOffAfterFailure: after a failed Send the lane drops without
// calling the gateway for a while, then tries again and recovers.
func TestLanesCoolOffAfterFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		s := newFakeSender()
		s.gone["gw"] = true
		ls, m := testLanes(ctx, s, 8)
		send := func(seq int64) {
			tk := newTicket(nil)
			tk.hold()
			ls.dispatch(job{b: batch("gw", seq), t: tk})
			tk.release()
			<-tk.done
		}
		send(1)
		send(2)
		if got := value(m.droppedItems.WithLabelValues("no_receiver")); got != 1 {
			t.Fatalf("no_receiver drops = %v, want 1", got)
		}
		if got := value(m.droppedItems.WithLabelValues("gateway_down")); got != 1 {
			t.Fatalf("gateway_down drops = %v, want 1 (the lane should cool off)", got)
		}
		s.mu.Lock()
		s.gone["gw"] = false
		s.mu.Unlock()
		time.Sleep(maxCoolOff)
		send(3)
		if s.count("gw") != 1 {
			t.Fatalf("after the cool-off the gateway got %d items, want 1", s.count("gw"))
		}
	})
}

// TestLanesRetireWhenIdle: a gateway that gets no batches loses its
// goroutine; a later batch starts a new one.
func TestLanesRetireWhenIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		s := newFakeSender()
		ls, m := testLanes(ctx, s, 8)
		tk := newTicket(nil)
		tk.hold()
		ls.dispatch(job{b: batch("gw", 1), t: tk})
		tk.release()
		<-tk.done
		if value(m.lanes) != 1 {
			t.Fatal("no lane after a dispatch")
		}
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		if value(m.lanes) != 0 {
			t.Fatal("idle lane kept its goroutine")
		}
		tk = newTicket(nil)
		tk.hold()
		ls.dispatch(job{b: batch("gw", 2), t: tk})
		tk.release()
		<-tk.done
		if s.count("gw") != 2 {
			t.Fatalf("gateway got %d items, want 2", s.count("gw"))
		}
		cancel()
		ls.wait()
	})
}

// TestCommitterMarksInPollOrder: a later poll that finishes first is not
// marked before an earlier one.
func TestCommitterMarksInPollOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var marked []int64
		c := newCommitter(4, newMetrics(prometheus.NewRegistry()), func(o map[string]map[int32]kgo.EpochOffset) {
			mu.Lock()
			marked = append(marked, o["t"][0].Offset)
			mu.Unlock()
		})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- c.Run(ctx) }()
		tks := make([]*ticket, 3)
		for i := range tks {
			tks[i] = newTicket(map[string]map[int32]kgo.EpochOffset{"t": {0: {Offset: int64(10 * (i + 1))}}})
			tks[i].hold()
			tks[i].release() // the builder's hold; one hold stays
			if err := c.add(ctx, tks[i]); err != nil {
				t.Fatal(err)
			}
		}
		tks[2].release()
		tks[1].release()
		synctest.Wait()
		mu.Lock()
		if len(marked) != 0 {
			t.Fatalf("marked %v before the first poll finished", marked)
		}
		mu.Unlock()
		tks[0].release()
		synctest.Wait()
		mu.Lock()
		if fmt.Sprint(marked) != "[10 20 30]" {
			t.Fatalf("marked %v, want [10 20 30]", marked)
		}
		mu.Unlock()
		cancel()
		<-done
	})
}

// value reads one counter or gauge.
func value(c prometheus.Collector) float64 {
	ch := make(chan prometheus.Metric, 1)
	c.Collect(ch)
	var m dto.Metric
	if err := (<-ch).Write(&m); err != nil {
		panic(err)
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}
