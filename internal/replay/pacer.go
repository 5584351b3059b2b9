package replay

import (
	"math"
	"time"
)

// pacer is a token bucket: rate tokens a second, at most burst saved up.
// A nil pacer or a rate <= 0 allows everything at once.
type pacer struct {
	rate, burst, tokens float64
	last                time.Time
}

// newPacer allows rate a second; the bucket holds a tenth of a second's
// worth (at least 1), so the reads are spread over the second instead of
// coming in one burst.
func newPacer(rate float64, now time.Time) *pacer {
	if rate <= 0 {
		return nil
	}
	b := max(1, rate/10)
	return &pacer{rate: rate, burst: b, tokens: b, last: now}
}

// budget returns how many of want may be taken now (at most want), or,
// when none, how long until they may. It hands out a full bucket (or
// want, when less) at a time, not one record as soon as one is due: each
// take is a poll, and polling one record at a time costs the replayer
// more CPU than copying them.
func (p *pacer) budget(now time.Time, want int) (n int, wait time.Duration) {
	if p == nil {
		return want, 0
	}
	if now.After(p.last) {
		p.tokens = min(p.burst, p.tokens+now.Sub(p.last).Seconds()*p.rate)
		p.last = now
	}
	need := min(float64(want), math.Floor(p.burst))
	if p.tokens >= need {
		return min(want, int(p.tokens)), 0
	}
	return 0, time.Duration(math.Ceil((need - p.tokens) / p.rate * float64(time.Second)))
}

// spend takes n.
func (p *pacer) spend(n int) {
	if p != nil {
		p.tokens -= float64(n)
	}
}
