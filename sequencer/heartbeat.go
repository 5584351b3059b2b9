package main

import (
	"context"
	"errors"
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

// errCoordinatorSilent ends a transaction whose group coordinator has not
// answered for a whole session timeout; the session is rebuilt.
var errCoordinatorSilent = errors.New("group coordinator silent for a session timeout; outcome unknown")

// endWatchEvery is how often a running End checks the group watch.
const endWatchEvery = 100 * time.Millisecond

// endContext is the context End runs under: it ends after the transaction
// timeout plus a session timeout (by then the coordinator has aborted the
// transaction itself, or a coordinator that moved has had time to answer),
// or as soon as the group coordinator has been silent for a whole session
// timeout; stale then says the latter ended it.
func endContext(ctx context.Context, w *groupWatch, txnTimeout, sessionTimeout time.Duration) (_ context.Context, cancel func(), stale func() bool) {
	ectx, cancelT := context.WithTimeout(ctx, txnTimeout+sessionTimeout)
	wctx, cancelW := context.WithCancelCause(ectx)
	done := make(chan struct{})
	var gaveUp atomic.Bool
	go func() {
		t := time.NewTicker(endWatchEvery)
		defer t.Stop()
		for {
			if w.silentFor(time.Now()) >= sessionTimeout {
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
