package keystore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// AllSessions is the retention scope of every session without its own
// policy.
const AllSessions = "*"

// SetRetention keeps the bodies of scope (a session ID, or AllSessions)
// for keep: ApplyRetention destroys every key whose period ended more than
// keep ago. keep 0 removes the policy (keep forever, or fall back to
// AllSessions'). Policies are read by ApplyRetention only.
func (s *Store) SetRetention(ctx context.Context, scope string, keep time.Duration) error {
	if scope == "" {
		return errors.New("keystore: retention scope is empty (a session ID, or * for every session)")
	}
	if keep < 0 || (keep > 0 && keep < time.Second) {
		return fmt.Errorf("keystore: retention %s: want 0 (forever) or at least 1s", keep)
	}
	var err error
	if keep == 0 {
		_, err = s.pool.Exec(ctx, `DELETE FROM seqflow_retention WHERE scope = $1`, scope)
	} else {
		_, err = s.pool.Exec(ctx, `INSERT INTO seqflow_retention (scope, keep_s) VALUES ($1, $2)
			ON CONFLICT (scope) DO UPDATE SET keep_s = EXCLUDED.keep_s, set_at = now()`, scope, int64(keep/time.Second))
	}
	if err != nil {
		return unavailable(err)
	}
	return nil
}

// Retention is one policy.
type Retention struct {
	Scope string
	Keep  time.Duration
}

// Retentions lists the policies, AllSessions first.
func (s *Store) Retentions(ctx context.Context) ([]Retention, error) {
	rows, err := s.pool.Query(ctx, `SELECT scope, keep_s FROM seqflow_retention ORDER BY scope <> '*', scope`)
	if err != nil {
		return nil, unavailable(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Retention, error) {
		var p Retention
		var keep int64
		err := r.Scan(&p.Scope, &keep)
		p.Keep = time.Duration(keep) * time.Second
		return p, err
	})
	if err != nil {
		return nil, unavailable(err)
	}
	return out, nil
}

// ApplyRetention destroys, for every session with a policy (its own, else
// AllSessions'), the keys whose period ended more than the policy's keep
// before now: the bodies they sealed become unreadable everywhere, as for
// an erasure. It returns how many keys it destroyed. Run it now and then
// (`seqflow retention apply`, from cron); a key outlives its policy by at
// most the time between runs.
func (s *Store) ApplyRetention(ctx context.Context) (int64, error) {
	now := s.opts.Now()
	var n int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		n, err = destroy(ctx, tx, "retention",
			`period_end <= $1::timestamptz - make_interval(secs => COALESCE(
				(SELECT r.keep_s FROM seqflow_retention r WHERE r.scope = seqflow_data_keys.session_id),
				(SELECT r.keep_s FROM seqflow_retention r WHERE r.scope = '*')))`, now)
		return err
	})
	if err != nil {
		return 0, unavailable(err)
	}
	return n, nil
}
