package keystore

import (
	"math/rand/v2"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
)

// cache is a bounded LRU whose entries each expire at a time drawn
// between ttl/2 and ttl after they were added. Keys made or fetched
// together (a gateway's first minute, a burst of new sessions) then do
// not all expire at once: a wave of misses would send every sender of
// those sessions to PostgreSQL in the same moment (seen as a doubled ACK
// p99 in the benchmark with a fixed TTL). ttl stays the bound on how long
// an entry is used.
type cache[K comparable, V any] struct {
	lru *lru.Cache[K, entry[V]]
	ttl time.Duration
	now func() time.Time
}

type entry[V any] struct {
	v       V
	expires time.Time
}

func newCache[K comparable, V any](size int, ttl time.Duration, now func() time.Time) *cache[K, V] {
	l, err := lru.New[K, entry[V]](size)
	if err != nil {
		panic(err) // size > 0, checked by newStore
	}
	return &cache[K, V]{lru: l, ttl: ttl, now: now}
}

func (c *cache[K, V]) Get(k K) (V, bool) {
	e, ok := c.lru.Get(k)
	if !ok || !c.now().Before(e.expires) {
		var zero V
		return zero, false
	}
	return e.v, true
}

func (c *cache[K, V]) Add(k K, v V) {
	half := c.ttl / 2
	c.lru.Add(k, entry[V]{v: v, expires: c.now().Add(half + rand.N(half+1))})
}
