package delivery_test

import (
	"testing"

	"github.com/seqflow/seqflow/internal/delivery"
	"github.com/seqflow/seqflow/internal/delivery/deliverytest"
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
