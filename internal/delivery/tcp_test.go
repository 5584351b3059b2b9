package delivery_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"

	"github.com/seqflow/seqflow/internal/delivery"
	"github.com/seqflow/seqflow/internal/delivery/deliverytest"
	"github.com/seqflow/seqflow/schemas/imv1"
)

func TestTCPTransport(t *testing.T) {
	deliverytest.Run(t, func(t *testing.T) deliverytest.Transport {
		reg := delivery.NewRedisRegistry(newRedis(t))
		s := delivery.NewTCPSender(reg, delivery.TCPSenderOptions{})
		t.Cleanup(func() { _ = s.Close() })
		return deliverytest.Transport{
			Sender:        s,
			Receiver:      delivery.NewTCPReceiver(reg, delivery.TCPReceiverOptions{}),
			MaxFrameBytes: delivery.DefaultMaxFrameBytes,
		}
	})
}

// TestChainTransport runs the suite for a pusher that prefers the stream
// and falls back to pub/sub, against gateways of either kind.
func TestChainTransport(t *testing.T) {
	for _, kind := range []string{"tcp-gateway", "redis-gateway"} {
		t.Run(kind, func(t *testing.T) {
			deliverytest.Run(t, func(t *testing.T) deliverytest.Transport {
				rdb := newRedis(t)
				reg := delivery.NewRedisRegistry(rdb)
				s := delivery.NewChainSender(delivery.NewTCPSender(reg, delivery.TCPSenderOptions{}), delivery.NewRedisSender(rdb, delivery.RedisSenderOptions{}))
				t.Cleanup(func() { _ = s.Close() })
				var r delivery.Receiver = delivery.NewTCPReceiver(reg, delivery.TCPReceiverOptions{})
				if kind == "redis-gateway" {
					r = delivery.NewRedisReceiver(rdb, delivery.RedisReceiverOptions{})
				}
				return deliverytest.Transport{Sender: s, Receiver: r, MaxFrameBytes: delivery.DefaultMaxFrameBytes}
			})
		})
	}
}

// TestTCPSenderLooksForTheReceiverBeforeEncoding: to a gateway without a
// TCP receiver, Send answers ErrNoReceiver before it encodes anything, so
// a ChainSender's fallback is the batch's only encoding. A batch too large
// for one frame shows the order: refused as too large only when a receiver
// exists.
func TestTCPSenderLooksForTheReceiverBeforeEncoding(t *testing.T) {
	reg := delivery.NewRedisRegistry(newRedis(t))
	s := delivery.NewTCPSender(reg, delivery.TCPSenderOptions{MaxFrameBytes: 64})
	t.Cleanup(func() { _ = s.Close() })
	huge := &imv1.PushBatch{GatewayId: "gw-" + uuid.NewString(), Items: []*imv1.PushItem{{Item: &imv1.PushItem_Event{Event: &imv1.SequencedEvent{
		SessionId: "s", Seq: 1, Payload: &imv1.SequencedEvent_Message{Message: &imv1.MessageContent{Type: "text", Body: make([]byte, 1000)}},
	}}}}}
	err := s.Send(context.Background(), huge)
	if !errors.Is(err, delivery.ErrNoReceiver) {
		t.Fatalf("send to an unregistered gateway: %v, want ErrNoReceiver", err)
	}
	if errors.Is(err, delivery.ErrTooLarge) {
		t.Fatalf("the batch was encoded before the receiver was looked for: %v", err)
	}
}
