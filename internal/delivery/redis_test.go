package delivery_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/seqflow/seqflow/internal/delivery"
	"github.com/seqflow/seqflow/internal/peerauth"
	"github.com/seqflow/seqflow/internal/testkit/deliverytest"
	"github.com/seqflow/seqflow/internal/testkit/stack"
)

// testKeys is the peer key ring of these tests' senders and receivers.
var testKeys = mustKeys(peerauth.NewEntry("test-1") + "," + peerauth.NewEntry("test-0"))

func mustKeys(ring string) *peerauth.Keyring {
	k, err := peerauth.Parse(ring)
	if err != nil {
		panic(err)
	}
	return k
}

func newRedis(t testing.TB) redis.UniversalClient {
	st := stack.Require(t, "redis")
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{st.RedisAddr}})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func TestRedisTransport(t *testing.T) {
	deliverytest.Run(t, func(t *testing.T) deliverytest.Transport {
		rdb := newRedis(t)
		s := delivery.NewRedisSender(rdb, testKeys, delivery.RedisSenderOptions{})
		t.Cleanup(func() { _ = s.Close() })
		return deliverytest.Transport{
			Sender:        s,
			Receiver:      delivery.NewRedisReceiver(rdb, testKeys, delivery.RedisReceiverOptions{}),
			MaxFrameBytes: delivery.DefaultMaxFrameBytes,
		}
	})
}
