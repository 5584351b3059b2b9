// A token bucket (what golang.org/x/time/rate's Limiter.Reserve does for
// the Go SDK): perSecond tokens a second, at most burst saved up. A
// reservation always succeeds; taking a token the bucket does not hold yet
// makes the caller wait for it, and the next callers wait behind it, so
// waiters go in turn and none is refused.
export class TokenBucket {
    perSecond;
    burst;
    now;
    tokens;
    last;
    constructor(perSecond, burst, now = () => Date.now()) {
        this.perSecond = perSecond;
        this.burst = burst;
        this.now = now;
        this.tokens = burst;
        this.last = now();
    }
    /** reserve takes one token and returns how many ms to wait before using it (0: at once). */
    reserve() {
        const t = this.now();
        // max: a clock set back refills nothing.
        this.tokens = Math.min(this.burst, this.tokens + (Math.max(t - this.last, 0) * this.perSecond) / 1000);
        this.last = Math.max(t, this.last);
        this.tokens--;
        return this.tokens >= 0 ? 0 : (-this.tokens * 1000) / this.perSecond;
    }
}
