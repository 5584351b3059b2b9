package presence

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/seqflow/seqflow/internal/testkit/stack"
)

func TestPresenceAgainstRedis(t *testing.T) {
	st := stack.Require(t, "redis")
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{st.RedisAddr}})
	defer rdb.Close()
	ctx := context.Background()
	s := New(rdb, time.Minute)
	u1, u2 := "u-"+uuid.NewString(), "u-"+uuid.NewString()
	c1 := Conn{UserID: u1, DeviceID: "phone", ConnID: "c1", GatewayID: "gw-a"}
	c2 := Conn{UserID: u1, DeviceID: "laptop", ConnID: "c2", GatewayID: "gw-b"}
	if err := s.Put(ctx, c1, c2); err != nil {
		t.Fatal(err)
	}
	got, err := s.Lookup(ctx, []string{u1, u2})
	if err != nil {
		t.Fatal(err)
	}
	if len(got[u1]) != 2 || len(got[u2]) != 0 {
		t.Fatalf("lookup = %+v, want two conns of u1 and none of u2", got)
	}
	if err := s.Remove(ctx, c1); err != nil {
		t.Fatal(err)
	}
	got, _ = s.Lookup(ctx, []string{u1})
	if len(got[u1]) != 1 || got[u1][0] != c2 {
		t.Fatalf("after remove = %+v, want only %+v", got[u1], c2)
	}
	// A connection whose refresh stopped is ignored once it expires.
	s.now = func() time.Time { return time.Now().Add(2 * time.Minute) }
	if got, _ = s.Lookup(ctx, []string{u1}); len(got[u1]) != 0 {
		t.Fatalf("expired conn still listed: %+v", got[u1])
	}
}
