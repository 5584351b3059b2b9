package main

import (
	"context"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// limiters is a token bucket per user on this gateway instance; Run
// forgets idle users.
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

func (l *limiters) allow(user string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	u := l.m[user]
	if u == nil {
		u = &userLimiter{lim: rate.NewLimiter(l.r, l.b)}
		l.m[user] = u
	}
	u.last = now
	return u.lim.AllowN(now, 1)
}

// sweep forgets users idle long enough for their bucket to be full again.
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

// Run sweeps once a second until ctx ends, and returns ctx.Err().
func (l *limiters) Run(ctx context.Context) error {
	return every(ctx, time.Second, func() { l.sweep(l.now()) })
}
