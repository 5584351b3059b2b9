package delivery

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/seqflow/seqflow/internal/peerauth"
)

// TestRegistryEntry: only an entry signed by a key of the ring, for this
// gateway, and not expired names an address; every other one is refused
// as no receiver (so a ChainSender falls back to pub/sub) and, when it is
// forged, as ErrPeerAuth.
func TestRegistryEntry(t *testing.T) {
	k := ring(t, peerauth.NewEntry("k"))
	r := &RedisRegistry{keys: k}
	now := time.Now()
	good := r.signEntry("gw", "10.0.0.1:9105", now.Add(time.Minute))
	if addr, err := r.verifyEntry("gw", good, now); err != nil || addr != "10.0.0.1:9105" {
		t.Fatalf("good entry: %q, %v", addr, err)
	}
	other := (&RedisRegistry{keys: ring(t, peerauth.NewEntry("k"))}).signEntry("gw", "10.0.0.9:9105", now.Add(time.Minute))
	cases := []struct {
		name, gw, v string
		at          time.Time
		forged      bool
	}{
		{"unsigned, as entries were", "gw", "10.0.0.9:9105", now, true},
		{"signed by another ring", "gw", other, now, true},
		{"another gateway's entry", "gw2", good, now, true},
		{"address rewritten", "gw", strings.Replace(good, "10.0.0.1", "10.0.0.9", 1), now, true},
		{"unknown key", "gw", strings.Replace(good, ";k;", ";j;", 1), now, true},
		{"expired", "gw", good, now.Add(2 * time.Minute), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			addr, err := r.verifyEntry(c.gw, c.v, c.at)
			if !errors.Is(err, ErrNoReceiver) || errors.Is(err, ErrPeerAuth) != c.forged {
				t.Fatalf("verify: %q, %v; want ErrNoReceiver, ErrPeerAuth %v", addr, err, c.forged)
			}
		})
	}
}
