package segment

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seqflow/seqflow/internal/migrate"
	"github.com/seqflow/seqflow/internal/testkit/stack"
)

func TestBook(t *testing.T) {
	b := NewBook(10, 5)
	reqs := b.Shortfall(map[string]int{"s": 3, "t": 12})
	want := []Request{{SessionID: "s", N: 10}, {SessionID: "t", N: 12}}
	if fmt.Sprint(reqs) != fmt.Sprint(want) {
		t.Fatalf("Shortfall = %v, want %v", reqs, want)
	}
	if err := b.Add([]Grant{{"s", Range{1, 10}}, {"t", Range{1, 12}}}); err != nil {
		t.Fatal(err)
	}
	b.Begin()
	for want := int64(1); want <= 6; want++ {
		if got, ok := b.Take("s"); !ok || got != want {
			t.Fatalf("Take = %d %v, want %d", got, ok, want)
		}
	}
	// 4 left + 6 in flight = 10: no top-up yet.
	if low := b.Low([]string{"s"}); len(low) != 0 {
		t.Fatalf("Low with in-flight seqs = %v, want none", low)
	}
	b.Rewind() // the batch aborted: 1..6 come back
	if got, _ := b.Take("s"); got != 1 {
		t.Fatalf("after Rewind Take = %d, want 1", got)
	}
	b.Commit()
	for i := 0; i < 5; i++ {
		b.Take("s")
	}
	b.Commit() // 4 left, nothing in flight: below low water 5
	low := b.Low([]string{"s"})
	if len(low) != 1 || low[0].N != 6 {
		t.Fatalf("Low = %v, want a top-up of 6", low)
	}
	// A non-contiguous grant (someone else reserved in between) is kept.
	if err := b.Add([]Grant{{"s", Range{21, 26}}}); err != nil {
		t.Fatal(err)
	}
	var got []int64
	for {
		q, ok := b.Take("s")
		if !ok {
			break
		}
		got = append(got, q)
	}
	if fmt.Sprint(got) != "[7 8 9 10 21 22 23 24 25 26]" {
		t.Fatalf("seqs = %v", got)
	}
	if err := b.Add([]Grant{{"s", Range{25, 30}}}); err == nil {
		t.Fatal("a grant below what the book handed out must be refused")
	}
}

// TestPGStoreNeverHandsOutARangeTwice races owners over the same sessions
// against the real session_seq table.
func TestPGStoreNeverHandsOutARangeTwice(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	store := NewPGStore(pool, 7)
	var sessions []string
	for i := 0; i < 5; i++ {
		sessions = append(sessions, "seg-test-"+uuid.NewString())
	}
	var mu sync.Mutex
	got := map[string][]Range{}
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				var reqs []Request
				for j, s := range sessions {
					if (i+j+w)%2 == 0 {
						reqs = append(reqs, Request{SessionID: s, N: int64(1 + (i+w)%7)})
					}
				}
				sortRequests(reqs)
				grants, err := store.Reserve(ctx, reqs)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, g := range grants {
					got[g.SessionID] = append(got[g.SessionID], g.Range)
				}
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	for s, rs := range got {
		sort.Slice(rs, func(i, j int) bool { return rs[i].Lo < rs[j].Lo })
		if rs[0].Lo != 1 {
			t.Errorf("%s: first range starts at %d, want 1", s, rs[0].Lo)
		}
		for i := 1; i < len(rs); i++ {
			if rs[i].Lo != rs[i-1].Hi+1 {
				t.Errorf("%s: ranges %v and %v overlap or leave a hole", s, rs[i-1], rs[i])
			}
		}
	}
}

// TestPGStoreReleaseGivesBackOnlyAnUntouchedTail: a released range is
// handed out again only when nobody reserved past it.
func TestPGStoreReleaseGivesBackOnlyAnUntouchedTail(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	store := NewPGStore(pool, 10)
	s := "seg-release-" + uuid.NewString()
	a := NewBook(10, 0)
	g, err := store.Reserve(ctx, a.Shortfall(map[string]int{s: 1}))
	if err != nil || a.Add(g) != nil {
		t.Fatal(err)
	}
	a.Take(s)
	a.Take(s)
	a.Commit() // 1 and 2 are used; 3..10 unused
	if n, err := store.Release(ctx, a.Unused()); err != nil || n != 1 {
		t.Fatalf("release = %d, %v; want 1", n, err)
	}
	b := NewBook(10, 0)
	g, err = store.Reserve(ctx, b.Shortfall(map[string]int{s: 1}))
	if err != nil || b.Add(g) != nil {
		t.Fatal(err)
	}
	if got, _ := b.Take(s); got != 3 {
		t.Fatalf("after the release the next owner starts at %d, want 3", got)
	}
	// a's stale range no longer ends at max_seq: releasing it again is a no-op.
	if n, err := store.Release(ctx, []Grant{{s, Range{3, 10}}}); err != nil || n != 0 {
		t.Fatalf("stale release = %d, %v; want 0", n, err)
	}
	if got, _ := b.Take(s); got != 4 {
		t.Fatalf("b's range was disturbed: took %d, want 4", got)
	}
}

// TestPGStoreReserveAfterRestartsAtTheLastCommittedSeq: a new owner that
// names the session's last committed seq gets the range right after it,
// whatever crashed owners reserved beyond it, and also when the row is
// behind the log or missing.
func TestPGStoreReserveAfterRestartsAtTheLastCommittedSeq(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	store := NewPGStore(pool, 10)
	crashed, behind, missing, plain := "seg-after-a-"+uuid.NewString(), "seg-after-b-"+uuid.NewString(), "seg-after-c-"+uuid.NewString(), "seg-after-d-"+uuid.NewString()
	// Two owners in a row reserved 1..10 and 11..20 for crashed and
	// committed only 1..4; behind's row says 5 though the log has 9;
	// plain's row is at 10.
	for _, r := range []Request{{SessionID: crashed, N: 10}, {SessionID: crashed, N: 10}, {SessionID: behind, N: 5}, {SessionID: plain, N: 10}} {
		if _, err := store.Reserve(ctx, []Request{r}); err != nil {
			t.Fatal(err)
		}
	}
	reqs := []Request{{SessionID: crashed, N: 10, After: 4}, {SessionID: behind, N: 10, After: 9}, {SessionID: missing, N: 10, After: 3}, {SessionID: plain, N: 10}}
	sortRequests(reqs)
	grants, err := store.Reserve(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Range{}
	for _, g := range grants {
		got[g.SessionID] = g.Range
	}
	want := map[string]Range{crashed: {5, 14}, behind: {10, 19}, missing: {4, 13}, plain: {11, 20}}
	for s, w := range want {
		if got[s] != w {
			t.Errorf("session %s: granted %v, want %v", s, got[s], w)
		}
	}
	// Later reservations without After extend from there.
	g, err := store.Reserve(ctx, []Request{{SessionID: crashed, N: 10}})
	if err != nil || len(g) != 1 || g[0].Range != (Range{15, 24}) {
		t.Fatalf("next reservation = %v, %v; want 15..24", g, err)
	}
}

// TestBookResume: only the first request of a resumed session names its
// last committed seq.
func TestBookResume(t *testing.T) {
	b := NewBook(10, 5)
	b.Resume(map[string]int64{"s": 42})
	reqs := b.Shortfall(map[string]int{"s": 1, "t": 1})
	want := []Request{{SessionID: "s", N: 10, After: 42}, {SessionID: "t", N: 10}}
	if fmt.Sprint(reqs) != fmt.Sprint(want) {
		t.Fatalf("Shortfall = %v, want %v", reqs, want)
	}
	if err := b.Add([]Grant{{"s", Range{43, 52}}}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 6; i++ {
		b.Take("s")
	}
	b.Commit()
	if low := b.Low([]string{"s"}); len(low) != 1 || low[0].After != 0 {
		t.Fatalf("Low after the first grant = %v, want a plain top-up", low)
	}
}

// migratedPool connects to the local stack's PostgreSQL, applies the
// migrations and closes the pool when the test ends.
func migratedPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	st := stack.Require(t, "pg")
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, st.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := migrate.Up(ctx, pool, ""); err != nil {
		t.Fatal(err)
	}
	return pool
}
