package presence

import (
	"context"
	"errors"
	"hash/fnv"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// CacheOptions tune a Cache. Zero values take the defaults.
type CacheOptions struct {
	// MaxAge bounds how long an entry is used without a change being
	// heard, default 10s (the pusher sets 30s): a safety net for writers that do not announce
	// (an older gateway), not the way changes arrive. Each entry lasts
	// between MaxAge/2 and MaxAge (by a hash of its user), so a large
	// group read at once is read again over time, not in one poll.
	MaxAge time.Duration
	// MaxUsers bounds the entries; when full the cache starts over empty.
	// Default 1,000,000.
	MaxUsers int
}

// Cache answers lookups from memory and reads only the users it holds no
// entry for, offline users included (for a large group most members are
// offline, and those are most of the reads). An entry is dropped when its
// user is announced on ChangesChannel, so a device that connects is seen
// by the first lookup after the announcement reaches Run.
//
// Until Run is subscribed, and from any error on the subscription until it
// is subscribed again, the cache holds nothing and every lookup reads
// Redis: an announcement missed while the subscription was down cannot
// leave a stale entry. Safe for concurrent use.
type Cache struct {
	s    *Store
	opts CacheOptions

	hits, misses, heard atomic.Uint64

	mu       sync.Mutex
	live     bool   // subscribed: entries may be kept
	epoch    uint64 // bumped whenever the cache starts over
	gen      uint64 // bumped on every announcement heard
	inflight int    // reads of Redis in progress
	// dirty: users announced while reads were in progress, with the gen
	// of the announcement; a read that began before it must not store.
	dirty   map[string]uint64
	entries map[string]cacheEntry

	afterRead func() // tests: runs between a read and its store
}

type cacheEntry struct {
	conns []expiring
	until int64 // Unix ms: read again from then on
}

// lifetime returns how long user's entry lasts, between MaxAge/2 and MaxAge.
func (c *Cache) lifetime(user string) int64 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(user))
	half := max(1, c.opts.MaxAge.Milliseconds()/2)
	return half + int64(h.Sum32())%(half+1)
}

// NewCache returns a cache over s; it keeps entries only while Run runs.
func NewCache(s *Store, opts CacheOptions) *Cache {
	if opts.MaxAge <= 0 {
		opts.MaxAge = 10 * time.Second
	}
	if opts.MaxUsers <= 0 {
		opts.MaxUsers = 1_000_000
	}
	return &Cache{s: s, opts: opts, dirty: map[string]uint64{}, entries: map[string]cacheEntry{}}
}

// Subscribed reports whether Run is subscribed, so entries are kept.
func (c *Cache) Subscribed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.live
}

// Hits returns the users answered from memory so far.
func (c *Cache) Hits() uint64 { return c.hits.Load() }

// Misses returns the users read from Redis so far.
func (c *Cache) Misses() uint64 { return c.misses.Load() }

// Heard returns the users announced on ChangesChannel and heard so far.
func (c *Cache) Heard() uint64 { return c.heard.Load() }

// Lookup returns the live connections of users, like Store.Lookup, reading
// from Redis only the users without an entry.
func (c *Cache) Lookup(ctx context.Context, users []string) (map[string][]Conn, error) {
	nowMs := c.s.now().UnixMilli()
	out := make(map[string][]Conn)
	var miss []string
	c.mu.Lock()
	if !c.live {
		miss = users
	} else {
		for _, u := range users {
			e, ok := c.entries[u]
			if !ok || nowMs >= e.until {
				miss = append(miss, u)
				continue
			}
			for _, cn := range e.conns {
				if cn.exp >= nowMs {
					out[u] = append(out[u], cn.Conn)
				}
			}
		}
	}
	start, epoch := c.gen, c.epoch
	c.inflight++
	c.mu.Unlock()
	c.hits.Add(uint64(len(users) - len(miss)))
	c.misses.Add(uint64(len(miss)))

	got, err := c.s.read(ctx, miss)
	if c.afterRead != nil {
		c.afterRead()
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	c.inflight--
	if err == nil && c.live && epoch == c.epoch {
		if len(c.entries)+len(miss) > c.opts.MaxUsers {
			c.reset()
		} else {
			for i, u := range miss {
				if c.dirty[u] > start {
					continue // announced after the read began: it may predate the change
				}
				c.entries[u] = cacheEntry{conns: got[i], until: nowMs + c.lifetime(u)}
			}
		}
	}
	if c.inflight == 0 {
		clear(c.dirty)
	}
	if err != nil {
		return nil, err
	}
	return live(got, miss, nowMs, out), nil
}

// Run listens to ChangesChannel and drops the entries of announced users,
// until ctx ends; it returns ctx.Err(). A subscription error empties the
// cache and stops it keeping entries until the subscription is back.
func (c *Cache) Run(ctx context.Context) error {
	ps := c.s.rdb.SSubscribe(ctx, ChangesChannel)
	defer ps.Close()
	// A blocked receive does not watch ctx; closing the subscription ends it.
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer stop()
	defer c.setLive(false)
	backoff := 50 * time.Millisecond
	for {
		msg, err := ps.ReceiveTimeout(ctx, 15*time.Second)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				// Quiet, not broken: a ping proves the connection (its
				// failure surfaces on the next receive).
				_ = ps.Ping(ctx)
				continue
			}
			c.setLive(false)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			// (Re)subscribed: what was missed before is covered by the
			// empty cache.
			c.setLive(true)
			backoff = 50 * time.Millisecond
		case *redis.Message:
			c.drop(strings.Split(m.Payload, "\n"))
		}
	}
}

func (c *Cache) setLive(v bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reset()
	c.live = v
}

// reset empties the cache; reads in progress will not store. c.mu held.
func (c *Cache) reset() {
	c.epoch++
	c.entries = map[string]cacheEntry{}
}

func (c *Cache) drop(users []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.heard.Add(uint64(len(users)))
	for _, u := range users {
		delete(c.entries, u)
		if c.inflight > 0 {
			c.dirty[u] = c.gen
		}
	}
}
