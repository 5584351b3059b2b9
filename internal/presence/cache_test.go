package presence

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/seqflow/seqflow/internal/testkit/stack"
)

// runCache starts c.Run and waits until it is subscribed.
func runCache(t *testing.T, c *Cache) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != context.Canceled {
			t.Errorf("Run = %v, want context.Canceled", err)
		}
	})
	eventually(t, "cache subscribed", c.Subscribed)
}

func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5 s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func conns(t *testing.T, c *Cache, user string) []Conn {
	t.Helper()
	got, err := c.Lookup(context.Background(), []string{user})
	if err != nil {
		t.Fatal(err)
	}
	return got[user]
}

func newRedis(t *testing.T) redis.UniversalClient {
	st := stack.Require(t, "redis")
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{st.RedisAddr}})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// TestCacheFollowsAnnouncements: entries, offline ones included, are used
// until the user is announced, and a connect or a close is seen by the next
// lookup after its announcement reached the cache.
func TestCacheFollowsAnnouncements(t *testing.T) {
	rdb := newRedis(t)
	s := New(rdb, time.Minute)
	c := NewCache(s, CacheOptions{MaxAge: time.Hour})
	runCache(t, c)
	ctx := context.Background()
	u := "u-" + uuid.NewString()
	conn := Conn{UserID: u, DeviceID: "phone", ConnID: "c1", GatewayID: "gw-a"}

	steps := []struct {
		name string
		do   func() error
		want int // connections of u the cache must come to show
	}{
		{"offline, cached", func() error { return nil }, 0},
		{"connect", func() error { return s.Put(ctx, conn) }, 1},
		{"second device", func() error { return s.Put(ctx, Conn{UserID: u, DeviceID: "laptop", ConnID: "c2", GatewayID: "gw-b"}) }, 2},
		{"close", func() error { return s.Remove(ctx, conn) }, 1},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			if err := st.do(); err != nil {
				t.Fatal(err)
			}
			eventually(t, st.name, func() bool { return len(conns(t, c, u)) == st.want })
			// Now cached: a write nobody announces is not seen.
			misses := c.Misses()
			if err := rdb.HSet(ctx, key(u), "ghost", "gw-z|tablet|"+expiry(time.Minute)).Err(); err != nil {
				t.Fatal(err)
			}
			got := conns(t, c, u)
			if err := rdb.HDel(ctx, key(u), "ghost").Err(); err != nil {
				t.Fatal(err)
			}
			if len(got) != st.want || c.Misses() != misses {
				t.Fatalf("after an unannounced write: %d conns, %d new misses; want %d from the cache", len(got), c.Misses()-misses, st.want)
			}
		})
	}
}

// TestCacheDropsRemovedConnection: a closed connection is never pushed to
// after its removal was announced.
func TestCacheDropsRemovedConnection(t *testing.T) {
	rdb := newRedis(t)
	s := New(rdb, time.Minute)
	c := NewCache(s, CacheOptions{MaxAge: time.Hour})
	runCache(t, c)
	ctx := context.Background()
	u := "u-" + uuid.NewString()
	conn := Conn{UserID: u, DeviceID: "phone", ConnID: "c1", GatewayID: "gw-a"}
	if err := s.Put(ctx, conn); err != nil {
		t.Fatal(err)
	}
	eventually(t, "connect seen", func() bool { return len(conns(t, c, u)) == 1 })
	if err := s.Remove(ctx, conn); err != nil {
		t.Fatal(err)
	}
	eventually(t, "close seen", func() bool { return len(conns(t, c, u)) == 0 })
}

// TestCacheReadsThroughUnsubscribed: without Run nothing is kept, so a
// write is seen at once, announced or not.
func TestCacheReadsThroughUnsubscribed(t *testing.T) {
	rdb := newRedis(t)
	s := New(rdb, time.Minute)
	c := NewCache(s, CacheOptions{MaxAge: time.Hour})
	ctx := context.Background()
	u := "u-" + uuid.NewString()
	if got := conns(t, c, u); len(got) != 0 {
		t.Fatalf("conns = %v, want none", got)
	}
	if err := rdb.HSet(ctx, key(u), "c1", "gw-a|phone|"+expiry(time.Minute)).Err(); err != nil {
		t.Fatal(err)
	}
	if got := conns(t, c, u); len(got) != 1 {
		t.Fatalf("conns = %v, want the unannounced connection", got)
	}
	if c.Hits() != 0 || c.Misses() != 2 {
		t.Fatalf("hits %d misses %d, want 0 and 2", c.Hits(), c.Misses())
	}
}

// TestCacheMaxAge: a write nobody announces is seen once the entry is
// older than MaxAge.
func TestCacheMaxAge(t *testing.T) {
	rdb := newRedis(t)
	s := New(rdb, time.Minute)
	now := time.Now()
	var mu sync.Mutex
	s.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	c := NewCache(s, CacheOptions{MaxAge: time.Second})
	runCache(t, c)
	ctx := context.Background()
	u := "u-" + uuid.NewString()
	_ = conns(t, c, u) // cached: offline
	if err := rdb.HSet(ctx, key(u), "c1", "gw-a|phone|"+expiry(time.Hour)).Err(); err != nil {
		t.Fatal(err)
	}
	if got := conns(t, c, u); len(got) != 0 {
		t.Fatalf("conns = %v, want the cached none", got)
	}
	mu.Lock()
	now = now.Add(1100 * time.Millisecond)
	mu.Unlock()
	if got := conns(t, c, u); len(got) != 1 {
		t.Fatalf("conns = %v past MaxAge, want the connection", got)
	}
}

// TestCacheReadRacingAnnouncement: a read that began before an
// announcement of its user may hold the old state, so it is returned but
// not kept.
func TestCacheReadRacingAnnouncement(t *testing.T) {
	rdb := newRedis(t)
	s := New(rdb, time.Minute)
	c := NewCache(s, CacheOptions{MaxAge: time.Hour})
	runCache(t, c)
	ctx := context.Background()
	u := "u-" + uuid.NewString()
	conn := Conn{UserID: u, DeviceID: "phone", ConnID: "c1", GatewayID: "gw-a"}
	once := sync.Once{}
	c.afterRead = func() {
		// The read found u offline; u connects and the announcement is
		// heard before the read's result is stored.
		once.Do(func() {
			if err := s.Put(ctx, conn); err != nil {
				t.Error(err)
			}
			eventually(t, "announcement heard", func() bool {
				c.mu.Lock()
				defer c.mu.Unlock()
				return c.dirty[u] > 0
			})
		})
	}
	if got := conns(t, c, u); len(got) != 0 {
		t.Fatalf("first lookup = %v, want the offline state it read", got)
	}
	if got := conns(t, c, u); len(got) != 1 {
		t.Fatalf("second lookup = %v, want the connection (the stale read must not have been kept)", got)
	}
}

func expiry(d time.Duration) string { return strconv.FormatInt(time.Now().Add(d).UnixMilli(), 10) }
