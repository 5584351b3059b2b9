package presence

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/seqflow/seqflow/internal/testkit/stack"
)

func TestSettingsAgainstRedis(t *testing.T) {
	st := stack.Require(t, "redis")
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{st.RedisAddr}})
	defer rdb.Close()
	ctx := context.Background()
	s := NewSettings(rdb)
	a, b := "u-"+uuid.NewString(), "u-"+uuid.NewString()
	check := func(want map[string]bool) {
		t.Helper()
		got, err := s.ReadReceiptsOff(ctx, []string{a, b})
		if err != nil || len(got) != len(want) || got[a] != want[a] || got[b] != want[b] {
			t.Fatalf("off = %v, %v; want %v", got, err, want)
		}
	}
	check(map[string]bool{})
	if err := s.SetReadReceipts(ctx, a, false); err != nil {
		t.Fatal(err)
	}
	check(map[string]bool{a: true})
	// No expiry: a privacy setting does not turn itself back on.
	if ttl := rdb.TTL(ctx, settingsKey(a)).Val(); ttl != -1 {
		t.Fatalf("ttl = %v, want none", ttl)
	}
	if err := s.SetReadReceipts(ctx, a, true); err != nil {
		t.Fatal(err)
	}
	check(map[string]bool{})
	if n := rdb.Exists(ctx, settingsKey(a)).Val(); n != 0 {
		t.Fatalf("key left at the default")
	}
}
