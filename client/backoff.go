package client

import (
	"math/rand/v2"
	"time"
)

// backoff is capped exponential backoff with "equal jitter": attempt n
// waits a random duration in [d/2, d) with d = min(max, min·2^n), so a
// fleet of clients that lost the same gateway does not come back in step,
// and no client retries at once in a tight loop.
type backoff struct {
	min, max time.Duration
}

func (b backoff) delay(attempt int) time.Duration {
	d := b.min
	for i := 0; i < attempt && d < b.max; i++ {
		d *= 2
	}
	d = min(d, b.max)
	if d <= 1 {
		return d
	}
	half := d / 2
	return half + rand.N(d-half)
}
