package delivery

import (
	"context"
	"errors"
	"sync"

	"github.com/seqflow/seqflow/schemas/imv1"
)

// ChainSender tries its senders in order for each batch and moves to the
// next only when one answers ErrNoReceiver, so gateways can move from one
// transport to another one by one: with NewChainSender(tcp, redis), a
// gateway that registered a stream address gets the stream, the others
// pub/sub.
type ChainSender struct{ senders []Sender }

var _ Sender = (*ChainSender)(nil)

// NewChainSender returns a sender over senders, tried in order.
func NewChainSender(senders ...Sender) *ChainSender { return &ChainSender{senders: senders} }

// Send hands b to the first sender that has a receiver for its gateway. It
// returns the first error that is not ErrNoReceiver, or ErrNoReceiver when
// no sender had a receiver.
func (c *ChainSender) Send(ctx context.Context, b *imv1.PushBatch) error {
	var err error
	for _, s := range c.senders {
		if err = s.Send(ctx, b); err == nil || !errors.Is(err, ErrNoReceiver) {
			return err
		}
	}
	return err
}

// Close closes every sender and returns their errors joined.
func (c *ChainSender) Close() error {
	var errs []error
	for _, s := range c.senders {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}

// Fanin is the receiving side of a chain: it runs every receiver in rs side
// by side for one gateway and hands the batches of all of them to one
// handler, one batch at a time. Batches of one transport keep their order;
// between transports there is none (a pusher uses one transport per
// gateway at a time, and clients fill gaps by seq).
func Fanin(rs ...Receiver) Receiver { return fanin(rs) }

type fanin []Receiver

// Receive runs every receiver until ctx ends, or until one of them returns
// an error of its own; then it stops the others and returns that error.
func (f fanin) Receive(ctx context.Context, gatewayID string, h Handler) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for _, r := range f {
		wg.Go(func() {
			err := r.Receive(ctx, gatewayID, func(b *imv1.PushBatch) {
				mu.Lock()
				defer mu.Unlock()
				h(b)
			})
			if err != nil && ctx.Err() == nil {
				cancel(err)
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}
