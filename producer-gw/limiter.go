package main

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/seqflow/seqflow/internal/auth"
)

// Request rate limits are kept in Redis, so they hold across gateways: a
// client that reconnects to another instance finds its bucket as it left
// it. redis_rate (GCRA in one Lua script, one round trip per key) keeps
// them; the keys expire by themselves once a bucket is full again.
//
// A gateway takes a user's tokens from Redis a few at a time (a lease)
// and spends them on that user's next requests without a round trip, for
// at most leaseTTL; what is left then is dropped. A lease's size follows
// the user's pace: the first is one token; one spent before it expired is
// followed by one twice its size, up to maxLeaseOf(burst) (burst/4, at
// most 1,000: 25 with the default burst of 100); one that expired is followed by one of what was spent of it.
// So a user who sends now and then takes one token at a time and wastes
// none (on any number of gateways), and a busy one asks Redis about once
// per leaseTTL. The shared bucket is never overdrawn (a leased token was
// taken from it); a user who moves to another gateway loses at most the
// lease left on the old one. With a per-device limit every request asks
// Redis, as both buckets must agree.
//
// When Redis does not answer within redisLimitTimeout, the decision falls
// back to this instance's own buckets (counted in
// seqflow_gateway_rate_limit_fallbacks_total) and Redis is left alone for
// redisLimitCooldown, so an outage costs one timeout a second, not one per
// request. Traffic is never refused because Redis is down; during an
// outage a user spread over N gateways may get up to N times the rate.
const (
	redisLimitTimeout  = 50 * time.Millisecond
	redisLimitCooldown = time.Second
	leaseTTL           = 2 * time.Second
	maxLease           = 1000
)

// limiter decides whether a request of a user's device may go on: within
// the device's rate, when set, and its user's (all devices together).
type limiter struct {
	redis          *redis_rate.Limiter // nil: local buckets only
	user, device   redis_rate.Limit    // device.Rate 0: no per-device limit
	users, devices *limiters           // this instance's buckets: the fallback
	log            *slog.Logger
	m              *metrics
	now            func() time.Time

	mu        sync.Mutex
	downUntil time.Time // Redis is skipped until then after a failure
	leaseMax  int       // the largest lease (1: no leases)
	leases    map[string]lease
}

// lease is what is left of the tokens a gateway took from a user's bucket
// in Redis, usable until expires, and how many it took (which sizes the
// next). It is kept for a leaseTTL after it expires, for that sizing.
type lease struct {
	size, left int
	expires    time.Time
}

// maxLeaseOf is the largest lease with a bucket of burst tokens.
func maxLeaseOf(burst int) int { return min(maxLease, max(1, burst/4)) }

// next is the size of the lease that follows ls, taken at now.
func (ls lease) next(now time.Time, most int) int {
	if ls.size == 0 {
		return 1
	}
	if ls.left == 0 && now.Before(ls.expires) {
		return min(most, 2*ls.size)
	}
	return min(most, max(1, ls.size-ls.left))
}

func newLimiter(rdb redis.UniversalClient, cfg Config, log *slog.Logger, m *metrics, now func() time.Time) *limiter {
	l := &limiter{
		user:  redis_rate.Limit{Rate: cfg.RatePerUser, Burst: cfg.RateBurst, Period: time.Second},
		users: newLimiters(cfg.RatePerUser, cfg.RateBurst, now),
		log:   log, m: m, now: now,
		leaseMax: 1, leases: map[string]lease{},
	}
	if cfg.RatePerDevice <= 0 {
		l.leaseMax = maxLeaseOf(cfg.RateBurst)
	}
	if cfg.RatePerDevice > 0 {
		l.device = redis_rate.Limit{Rate: cfg.RatePerDevice, Burst: cfg.RateDeviceBurst, Period: time.Second}
		l.devices = newLimiters(cfg.RatePerDevice, cfg.RateDeviceBurst, now)
	}
	if rdb != nil {
		l.redis = redis_rate.NewLimiter(rdb)
	}
	return l
}

// allow takes one request from p's buckets and says whether it may go on.
// It blocks on Redis for at most redisLimitTimeout.
func (l *limiter) allow(ctx context.Context, p auth.Principal) bool { return l.allowN(ctx, p, 1) }

// allowN is allow of a request that costs n tokens (api.cost): all of
// them or none are taken from each bucket.
func (l *limiter) allowN(ctx context.Context, p auth.Principal, n int) bool {
	n = max(n, 1)
	if ok, err := l.allowRedis(ctx, p, n); err == nil {
		return ok
	}
	l.m.rateFallbacks.Inc()
	now := l.now()
	if l.devices != nil && !l.devices.allow(p.UserID+"/"+p.DeviceID, now, n) {
		return false
	}
	return l.users.allow(p.UserID, now, n)
}

// errRedisSkipped: Redis failed less than redisLimitCooldown ago.
type errRedisSkipped struct{}

func (errRedisSkipped) Error() string { return "redis rate limiter cooling down after a failure" }

func (l *limiter) allowRedis(ctx context.Context, p auth.Principal, n int) (bool, error) {
	if l.redis == nil {
		return false, errRedisSkipped{}
	}
	now := l.now()
	l.mu.Lock()
	skip := now.Before(l.downUntil)
	if !skip && l.leaseMax > 1 && l.spendLease(p.UserID, now, n) {
		l.mu.Unlock()
		return true, nil
	}
	l.mu.Unlock()
	if skip {
		return false, errRedisSkipped{}
	}
	ctx, cancel := context.WithTimeout(ctx, redisLimitTimeout)
	defer cancel()
	// The device's bucket first: a request its device may not make does
	// not cost its user's other devices a token.
	var res *redis_rate.Result
	var err error
	if l.device.Rate > 0 {
		res, err = l.redis.AllowN(ctx, "seqflow:rate:d:"+p.UserID+"/"+p.DeviceID, l.device, n)
	}
	if err == nil && (res == nil || res.Allowed > 0) {
		if l.leaseMax > 1 {
			return l.lease(ctx, p.UserID, now, n)
		}
		res, err = l.redis.AllowN(ctx, "seqflow:rate:u:"+p.UserID, l.user, n)
	}
	if err != nil {
		return false, l.redisFailed(err)
	}
	return res.Allowed > 0, nil
}

func (l *limiter) redisFailed(err error) error {
	l.mu.Lock()
	l.downUntil = l.now().Add(redisLimitCooldown)
	l.mu.Unlock()
	l.log.Warn("rate limit in redis failed; local buckets for a while", "cooldown", redisLimitCooldown, "err", err)
	return err
}

// spendLease spends n tokens of user's lease, if it has them left; l.mu
// is held.
func (l *limiter) spendLease(user string, now time.Time, n int) bool {
	ls, ok := l.leases[user]
	if !ok || ls.left < n || !now.Before(ls.expires) {
		return false
	}
	ls.left -= n
	l.leases[user] = ls
	return true
}

// lease takes a new lease of user's bucket from Redis, sized by the last
// (lease.next) and at least n, and spends n of its tokens (ctx bounds the
// call). A lease smaller than n (the bucket had fewer) refuses the
// request and is kept for the next ones.
func (l *limiter) lease(ctx context.Context, user string, now time.Time, n int) (bool, error) {
	l.mu.Lock()
	size := max(l.leases[user].next(now, l.leaseMax), n)
	l.mu.Unlock()
	// Two requests of a user may both miss and both lease; each spends its
	// own tokens, so the bucket is still never overdrawn.
	res, err := l.redis.AllowAtMost(ctx, "seqflow:rate:u:"+user, l.user, size)
	if err != nil {
		return false, l.redisFailed(err)
	}
	l.m.rateLeases.Inc()
	if res.Allowed < n {
		if res.Allowed > 0 {
			l.mu.Lock()
			l.leases[user] = lease{size: res.Allowed, left: res.Allowed, expires: now.Add(leaseTTL)}
			l.mu.Unlock()
		}
		return false, nil
	}
	l.mu.Lock()
	l.leases[user] = lease{size: res.Allowed, left: res.Allowed - n, expires: now.Add(leaseTTL)}
	l.mu.Unlock()
	return true, nil
}

// Run sweeps the local buckets once a second until ctx ends, and returns
// ctx.Err().
func (l *limiter) Run(ctx context.Context) error {
	return every(ctx, time.Second, func() {
		now := l.now()
		l.mu.Lock()
		for u, ls := range l.leases {
			if now.Sub(ls.expires) > leaseTTL {
				delete(l.leases, u)
			}
		}
		l.mu.Unlock()
		l.users.sweep(now)
		if l.devices != nil {
			l.devices.sweep(now)
		}
	})
}

// limiters is a token bucket per key on this gateway instance.
type limiters struct {
	r   rate.Limit
	b   int
	now func() time.Time

	mu sync.Mutex
	m  map[string]*userLimiter
}

type userLimiter struct {
	lim  *rate.Limiter
	last time.Time
}

func newLimiters(perSecond, burst int, now func() time.Time) *limiters {
	return &limiters{r: rate.Limit(perSecond), b: burst, now: now, m: map[string]*userLimiter{}}
}

func (l *limiters) allow(key string, now time.Time, n int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	u := l.m[key]
	if u == nil {
		u = &userLimiter{lim: rate.NewLimiter(l.r, l.b)}
		l.m[key] = u
	}
	u.last = now
	return u.lim.AllowN(now, n)
}

// sweep forgets keys idle long enough for their bucket to be full again.
func (l *limiters) sweep(now time.Time) {
	refill := time.Duration(float64(l.b)/float64(l.r)*float64(time.Second)) + time.Second
	l.mu.Lock()
	defer l.mu.Unlock()
	for u, e := range l.m {
		if now.Sub(e.last) > refill {
			delete(l.m, u)
		}
	}
}
