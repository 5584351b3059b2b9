package segment

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// PGStore reserves ranges in the session_seq table, all requests of a call
// in one INSERT ... ON CONFLICT DO UPDATE ... RETURNING round trip. Rows are
// locked in session ID order, so two owners racing over the same sessions
// (a zombie and its successor) cannot deadlock.
type PGStore struct {
	pool *pgxpool.Pool
	step int64
}

var _ Store = (*PGStore)(nil)

// NewPGStore returns a store over pool; step is recorded in each row.
func NewPGStore(pool *pgxpool.Pool, step int64) *PGStore { return &PGStore{pool: pool, step: step} }

// reserveSQL extends each session by n, or, when after > 0, sets it to
// after + n (see Request.After).
const reserveSQL = `
WITH r AS (SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS r(id, n, after))
INSERT INTO session_seq AS s (session_id, max_seq, step, updated_at)
SELECT r.id, CASE WHEN r.after > 0 THEN r.after + r.n ELSE r.n END, $4, now()
FROM r
ORDER BY r.id
ON CONFLICT (session_id) DO UPDATE
SET max_seq = CASE WHEN (SELECT r.after FROM r WHERE r.id = EXCLUDED.session_id) > 0
                   THEN EXCLUDED.max_seq ELSE s.max_seq + EXCLUDED.max_seq END,
    step = EXCLUDED.step, updated_at = now()
RETURNING session_id, max_seq`

// Reserve implements Store.
func (p *PGStore) Reserve(ctx context.Context, reqs []Request) ([]Grant, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	ids := make([]string, len(reqs))
	ns := make([]int64, len(reqs))
	afters := make([]int64, len(reqs))
	want := make(map[string]int64, len(reqs))
	for i, r := range reqs {
		if r.N <= 0 {
			return nil, fmt.Errorf("reserve %d seqs for session %s: want a positive count", r.N, r.SessionID)
		}
		if _, dup := want[r.SessionID]; dup {
			return nil, fmt.Errorf("reserve: session %s requested twice in one call", r.SessionID)
		}
		ids[i], ns[i], afters[i], want[r.SessionID] = r.SessionID, r.N, max(r.After, 0), r.N
	}
	rows, err := p.pool.Query(ctx, reserveSQL, ids, ns, afters, p.step)
	if err != nil {
		return nil, fmt.Errorf("reserve seq segments: %w", err)
	}
	defer rows.Close()
	grants := make([]Grant, 0, len(reqs))
	for rows.Next() {
		var id string
		var hi int64
		if err := rows.Scan(&id, &hi); err != nil {
			return nil, fmt.Errorf("scan reserved segment: %w", err)
		}
		grants = append(grants, Grant{SessionID: id, Range: Range{Lo: hi - want[id] + 1, Hi: hi}})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reserve seq segments: %w", err)
	}
	if len(grants) != len(reqs) {
		return nil, fmt.Errorf("reserve seq segments: %d grants for %d requests", len(grants), len(reqs))
	}
	return grants, nil
}

const releaseSQL = `
UPDATE session_seq AS s SET max_seq = r.lo - 1, updated_at = now()
FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS r(id, lo, hi)
WHERE s.session_id = r.id AND s.max_seq = r.hi`

// Release implements Store: one UPDATE for all ranges, each applied only
// when the session's max_seq still equals the range's end.
func (p *PGStore) Release(ctx context.Context, ranges []Grant) (int, error) {
	if len(ranges) == 0 {
		return 0, nil
	}
	ids := make([]string, len(ranges))
	los := make([]int64, len(ranges))
	his := make([]int64, len(ranges))
	for i, g := range ranges {
		ids[i], los[i], his[i] = g.SessionID, g.Range.Lo, g.Range.Hi
	}
	tag, err := p.pool.Exec(ctx, releaseSQL, ids, los, his)
	if err != nil {
		return 0, fmt.Errorf("release seq segments: %w", err)
	}
	return int(tag.RowsAffected()), nil
}
