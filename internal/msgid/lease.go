package msgid

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrNoFreeNode means all 1024 node IDs are leased.
var ErrNoFreeNode = errors.New("msgid: every node id is leased")

// Lease is a node ID held in the node_lease table for TTL, renewed every
// TTL/3 by Run. The generator's deadline is the local time the renewal
// started plus TTL minus a safety margin, so the instance stops issuing IDs
// before the database would let anyone else take the node.
type Lease struct {
	pool   *pgxpool.Pool
	holder string
	ttl    time.Duration
	clock  Clock
	log    *slog.Logger
	Gen    *Generator
}

// margin is how long before the database deadline the holder stops issuing.
func (l *Lease) margin() time.Duration { return l.ttl / 5 }

// Acquire takes a free (expired) node ID for holder and returns its lease
// with a generator. maxWait bounds how long a backwards clock is waited out.
// It prefers a node whose previous holder's promise (issued_until_ms) has
// passed, so a restart does not take back the node it released a moment
// ago and wait out its own promise (up to the TTL).
func Acquire(ctx context.Context, pool *pgxpool.Pool, holder string, ttl time.Duration, clock Clock, maxWait time.Duration, log *slog.Logger) (*Lease, error) {
	return acquire(ctx, pool, holder, ttl, clock, maxWait, log, -1)
}

// acquire takes node only (any free node when only < 0).
func acquire(ctx context.Context, pool *pgxpool.Pool, holder string, ttl time.Duration, clock Clock, maxWait time.Duration, log *slog.Logger, only int64) (*Lease, error) {
	if clock == nil {
		clock = WallClock
	}
	start := clock.NowMs()
	var node int64
	var prevUntil int64
	err := pool.QueryRow(ctx, `
WITH free AS (
  SELECT node_id, issued_until_ms FROM node_lease
  WHERE expires_at < now() AND ($4 < 0 OR node_id = $4)
  -- a node whose last holder's promise has passed first: one released a
  -- moment ago (a restart's own) would have to be waited out
  ORDER BY issued_until_ms > $5, expires_at, node_id
  LIMIT 1
  FOR UPDATE SKIP LOCKED)
UPDATE node_lease l
SET holder = $1, acquired_at = now(),
    -- the lease also covers the wait for the previous holder's promise
    expires_at = now() + $2::interval + make_interval(secs => GREATEST(0, free.issued_until_ms - $5) / 1000.0),
    issued_until_ms = GREATEST(free.issued_until_ms, $3 + GREATEST(0, free.issued_until_ms - $5))
FROM free WHERE l.node_id = free.node_id
RETURNING l.node_id, free.issued_until_ms`, holder, ttl.String(), start+ttl.Milliseconds(), only, start).Scan(&node, &prevUntil)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNoFreeNode
	}
	if err != nil {
		return nil, fmt.Errorf("acquire node lease: %w", err)
	}
	// The previous holder promised no ID after prevUntil; start after it.
	if wait := time.Duration(prevUntil-clock.NowMs()) * time.Millisecond; wait > 0 {
		if wait > ttl+maxWait {
			return nil, fmt.Errorf("acquire node lease: node %d was promised until %d ms, %s ahead of this clock: clocks disagree too much", node, prevUntil, wait)
		}
		log.Info("waiting out previous holder of node id", "node_id", node, "wait", wait)
		clock.Sleep(wait)
	}
	g, err := NewGenerator(node, clock, maxWait, prevUntil)
	if err != nil {
		return nil, err
	}
	l := &Lease{pool: pool, holder: holder, ttl: ttl, clock: clock, log: log, Gen: g}
	g.SetValidUntil(max(start, prevUntil) + (ttl - l.margin()).Milliseconds())
	return l, nil
}

// Renew extends the lease once. On failure the generator keeps its old
// deadline, so it stops issuing IDs once that passes.
func (l *Lease) Renew(ctx context.Context) error {
	start := l.clock.NowMs()
	tag, err := l.pool.Exec(ctx, `
UPDATE node_lease SET expires_at = now() + $3::interval,
  issued_until_ms = GREATEST(issued_until_ms, $4)
WHERE node_id = $1 AND holder = $2 AND expires_at > now()`,
		l.Gen.Node(), l.holder, l.ttl.String(), start+l.ttl.Milliseconds())
	if err != nil {
		return fmt.Errorf("renew node lease %d: %w", l.Gen.Node(), err)
	}
	if tag.RowsAffected() != 1 {
		l.Gen.SetValidUntil(0)
		return fmt.Errorf("renew node lease %d: %w (taken over or expired)", l.Gen.Node(), ErrLeaseLapsed)
	}
	l.Gen.SetValidUntil(start + (l.ttl - l.margin()).Milliseconds())
	return nil
}

// Run renews the lease every TTL/3 until ctx ends, then releases it. It
// returns ErrLeaseLapsed when the lease was lost: the caller must stop.
func (l *Lease) Run(ctx context.Context) error {
	t := time.NewTicker(l.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			l.release()
			return ctx.Err()
		case <-t.C:
			if err := l.Renew(ctx); err != nil {
				if errors.Is(err, ErrLeaseLapsed) {
					return err
				}
				l.log.Warn("node lease renewal failed; ids stop when the lease runs out", "node_id", l.Gen.Node(), "err", err)
			}
		}
	}
}

// release gives the node back; issued_until_ms keeps the promise for the
// next holder.
func (l *Lease) release() {
	l.Gen.SetValidUntil(0)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := l.pool.Exec(ctx, `UPDATE node_lease SET expires_at = '-infinity' WHERE node_id = $1 AND holder = $2`, l.Gen.Node(), l.holder)
	if err != nil {
		l.log.Warn("release node lease", "node_id", l.Gen.Node(), "err", err)
	}
}
