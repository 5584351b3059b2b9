package store

import (
	"context"
	"slices"
	"testing"
)

// TestSeenBy checks who has read a message: current members with a read
// cursor at or past its seq, never its sender, without the hidden users
// (count and list), with the list only up to listUpTo members.
func TestSeenBy(t *testing.T) {
	pool, schema := freshSchema(t)
	ctx := context.Background()
	w := NewWriter(pool, schema)
	st, err := Open(ctx, pool, schema)
	requireNoErr(t, err)
	const s = "seen"
	// seq 1 create (u1..u5), 2 u1's message, 3 u2's message, 4 u5 removed.
	b := &Batch{Rows: rowsOf(t,
		createEv(s, 1, "u1", s, "u2", "u3", "u4", "u5"),
		msgEv(s, 2, "u1", "hello"),
		msgEv(s, 3, "u2", "hi"),
		memberEv(s, 4, "u1", opRemove, "u5"),
	), Reads: []ReadCursor{{s, "u1", 3}, {s, "u2", 2}, {s, "u3", 1}, {s, "u4", 3}, {s, "u5", 3}},
		Offsets: []Offset{{"t", 0, 1}}}
	_, err = w.Write(ctx, b)
	requireNoErr(t, err)

	for _, c := range []struct {
		name      string
		seq       int64
		listUpTo  int
		hidden    []string
		wantUsers []string // nil: not listed
		wantCount int64
	}{
		{"sender and readers below seq left out", 2, 10, nil, []string{"u2", "u4"}, 2},
		{"another sender", 3, 10, nil, []string{"u1", "u4"}, 2},
		{"hidden neither listed nor counted", 2, 10, []string{"u4"}, []string{"u2"}, 1},
		{"hidden who has not read changes nothing", 2, 10, []string{"u3"}, []string{"u2", "u4"}, 2},
		{"above listUpTo only counted", 2, 3, nil, nil, 2},
		{"nobody past the last seq", 9, 10, nil, []string{}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			users, count, members, err := st.SeenByExcept(ctx, s, c.seq, c.listUpTo, c.hidden)
			requireNoErr(t, err)
			if (users == nil) != (c.wantUsers == nil) || !slices.Equal(users, c.wantUsers) {
				t.Fatalf("users = %#v, want %#v", users, c.wantUsers)
			}
			require(t, count, c.wantCount, "count")
			require(t, members, 4, "members (u5 left)")
			if c.hidden == nil {
				u2, count2, members2, err := st.SeenBy(ctx, s, c.seq, c.listUpTo)
				requireNoErr(t, err)
				if !slices.Equal(u2, users) || count2 != count || members2 != members {
					t.Fatalf("SeenBy = %v %d %d, SeenByExcept(nil) = %v %d %d", u2, count2, members2, users, count, members)
				}
			}
		})
	}
}
