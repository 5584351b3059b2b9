package main

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/semaphore"

	"github.com/seqflow/seqflow/internal/apierr"
	"github.com/seqflow/seqflow/internal/wire"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// errSyncBusy answers a sync or changes request that found no slot in
// time. It is retryable: the client retries after a backoff.
var errSyncBusy = apierr.New(imv1.ErrorCode_ERROR_CODE_UNAVAILABLE,
	"too many sync and changes requests in progress on this gateway (GATEWAY_SYNC_CONCURRENCY); retry after a backoff")

// syncSlots bounds the sync and changes requests reading the message
// store at once, gateway-wide: when many clients fill gaps together (a
// reconnect storm, a push path that lagged), their reads wait here, in
// arrival order, instead of piling onto PostgreSQL. A request waits at
// most wait for a slot, then is answered errSyncBusy. Pushes never take
// a slot. A nil *syncSlots bounds nothing.
type syncSlots struct {
	sem   *semaphore.Weighted
	wait  time.Duration
	inUse prometheus.Gauge
	shed  *prometheus.CounterVec // by op
}

func newSyncSlots(n int, wait time.Duration, m *metrics) *syncSlots {
	for _, op := range []string{wire.OpSync, wire.OpChanges} {
		m.syncShed.WithLabelValues(op) // exported at 0 from the start
	}
	return &syncSlots{sem: semaphore.NewWeighted(int64(n)), wait: wait, inUse: m.syncSlotsInUse, shed: m.syncShed}
}

// acquire takes a slot for a request of op, waiting at most s.wait (less
// if ctx ends first); without one it counts the request shed and returns
// errSyncBusy. A nil error must be paired with release.
func (s *syncSlots) acquire(ctx context.Context, op string) *apierr.Error {
	if s == nil {
		return nil
	}
	if !s.take(ctx) {
		s.shed.WithLabelValues(op).Inc()
		return errSyncBusy
	}
	s.inUse.Inc()
	return nil
}

// take waits for a slot: none at all when wait is 0.
func (s *syncSlots) take(ctx context.Context) bool {
	if s.sem.TryAcquire(1) {
		return true
	}
	if s.wait <= 0 {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, s.wait)
	defer cancel()
	return s.sem.Acquire(ctx, 1) == nil
}

// release gives back the slot of a successful acquire.
func (s *syncSlots) release() {
	if s == nil {
		return
	}
	s.inUse.Dec()
	s.sem.Release(1)
}
