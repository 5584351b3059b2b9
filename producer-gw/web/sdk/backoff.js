// Capped exponential backoff with "equal jitter" (client/backoff.go):
// attempt n waits a random duration in [d/2, d) with d = min(max, min·2^n),
// so a fleet of clients that lost the same gateway does not come back in
// step, and no client retries at once in a tight loop.
export function backoffDelay(minMs, maxMs, attempt, random = Math.random) {
    let d = minMs;
    for (let i = 0; i < attempt && d < maxMs; i++)
        d *= 2;
    d = Math.min(d, maxMs);
    if (d <= 1)
        return d;
    const half = d / 2;
    return half + random() * (d - half);
}
