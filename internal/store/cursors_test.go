package store

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// cursorsOf lists session s's read and delivery cursors as "user=seq" and
// "user/device=seq", sorted.
func cursorsOf(t *testing.T, pool *pgxpool.Pool, schema, s string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), fmt.Sprintf(`
		SELECT user_id || '=' || read_seq FROM %[1]q.read_cursors WHERE session_id = $1
		UNION ALL
		SELECT user_id || '/' || device_id || '=' || delivered_seq FROM %[1]q.delivery_cursors WHERE session_id = $1`, schema), s)
	requireNoErr(t, err)
	var out []string
	for rows.Next() {
		var v string
		requireNoErr(t, rows.Scan(&v))
		out = append(out, v)
	}
	requireNoErr(t, rows.Err())
	slices.Sort(out)
	return out
}

// TestFormerMembersHaveNoCursors: a member who leaves loses their read
// and delivery cursors of the session (an erased user leaves every
// session, so theirs go with it); a late receipt of a former member, or
// one below a rejoined member's joined seq, is not stored; and the
// cursors are the same whether the receipts are written with the events,
// after all of them (a rebuild: the sequenced topic, then the receipts),
// or before them (a persister whose receipts run ahead).
func TestFormerMembersHaveNoCursors(t *testing.T) {
	ctx := context.Background()
	const s = "cursors"
	// Each step: events, then the receipts that come with them.
	steps := []struct {
		rows   []*Batch
		reads  []ReadCursor
		delivs []DeliveryCursor
	}{
		{rows: []*Batch{{Rows: rowsOf(t, createEv(s, 1, "u1", s, "u2", "u3"), msgEv(s, 2, "u1", "a"), msgEv(s, 3, "u1", "b"))}},
			reads: []ReadCursor{{s, "u2", 3}, {s, "u3", 2}}, delivs: []DeliveryCursor{{s, "u2", "phone", 3}, {s, "u3", "web", 3}}},
		{rows: []*Batch{{Rows: rowsOf(t, memberEv(s, 4, "u1", opRemove, "u2"))}},
			// u2's own late receipt, after the removal.
			reads: []ReadCursor{{s, "u2", 4}}, delivs: []DeliveryCursor{{s, "u2", "phone", 4}}},
		{rows: []*Batch{{Rows: rowsOf(t, memberEv(s, 5, "u1", opAdd, "u2"), msgEv(s, 6, "u1", "c"))}},
			// Below u2's new joined seq (5): not stored; u3 reads on.
			reads: []ReadCursor{{s, "u2", 3}, {s, "u3", 6}}, delivs: []DeliveryCursor{{s, "u2", "phone", 4}}},
		// u2 reads on after rejoining: above the seq it left at, so a
		// removal applied after this receipt leaves it alone.
		{rows: []*Batch{{}}, reads: []ReadCursor{{s, "u2", 6}}, delivs: []DeliveryCursor{{s, "u2", "laptop", 6}}},
	}
	want := []string{"u2/laptop=6", "u2=6", "u3/web=3", "u3=6"}

	t.Run("receipts with their events", func(t *testing.T) {
		pool, schema := freshSchema(t)
		w := NewWriter(pool, schema)
		for i, st := range steps {
			_, err := w.Write(ctx, &Batch{Rows: st.rows[0].Rows, Reads: st.reads, Deliveries: st.delivs})
			requireNoErr(t, err)
			if i == 1 {
				if got := cursorsOf(t, pool, schema, s); !slices.Equal(got, []string{"u3/web=3", "u3=2"}) {
					t.Fatalf("after u2's removal and late receipts: %v, want u3's alone", got)
				}
			}
		}
		if got := cursorsOf(t, pool, schema, s); !slices.Equal(got, want) {
			t.Fatalf("cursors %v, want %v", got, want)
		}
	})
	for _, order := range []string{"events first (a rebuild)", "receipts first"} {
		t.Run(order, func(t *testing.T) {
			pool, schema := freshSchema(t)
			w := NewWriter(pool, schema)
			events := func() {
				for _, st := range steps {
					_, err := w.Write(ctx, &Batch{Rows: st.rows[0].Rows})
					requireNoErr(t, err)
				}
			}
			receipts := func() {
				for _, st := range steps {
					_, err := w.Write(ctx, &Batch{Reads: st.reads, Deliveries: st.delivs})
					requireNoErr(t, err)
				}
			}
			if order == "receipts first" {
				receipts()
				events()
			} else {
				events()
				receipts()
			}
			if got := cursorsOf(t, pool, schema, s); !slices.Equal(got, want) {
				t.Fatalf("cursors %v, want %v", got, want)
			}
		})
	}
}
