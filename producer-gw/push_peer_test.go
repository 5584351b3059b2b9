package main

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seqflow/seqflow/internal/delivery"
	"github.com/seqflow/seqflow/internal/peerauth"
)

// The peers of the push attack tests (push_auth_test.go): a sender holding
// a given ring, and what the tests read of the gateway's refusals.

// The refusal reasons the tests look for.
const (
	rejHandshake    = delivery.RejectHandshake
	rejBadMAC       = delivery.RejectBadMAC
	rejWrongGateway = delivery.RejectWrongGateway
	rejReplay       = delivery.RejectReplay
	rejIdle         = delivery.RejectIdle
	rejConnLimit    = delivery.RejectConnLimit
)

// fixedRegistry names one address for every gateway.
type fixedRegistry string

func (r fixedRegistry) Register(context.Context, string, string, time.Duration) error { return nil }
func (r fixedRegistry) Deregister(context.Context, string, string) error              { return nil }
func (r fixedRegistry) Lookup(context.Context, string) (string, error)                { return string(r), nil }

// tcpPeer is a TCP sender holding ring that dials addr for any gateway.
func tcpPeer(t *testing.T, ring *peerauth.Keyring, addr string) delivery.Sender {
	s := delivery.NewTCPSender(fixedRegistry(addr), ring, delivery.TCPSenderOptions{})
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// redisPeer is a pub/sub sender holding ring.
func redisPeer(t *testing.T, gw *testGW, ring *peerauth.Keyring) delivery.Sender {
	s := delivery.NewRedisSender(gw.g.rdb, ring, delivery.RedisSenderOptions{})
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// ringOf is the gateway's own ring: what a legitimate peer holds.
func ringOf(gw *testGW) *peerauth.Keyring { return gw.g.cfg.PeerKeys }

// strangerRing holds a key under the legitimate ring's signing key ID (key
// IDs are no secret) but another secret.
func strangerRing(t *testing.T, gw *testGW) *peerauth.Keyring {
	k, err := peerauth.Parse(peerauth.NewEntry(ringOf(gw).SigningID()))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// registerAt writes a registry entry, signed by ring, naming addr as
// gateway id's push address.
func registerAt(t *testing.T, gw *testGW, ring *peerauth.Keyring, id, addr string) {
	if err := delivery.NewRedisRegistry(gw.g.rdb, ring).Register(context.Background(), id, addr, time.Minute); err != nil {
		t.Fatal(err)
	}
}

// forgedRegistry writes gw's registry entry signed by a stranger's ring.
func forgedRegistry(t *testing.T, gw *testGW) func(ctx context.Context, addr string) error {
	reg := delivery.NewRedisRegistry(gw.g.rdb, strangerRing(t, gw))
	return func(ctx context.Context, addr string) error {
		return reg.Register(ctx, gw.g.cfg.GatewayID, addr, time.Minute)
	}
}

// handshakeBytes is how many bytes a sender writes in its handshake with
// gateway id before its first frame.
func handshakeBytes(gw *testGW, id string) int {
	return 4 + 1 + 1 + len(ringOf(gw).SigningID()) + 1 + len(id) + 16 + peerauth.MACSize
}

// rejections is how many push connections or messages gw refused over
// transport for reason.
func rejections(gw *testGW, transport, reason string) float64 {
	return testutil.ToFloat64(gw.g.m.pushRejected.WithLabelValues(transport, reason))
}
