package presence

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/seqflow/seqflow/internal/testkit/stack"
)

func TestDevicesAgainstRedis(t *testing.T) {
	st := stack.Require(t, "redis")
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{st.RedisAddr}})
	defer rdb.Close()
	ctx := context.Background()
	d := NewDevices(rdb, time.Hour)
	u := "u-" + uuid.NewString()
	t0 := time.Now().Truncate(time.Second)
	iat := t0.Add(-time.Minute)
	if err := d.Seen(ctx, t0, Seen{u, "phone", "ios", iat}, Seen{u, "laptop", "desktop", iat}); err != nil {
		t.Fatal(err)
	}
	// Seen again without a platform: keeps it, moves last seen.
	if err := d.Seen(ctx, t0.Add(time.Second), Seen{u, "phone", "", iat}); err != nil {
		t.Fatal(err)
	}
	got, err := d.List(ctx, []string{u, "nobody-" + uuid.NewString()})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(got[u]) != 2 {
		t.Fatalf("list = %+v, want two devices of %s only", got, u)
	}
	if p := got[u][0]; p.DeviceID != "phone" || p.Platform != "ios" || !p.LastSeen.Equal(t0.Add(time.Second)) || !p.IssuedAt.Equal(iat) {
		t.Fatalf("first device = %+v, want phone (ios) last seen %v, most recent first", p, t0.Add(time.Second))
	}

	// A sign-out takes the device off the list and sets its cutoff; a later
	// one with an older cutoff does not lower it.
	k := DeviceKey{u, "phone"}
	if err := d.SignOut(ctx, k, t0.Unix()); err != nil {
		t.Fatal(err)
	}
	if err := d.SignOut(ctx, k, t0.Unix()-100); err != nil {
		t.Fatal(err)
	}
	cuts, err := d.Cutoffs(ctx, []DeviceKey{k, {u, "laptop"}})
	if err != nil || cuts[0] != t0.Unix() || cuts[1] != 0 {
		t.Fatalf("cutoffs = %v, %v; want [%d 0]", cuts, err, t0.Unix())
	}
	// A straggling refresh with the old token does not bring it back; a
	// token issued after the sign-out does.
	_ = d.Seen(ctx, t0.Add(2*time.Second), Seen{u, "phone", "ios", iat})
	if got, _ = d.List(ctx, []string{u}); len(got[u]) != 1 || got[u][0].DeviceID != "laptop" {
		t.Fatalf("after sign-out = %+v, want laptop only", got[u])
	}
	_ = d.Seen(ctx, t0.Add(3*time.Second), Seen{u, "phone", "ios", t0.Add(time.Second)})
	if got, _ = d.List(ctx, []string{u}); len(got[u]) != 2 || got[u][0].DeviceID != "phone" {
		t.Fatalf("after signing in again = %+v, want phone listed again", got[u])
	}
}

func TestSignalRoundTrip(t *testing.T) {
	for _, s := range []Signal{
		{Kind: SignalSignOut, UserID: "alice", DeviceID: "phone", Cutoff: 1700000000},
		{Kind: SignalReplace, UserID: "alice", ConnID: "c-1", GatewayID: "gw-a"},
	} {
		got, err := DecodeSignal(s.Encode())
		if err != nil || got != s {
			t.Fatalf("DecodeSignal(%q) = %+v, %v; want %+v", s.Encode(), got, err, s)
		}
	}
	for _, bad := range []string{"", "signout|alice", "signout|alice||1||", "replace|alice|||c-1|", "signout|alice|phone|x||", "other|alice|phone|1||", "signout||phone|1||"} {
		if s, err := DecodeSignal(bad); err == nil {
			t.Errorf("DecodeSignal(%q) = %+v, want an error", bad, s)
		}
	}
}
