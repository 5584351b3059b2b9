package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestGroupWatchCountsOnlyCoordinatorAnswers(t *testing.T) {
	long := time.Hour
	for _, tc := range []struct {
		name  string
		key   kmsg.Key
		err   error
		fresh bool
	}{
		{"heartbeat", kmsg.Heartbeat, nil, true},
		{"join", kmsg.JoinGroup, nil, true},
		{"sync", kmsg.SyncGroup, nil, true},
		{"failed heartbeat read", kmsg.Heartbeat, errors.New("EOF"), false},
		{"produce", kmsg.Produce, nil, false},
		{"end txn", kmsg.EndTxn, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newGroupWatch(time.Now().Add(-long))
			w.OnBrokerRead(kgo.BrokerMetadata{}, int16(tc.key), 10, 0, 0, tc.err)
			if got := w.silentFor(time.Now()) < long/2; got != tc.fresh {
				t.Fatalf("after a %s read (err %v): fresh = %v, want %v", tc.name, tc.err, got, tc.fresh)
			}
		})
	}
}

func TestEndContextGivesUpOnASilentCoordinator(t *testing.T) {
	w := newGroupWatch(time.Now().Add(-time.Minute))
	ctx, cancel, silent := endContext(context.Background(), w, time.Hour, 10*time.Second, 5*time.Second)
	defer cancel()
	select {
	case <-ctx.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("End's context still open although the coordinator was silent for a minute")
	}
	if !silent() {
		t.Fatal("silent() = false for a context ended by the watch")
	}
	if !errors.Is(context.Cause(ctx), errCoordinatorSilent) {
		t.Fatalf("cause = %v, want errCoordinatorSilent", context.Cause(ctx))
	}
}

func TestEndContextKeepsAnsweringCoordinator(t *testing.T) {
	w := newGroupWatch(time.Now())
	stop := make(chan struct{})
	defer close(stop)
	go func() { // a coordinator answering heartbeats every 20ms
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
				w.OnBrokerRead(kgo.BrokerMetadata{}, int16(kmsg.Heartbeat), 10, 0, 0, nil)
			}
		}
	}()
	ctx, cancel, silent := endContext(context.Background(), w, time.Second, 2*time.Second, 2*time.Second)
	defer cancel()
	<-ctx.Done() // only the deadline (3s) can end it: 2s of silence would take a starved box
	if silent() {
		t.Fatal("silent() = true although the coordinator kept answering")
	}
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("ctx.Err() = %v, want the deadline's DeadlineExceeded", ctx.Err())
	}
}

func TestEndContextCancelStopsTheWatch(t *testing.T) {
	w := newGroupWatch(time.Now())
	ctx, cancel, silent := endContext(context.Background(), w, time.Hour, time.Hour, time.Hour)
	cancel()
	<-ctx.Done()
	if silent() {
		t.Fatal("silent() = true after a plain cancel")
	}
}

func TestRebuildDelay(t *testing.T) {
	if d := rebuildDelay(5 * time.Minute); d != 100*time.Millisecond {
		t.Errorf("after a long-lived session: %s, want 100ms", d)
	}
	if d := rebuildDelay(2 * time.Second); d != time.Second {
		t.Errorf("after a session that failed at once: %s, want 1s", d)
	}
}

// TestStopGrace: a stop leaves the batch context alive for the grace, then
// cancels it; releasing it cancels at once; values (trace spans) pass.
func TestStopGrace(t *testing.T) {
	type key struct{}
	t.Run("lives through the grace", func(t *testing.T) {
		ctx, stop := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
		work, release := stopGrace(ctx, time.Hour)
		defer release()
		stop()
		time.Sleep(20 * time.Millisecond) // the AfterFunc has run by now
		if err := work.Err(); err != nil {
			t.Fatalf("batch context ended %v after the stop, want alive for the grace", err)
		}
		if work.Value(key{}) != "v" {
			t.Error("batch context lost the values of its parent")
		}
		release()
		if work.Err() == nil {
			t.Error("release left the batch context alive")
		}
	})
	t.Run("ends after the grace", func(t *testing.T) {
		ctx, stop := context.WithCancel(context.Background())
		work, release := stopGrace(ctx, 10*time.Millisecond)
		defer release()
		stop()
		select {
		case <-work.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("batch context still alive long after the grace")
		}
	})
	t.Run("no stop, no end", func(t *testing.T) {
		work, release := stopGrace(context.Background(), time.Millisecond)
		time.Sleep(20 * time.Millisecond)
		if work.Err() != nil {
			t.Fatal("batch context ended without a stop")
		}
		release()
	})
}
