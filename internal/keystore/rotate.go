package keystore

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// KEKUse is how many live keys one KEK wraps.
type KEKUse struct {
	KEKID string
	Keys  int64
}

// KEKs counts the live keys per KEK, the current one's first.
func (s *Store) KEKs(ctx context.Context) ([]KEKUse, error) {
	rows, err := s.pool.Query(ctx, `SELECT kek_id, count(*) FROM seqflow_data_keys GROUP BY kek_id ORDER BY kek_id <> $1, kek_id`, s.w.ID())
	if err != nil {
		return nil, unavailable(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[KEKUse])
	if err != nil {
		return nil, unavailable(err)
	}
	return out, nil
}

// Rewrap wraps every live key wrapped with a previous KEK (Options.Previous)
// with the current one instead, batch by batch, and returns how many it
// moved. Keys wrapped with a KEK this store does not hold are left and
// counted in left. Once none is left under a KEK, remove it from
// SEQFLOW_KEK_PREVIOUS everywhere and destroy it: copies of the key table
// made before (backups, WAL) then hold nothing anyone can unwrap.
func (s *Store) Rewrap(ctx context.Context) (moved, left int64, err error) {
	for _, old := range s.opts.Previous {
		if old.ID() == s.w.ID() {
			continue
		}
		for {
			n, err := s.rewrapBatch(ctx, old, 500)
			if err != nil {
				return moved, 0, err
			}
			moved += n
			if n == 0 {
				break
			}
		}
	}
	uses, err := s.KEKs(ctx)
	if err != nil {
		return moved, 0, err
	}
	for _, u := range uses {
		if u.KEKID != s.w.ID() {
			left += u.Keys
		}
	}
	return moved, left, nil
}

// rewrapBatch moves up to n keys from old to the current KEK in one
// transaction (rows locked, so a concurrent rotation or erasure waits).
func (s *Store) rewrapBatch(ctx context.Context, old Wrapper, n int) (int64, error) {
	var moved int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT key_id, wrapped FROM seqflow_data_keys WHERE kek_id = $1 LIMIT $2 FOR UPDATE SKIP LOCKED`, old.ID(), n)
		if err != nil {
			return err
		}
		type kw struct {
			id      int64
			wrapped []byte
		}
		keys, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (kw, error) {
			var k kw
			return k, r.Scan(&k.id, &k.wrapped)
		})
		if err != nil {
			return err
		}
		for _, k := range keys {
			dek, err := old.Unwrap(ctx, k.wrapped)
			if err != nil {
				return fmt.Errorf("unwrap key %d with KEK %s: %w", k.id, old.ID(), err)
			}
			w, err := s.w.Wrap(ctx, dek)
			if err != nil {
				return fmt.Errorf("wrap key %d with KEK %s: %w", k.id, s.w.ID(), err)
			}
			if _, err := tx.Exec(ctx, `UPDATE seqflow_data_keys SET wrapped = $2, kek_id = $3 WHERE key_id = $1`, k.id, w, s.w.ID()); err != nil {
				return err
			}
		}
		moved = int64(len(keys))
		return nil
	})
	if err != nil {
		return 0, unavailable(err)
	}
	return moved, nil
}

// ParsePrevious reads SEQFLOW_KEK_PREVIOUS: KEKs as ParseKEK reads them,
// comma-separated; empty: none.
func ParsePrevious(list string) ([]Wrapper, error) {
	var out []Wrapper
	for i, s := range strings.Split(list, ",") {
		if strings.TrimSpace(s) == "" {
			continue
		}
		k, err := ParseKEK(s)
		if err != nil {
			return nil, fmt.Errorf("previous KEK %d: %w", i+1, err)
		}
		out = append(out, k)
	}
	return out, nil
}
