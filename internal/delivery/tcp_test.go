package delivery_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/seqflow/seqflow/internal/delivery"
	"github.com/seqflow/seqflow/internal/testkit/deliverytest"
	"github.com/seqflow/seqflow/schemas/imv1"
)

func TestTCPTransport(t *testing.T) {
	deliverytest.Run(t, func(t *testing.T) deliverytest.Transport {
		reg := delivery.NewRedisRegistry(newRedis(t), testKeys)
		s := delivery.NewTCPSender(reg, testKeys, delivery.TCPSenderOptions{})
		t.Cleanup(func() { _ = s.Close() })
		return deliverytest.Transport{
			Sender:        s,
			Receiver:      delivery.NewTCPReceiver(reg, testKeys, delivery.TCPReceiverOptions{}),
			MaxFrameBytes: delivery.DefaultMaxFrameBytes,
		}
	})
}

// TestChainTransport runs the suite for a pusher that prefers the stream
// and falls back to pub/sub, against gateways of either kind and against
// one that serves both (Fanin, what producer-gw runs); and for a pusher
// that only publishes (PUSHER_TRANSPORT=redis) against the latter.
func TestChainTransport(t *testing.T) {
	for _, kind := range []string{"tcp-gateway", "redis-gateway", "both-gateway", "redis-pusher-both-gateway"} {
		t.Run(kind, func(t *testing.T) {
			deliverytest.Run(t, func(t *testing.T) deliverytest.Transport {
				rdb := newRedis(t)
				reg := delivery.NewRedisRegistry(rdb, testKeys)
				var s delivery.Sender = delivery.NewChainSender(delivery.NewTCPSender(reg, testKeys, delivery.TCPSenderOptions{}), delivery.NewRedisSender(rdb, testKeys, delivery.RedisSenderOptions{}))
				if kind == "redis-pusher-both-gateway" {
					s = delivery.NewRedisSender(rdb, testKeys, delivery.RedisSenderOptions{})
				}
				t.Cleanup(func() { _ = s.Close() })
				tcp := delivery.NewTCPReceiver(reg, testKeys, delivery.TCPReceiverOptions{})
				redis := delivery.NewRedisReceiver(rdb, testKeys, delivery.RedisReceiverOptions{})
				r := map[string]delivery.Receiver{"tcp-gateway": tcp, "redis-gateway": redis}[kind]
				if r == nil {
					r = delivery.Fanin(tcp, redis)
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
	reg := delivery.NewRedisRegistry(newRedis(t), testKeys)
	s := delivery.NewTCPSender(reg, testKeys, delivery.TCPSenderOptions{MaxFrameBytes: 64})
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

// TestTCPStaleAddressIsLeft: a registry entry left by a dead gateway may
// name a port that another gateway listens on now. That gateway hangs up
// on the first frame not addressed to it, and the sender looks the address
// up again, so the gateway it wants is reached once it registers, even
// with the sender's address cache far longer than the test.
func TestTCPStaleAddressIsLeft(t *testing.T) {
	rdb := newRedis(t)
	reg := delivery.NewRedisRegistry(rdb, testKeys)
	s := delivery.NewTCPSender(reg, testKeys, delivery.TCPSenderOptions{AddrTTL: time.Hour})
	t.Cleanup(func() { _ = s.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	gwA, gwB := "gw-"+uuid.NewString()[:8], "gw-"+uuid.NewString()[:8]

	var mu sync.Mutex
	got := map[string]int{}
	handler := func(gw string) delivery.Handler {
		return func(*imv1.PushBatch) {
			mu.Lock()
			got[gw]++
			mu.Unlock()
		}
	}
	count := func(gw string) int {
		mu.Lock()
		defer mu.Unlock()
		return got[gw]
	}
	addrB := make(chan string, 1)
	go func() {
		_ = delivery.NewTCPReceiver(reg, testKeys, delivery.TCPReceiverOptions{OnRegistered: func(a string) { addrB <- a }}).Receive(ctx, gwB, handler(gwB))
	}()
	var stale string
	select {
	case stale = <-addrB:
	case <-time.After(10 * time.Second):
		t.Fatal("gateway B never registered")
	}
	// A died; its entry names the port B has now.
	if err := reg.Register(ctx, gwA, stale, time.Minute); err != nil {
		t.Fatal(err)
	}
	batch := func(i int) *imv1.PushBatch {
		return &imv1.PushBatch{GatewayId: gwA, Items: []*imv1.PushItem{{Item: &imv1.PushItem_Event{Event: &imv1.SequencedEvent{SessionId: "s", Seq: int64(i + 1)}}}}}
	}
	sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
	_ = s.Send(sctx, batch(0)) // reaches B's listener, which hangs up
	scancel()
	// A comes back on a port of its own.
	go func() {
		_ = delivery.NewTCPReceiver(reg, testKeys, delivery.TCPReceiverOptions{}).Receive(ctx, gwA, handler(gwA))
	}()
	deadline := time.Now().Add(10 * time.Second)
	for i := 1; count(gwA) == 0; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("gateway A got nothing in 10 s; B hung up? B's handler got %d", count(gwB))
		}
		sctx, scancel := context.WithTimeout(ctx, time.Second)
		_ = s.Send(sctx, batch(i)) // errors while A is not registered yet are expected
		scancel()
		time.Sleep(20 * time.Millisecond)
	}
	if n := count(gwB); n != 0 {
		t.Fatalf("gateway B's handler got %d batches addressed to A", n)
	}
}
