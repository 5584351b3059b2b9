package main

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// groupWatch is a franz-go hook that remembers when the group coordinator
// last answered a JoinGroup, SyncGroup or Heartbeat.
//
// Why: GroupTransactSession.End, after committing the offsets, forces a
// heartbeat and waits for it, or for the partitions to be revoked or lost.
// When the coordinator's broker dies, the heartbeat loop gives up and the
// group wants to drop the partitions, but with BlockRebalanceOnPoll that
// waits for AllowRebalance, which runs only after End returns: End sits out
// its whole deadline (chaos runs: a kafka_txn_coordinator kill cost 10-40s
// this way after Kafka itself had failed over in 5-8s). A member that has
// not heard from its coordinator for a whole session timeout has been
// dropped from the group by then, so its offsets cannot commit: End is
// given up at once and the session is rebuilt (see endContext).
type groupWatch struct {
	lastOK atomic.Int64 // unix nanos of the last answer
}

var _ kgo.HookBrokerRead = (*groupWatch)(nil)

func newGroupWatch(now time.Time) *groupWatch {
	w := &groupWatch{}
	w.lastOK.Store(now.UnixNano())
	return w
}

// OnBrokerRead implements kgo.HookBrokerRead.
func (w *groupWatch) OnBrokerRead(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err != nil {
		return
	}
	switch kmsg.Key(key) {
	case kmsg.Heartbeat, kmsg.JoinGroup, kmsg.SyncGroup:
		w.lastOK.Store(time.Now().UnixNano())
	}
}

// silentFor says how long the coordinator has not answered as of now.
func (w *groupWatch) silentFor(now time.Time) time.Duration {
	return now.Sub(time.Unix(0, w.lastOK.Load()))
}

// endWatchEvery is how often a running End checks the group watch.
const endWatchEvery = 100 * time.Millisecond

// endSilence is how long the group coordinator may be silent before a
// running End is given up: half the session timeout, five heartbeat
// intervals (eventlog.HeartbeatInterval is a tenth of it). A whole session
// timeout, as before, was always too long: once the coordinator's broker
// is gone, the heartbeat has failed and the group session is lost, so End
// cannot commit; it only waits for the AllowRebalance that follows it. In
// a chaos run (7d056a8d, fault #2) End gave up 5.7 s after the kill, and
// the rebuilt session then waited 3.3 s more for Kafka to abort the old
// transaction, which it can as soon as a new coordinator is elected
// (about 4 s after the kill): giving up sooner overlaps the two. A
// coordinator that is only slow costs an aborted batch, retried by the
// rebuilt session as after any unknown outcome.
func endSilence(sessionTimeout time.Duration) time.Duration { return sessionTimeout / 2 }

// endContext is the context End runs under: it ends after the transaction
// timeout plus a session timeout (by then the coordinator has aborted the
// transaction itself, or a coordinator that moved has had time to answer),
// or as soon as the group coordinator has been silent for silence (see
// endSilence); stale then says the latter ended it.
func endContext(ctx context.Context, w *groupWatch, txnTimeout, sessionTimeout, silence time.Duration) (_ context.Context, cancel func(), stale func() bool) {
	ectx, cancelT := context.WithTimeout(ctx, txnTimeout+sessionTimeout)
	wctx, cancelW := context.WithCancelCause(ectx)
	done := make(chan struct{})
	var gaveUp atomic.Bool
	go func() {
		t := time.NewTicker(endWatchEvery)
		defer t.Stop()
		for {
			if w.silentFor(time.Now()) >= silence {
				gaveUp.Store(true)
				cancelW(errCoordinatorSilent)
				return
			}
			select {
			case <-done:
				return
			case <-wctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return wctx, func() { close(done); cancelW(nil); cancelT() }, gaveUp.Load
}
