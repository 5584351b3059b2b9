package client

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seqflow/seqflow/internal/testkit/clienttest"
	"github.com/seqflow/seqflow/internal/testkit/proc"
)

// pipeline wraps clienttest.Pipeline for this package's tests.
type pipeline struct {
	*clienttest.Pipeline
	t    *testing.T
	pool *pgxpool.Pool
}

func newPipeline(t *testing.T) *pipeline {
	cp := clienttest.Start(t)
	return &pipeline{Pipeline: cp, t: t, pool: cp.Pool}
}

type gateway struct {
	*clienttest.Gateway
	proc *proc.Proc
	url  string
}

func (p *pipeline) gateway(t *testing.T, name string, env ...string) *gateway {
	g := p.Gateway(t, name, env...)
	return &gateway{Gateway: g, proc: g.Proc, url: g.URL}
}

func freeAddr(t *testing.T) string { return clienttest.FreeAddr(t) }

func (p *pipeline) token(user, device string) string { return p.Token(p.t, user, device) }

// recorder collects what a client's app receives.
type recorder struct {
	mu     sync.Mutex
	events []Event
	wake   chan struct{}
}

func newRecorder() *recorder { return &recorder{wake: make(chan struct{}, 1)} }

func (r *recorder) add(e Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *recorder) snapshot() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.events...)
}

// waitFor waits until ok holds for the events received so far.
func (r *recorder) waitFor(t *testing.T, d time.Duration, what string, ok func([]Event) bool) []Event {
	t.Helper()
	deadline := time.After(d)
	for {
		evs := r.snapshot()
		if ok(evs) {
			return evs
		}
		select {
		case <-r.wake:
		case <-deadline:
			t.Fatalf("no %s within %v; got %d events", what, d, len(evs))
		}
	}
}

// running is a Client with its Run goroutine.
type running struct {
	*Client
	rec  *recorder
	stop func() error
}

// start runs a client for user/device against urls; the test's cleanup
// stops it.
func (p *pipeline) start(t *testing.T, user, device string, urls []string, tune func(*Options)) *running {
	t.Helper()
	rec := newRecorder()
	opts := Options{URLs: urls, Token: p.token(user, device), OnEvent: rec.add, MinBackoff: 50 * time.Millisecond,
		MaxBackoff: time.Second, AckTimeout: 3 * time.Second}
	if tune != nil {
		tune(&opts)
	}
	c, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			runErr = <-errc
			if errors.Is(runErr, context.Canceled) {
				runErr = nil
			}
		})
		return runErr
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("client %s/%s Run: %v", user, device, err)
		}
	})
	return &running{Client: c, rec: rec, stop: stop}
}

func user(prefix string) string { return clienttest.User(prefix) }

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
