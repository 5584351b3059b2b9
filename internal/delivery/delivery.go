// Package delivery is the pusher→gateway transport: the pusher hands each
// gateway one PushBatch per poll batch; the gateway writes the items to the
// named connections.
//
// Two transports implement Sender and Receiver, and both pass the
// conformance suite in deliverytest:
//   - Redis sharded pub/sub (NewRedisSender, NewRedisReceiver): channel
//     Channel(gateway_id) = "seqflow:push:{gateway_id}", value a
//     proto-encoded PushBatch;
//   - a direct TCP stream (NewTCPSender, NewTCPReceiver): the gateway
//     listens and registers its address in a Registry (NewRedisRegistry:
//     key "seqflow:gateway:{gateway_id}:push"); frames are a 4-byte
//     big-endian length and a proto-encoded PushBatch.
//
// NewChainSender(tcp, redis) reaches each gateway by whichever transport it
// serves. Batches larger than DefaultMaxFrameBytes are split by items.
//
// Every peer proves a key of a shared ring (internal/peerauth, HMAC-SHA256:
// chosen over mTLS for one secret to deploy and claims a test can attack):
// a stream opens with a mutual challenge–response bound to the gateway ID
// and carries a MAC on every frame; a pub/sub message is sealed with the
// gateway ID, a timestamp and a counter; registry entries are signed
// (auth.go, registry.go). What fails is refused before a Handler sees it.
package delivery

import (
	"context"

	"github.com/seqflow/seqflow/schemas/imv1"
)

// Sender hands batches to gateways.
//
// Send must not block longer than ctx allows: when a gateway is slow or
// gone, Send returns an error (or drops the batch and counts it) rather than
// stall the partition. A nil error means the batch was handed to the
// transport, not that it reached a socket: completeness comes from clients'
// gap detection and sync, never from the push path.
type Sender interface {
	Send(ctx context.Context, b *imv1.PushBatch) error
	Close() error
}

// Handler receives a gateway's batches. It must return quickly; a gateway
// queues per connection and drops (closing the slow connection) rather than
// block the transport.
type Handler func(b *imv1.PushBatch)

// Receiver delivers the batches addressed to one gateway to h until ctx
// ends.
type Receiver interface {
	Receive(ctx context.Context, gatewayID string, h Handler) error
}
