package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqflow/seqflow/internal/peerauth"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// Channel is the Redis pub/sub channel of a gateway's batches. The hash tag
// puts it on one shard of a Redis Cluster, where it travels by sharded
// pub/sub (SPUBLISH/SSUBSCRIBE) instead of being broadcast to every node.
func Channel(gatewayID string) string { return "seqflow:push:{" + gatewayID + "}" }

// RedisSenderOptions tune a RedisSender. Zero values take the defaults.
type RedisSenderOptions struct {
	// MaxFrameBytes bounds one published message, default
	// DefaultMaxFrameBytes; larger batches are split by items.
	MaxFrameBytes int
}

// RedisSender publishes batches with SPUBLISH to Channel(gateway_id).
// Redis decouples the pusher from the gateway: a slow gateway backs up its
// own subscription buffer in Redis (and is disconnected by Redis at
// client-output-buffer-limit), never the publisher. Safe for concurrent use.
//
// Every message is sealed with a MAC of the ring's signing key, the
// gateway ID, a timestamp and a counter (auth.go), so the gateway can tell
// a peer's batch from a forged or replayed one.
type RedisSender struct {
	rdb    redis.UniversalClient
	seal   *sealer
	max    int
	closed atomic.Bool
}

var _ Sender = (*RedisSender)(nil)

// NewRedisSender returns a sender over rdb that seals with keys. It does
// not own rdb: Close leaves it open.
func NewRedisSender(rdb redis.UniversalClient, keys *peerauth.Keyring, opts RedisSenderOptions) *RedisSender {
	if opts.MaxFrameBytes <= 0 {
		opts.MaxFrameBytes = DefaultMaxFrameBytes
	}
	return &RedisSender{rdb: rdb, seal: newSealer(keys), max: opts.MaxFrameBytes}
}

// Send publishes b, split into frames of at most MaxFrameBytes, in one
// pipeline. It returns a *SendError wrapping ErrNoReceiver when no
// subscriber took the first frame (the gateway is not listening), and
// ctx's error when Redis did not answer in time. Frames of one Send arrive
// in order; so do the batches of sequential Sends to one gateway.
func (s *RedisSender) Send(ctx context.Context, b *imv1.PushBatch) error {
	if s.closed.Load() {
		return &SendError{GatewayID: b.GetGatewayId(), Err: ErrClosed}
	}
	if b.GetGatewayId() == "" {
		return &SendError{Err: errors.New("batch has no gateway_id")}
	}
	frames, err := encodeBatch(b, s.max)
	if err != nil {
		return &SendError{GatewayID: b.GatewayId, Err: err}
	}
	for i, f := range frames {
		if frames[i], err = s.seal.seal(b.GatewayId, f); err != nil {
			return &SendError{GatewayID: b.GatewayId, Err: err}
		}
	}
	ch := Channel(b.GatewayId)
	cmds := make([]*redis.IntCmd, len(frames))
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, f := range frames {
			cmds[i] = p.SPublish(ctx, ch, f)
		}
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return &SendError{GatewayID: b.GatewayId, Err: err}
	}
	if cmds[0].Val() == 0 {
		return &SendError{GatewayID: b.GatewayId, Err: ErrNoReceiver}
	}
	return nil
}

// Close makes later Sends fail with ErrClosed.
func (s *RedisSender) Close() error {
	s.closed.Store(true)
	return nil
}

// RedisReceiverOptions tune a RedisReceiver. Zero values take the defaults.
type RedisReceiverOptions struct {
	// Log receives undecodable frames and reconnects; default discards.
	Log *slog.Logger
	// OnBadBatch, when set, is called for every authenticated frame that
	// fails to decode (for the gateway's metrics).
	OnBadBatch func(err error)
	// OnRejected, when set, is told of every message dropped because it is
	// not sealed by a key of the ring for this gateway, is stale or is a
	// replay.
	OnRejected RejectFunc
	// OnSubscribed, when set, is called each time Redis confirms the
	// subscription (at start and after every resubscribe), so a gateway can
	// hold off accepting clients until batches can reach it.
	OnSubscribed func()
}

// RedisReceiver subscribes to Channel(gatewayID) with SSUBSCRIBE.
type RedisReceiver struct {
	rdb  redis.UniversalClient
	keys *peerauth.Keyring
	opts RedisReceiverOptions
}

var _ Receiver = (*RedisReceiver)(nil)

// NewRedisReceiver returns a receiver over rdb that accepts only messages
// sealed by a key of keys. It does not own rdb.
func NewRedisReceiver(rdb redis.UniversalClient, keys *peerauth.Keyring, opts RedisReceiverOptions) *RedisReceiver {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	return &RedisReceiver{rdb: rdb, keys: keys, opts: opts}
}

// Receive subscribes and calls h for every batch addressed to gatewayID, in
// publish order, from one goroutine, until ctx ends; then it returns
// ctx.Err(). Batches published while the subscription is down (before it
// is confirmed, or during a reconnect, which go-redis performs by itself)
// are lost, by design of pub/sub: the clients' sync recovers them. h must
// return quickly; while it runs, Redis buffers further batches.
func (r *RedisReceiver) Receive(ctx context.Context, gatewayID string, h Handler) error {
	if gatewayID == "" {
		return errors.New("receive push batches: empty gateway id")
	}
	ps := r.rdb.SSubscribe(ctx, Channel(gatewayID))
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer func() {
		stop()
		_ = ps.Close()
	}()
	backoff := 50 * time.Millisecond
	open := newOpener(r.keys, gatewayID)
	for {
		msg, err := ps.Receive(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			r.opts.Log.Warn("push subscription interrupted; resubscribing", "gateway_id", gatewayID, "err", err)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		m, ok := msg.(*redis.Message)
		if !ok {
			backoff = 50 * time.Millisecond // *redis.Subscription or *redis.Pong: the link is up
			if _, sub := msg.(*redis.Subscription); sub && r.opts.OnSubscribed != nil {
				r.opts.OnSubscribed()
			}
			continue
		}
		payload, err := open.open([]byte(m.Payload))
		if err != nil {
			reason := rejectReason(err)
			r.opts.Log.Warn("refusing a push message", "gateway_id", gatewayID, "reason", reason, "err", err)
			if r.opts.OnRejected != nil {
				r.opts.OnRejected(reason, err)
			}
			continue
		}
		b, err := decodeBatch(payload, gatewayID)
		if err != nil {
			r.opts.Log.Warn("skipping push frame", "gateway_id", gatewayID, "err", err)
			if r.opts.OnBadBatch != nil {
				r.opts.OnBadBatch(err)
			}
			continue
		}
		h(b)
	}
}
