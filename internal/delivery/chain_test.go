package delivery

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seqflow/seqflow/schemas/imv1"
)

// fakeReceiver is an in-process stand-in for a transport (this is a unit
// test of Fanin; the transports themselves are tested against Redis and
// TCP in TestChainTransport): it hands n batches to h from its own
// goroutine, then fails with err, or waits for ctx when err is nil.
type fakeReceiver struct {
	n   int
	err error
}

func (f fakeReceiver) Receive(ctx context.Context, gatewayID string, h Handler) error {
	for i := range f.n {
		h(&imv1.PushBatch{GatewayId: gatewayID, SentTsMs: int64(i)})
	}
	if f.err != nil {
		return f.err
	}
	<-ctx.Done()
	return ctx.Err()
}

// TestFaninOneHandlerAtATime: the batches of every receiver reach the
// handler, never two at once, and a cancel ends Receive with the cancel.
func TestFaninOneHandlerAtATime(t *testing.T) {
	var (
		inside, overlaps atomic.Int32
		mu               sync.Mutex
		got              = map[string]int{}
	)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Fanin(fakeReceiver{n: 500}, fakeReceiver{n: 500}, fakeReceiver{n: 500}).Receive(ctx, "gw-1", func(b *imv1.PushBatch) {
			if inside.Add(1) > 1 {
				overlaps.Add(1)
			}
			time.Sleep(time.Microsecond)
			mu.Lock()
			got[b.GatewayId]++
			mu.Unlock()
			inside.Add(-1)
		})
	}()
	deadline := time.After(10 * time.Second)
	for {
		mu.Lock()
		n := got["gw-1"]
		mu.Unlock()
		if n == 1500 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("Receive returned %v after %d of 1500 batches", err, n)
		case <-deadline:
			t.Fatalf("only %d of 1500 batches arrived", n)
		case <-time.After(5 * time.Millisecond):
		}
	}
	if n := overlaps.Load(); n > 0 {
		t.Fatalf("the handler ran concurrently %d times", n)
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Receive after cancel = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Receive did not return after its context ended")
	}
}

// TestFaninStopsOnAFailure: when one transport fails on its own (a push
// listener that cannot listen), Receive stops the others and returns that
// failure, so the gateway stops instead of running half deaf.
func TestFaninStopsOnAFailure(t *testing.T) {
	boom := errors.New("listen for push streams: address in use")
	done := make(chan error, 1)
	go func() {
		done <- Fanin(fakeReceiver{}, fakeReceiver{n: 3, err: boom}).Receive(context.Background(), "gw-1", func(*imv1.PushBatch) {})
	}()
	select {
	case err := <-done:
		if !errors.Is(err, boom) {
			t.Fatalf("Receive = %v, want %v", err, boom)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Receive kept running after a receiver failed")
	}
}
