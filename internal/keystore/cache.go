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
//
// An entry past half its life is stale: still served, and Get says so,
// so the Store can confirm it with PostgreSQL in the background and add it
// again before it expires (refresh-ahead): a key in use never leaves the
// cache to be fetched again on a client's path.
type cache[K comparable, V any] struct {
	lru *lru.Cache[K, entry[V]]
	ttl time.Duration
	now func() time.Time
}

type entry[V any] struct {
	v       V
	stale   time.Time
	expires time.Time
}

func newCache[K comparable, V any](size int, ttl time.Duration, now func() time.Time) *cache[K, V] {
	l, err := lru.New[K, entry[V]](size)
	if err != nil {
		panic(err) // size > 0, checked by newStore
	}
	return &cache[K, V]{lru: l, ttl: ttl, now: now}
}

// Get returns k's value while it has not expired; stale is true once it
// is past half its life.
func (c *cache[K, V]) Get(k K) (v V, ok, stale bool) {
	e, ok := c.lru.Get(k)
	now := c.now()
	if !ok || !now.Before(e.expires) {
		var zero V
		return zero, false, false
	}
	return e.v, true, !now.Before(e.stale)
}

func (c *cache[K, V]) Add(k K, v V) { c.AddAsOf(k, v, c.now()) }

// AddAsOf adds k with a life counted from asOf: the moment its value was
// last read from PostgreSQL.
func (c *cache[K, V]) AddAsOf(k K, v V, asOf time.Time) {
	half := c.ttl / 2
	now := asOf
	life := half + rand.N(half+1)
	c.lru.Add(k, entry[V]{v: v, stale: now.Add(life / 2), expires: now.Add(life)})
}

func (c *cache[K, V]) Remove(k K) { c.lru.Remove(k) }
