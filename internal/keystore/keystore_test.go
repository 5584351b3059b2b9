package keystore

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seqflow/seqflow/internal/testkit/stack"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// These tests run against the stack's PostgreSQL (no fake); users and
// sessions are random, so they share the key tables with other tests.

func newKEK(t testing.TB) *LocalKEK {
	t.Helper()
	b := make([]byte, KeyBytes)
	_, _ = rand.Read(b)
	k, err := ParseKEK(base64.StdEncoding.EncodeToString(b))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	st := stack.Require(t, "pg")
	p, err := pgxpool.New(context.Background(), st.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func open(t testing.TB, p *pgxpool.Pool, w Wrapper, o Options) *Store {
	t.Helper()
	s, err := Open(context.Background(), p, w, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func id(prefix string) string { return prefix + "-" + uuid.NewString()[:8] }

func TestParseKEK(t *testing.T) {
	for _, bad := range []string{"", "not base64!", base64.StdEncoding.EncodeToString(make([]byte, 16))} {
		if _, err := ParseKEK(bad); err == nil {
			t.Errorf("ParseKEK(%q) accepted", bad)
		}
	}
	a, b := newKEK(t), newKEK(t)
	if a.ID() == b.ID() {
		t.Errorf("two KEKs share the ID %s", a.ID())
	}
}

func TestSealOpenAndEraseUser(t *testing.T) {
	ctx := context.Background()
	p, kek := pool(t), newKEK(t)
	s := open(t, p, kek, Options{CacheTTL: 100 * time.Millisecond})
	alice, bob, sess := id("alice"), id("bob"), id("s")

	c := &imv1.MessageContent{Type: "text", Body: []byte("meet me at noon")}
	if err := s.SealContent(ctx, sess, alice, c); err != nil {
		t.Fatal(err)
	}
	if c.KeyId == 0 || bytes.Contains(c.Body, []byte("noon")) {
		t.Fatalf("sealed content %v still readable", c)
	}
	k2, err := s.ForWrite(ctx, alice, sess)
	if err != nil || k2.ID != c.KeyId {
		t.Fatalf("second key of the same slot: %d %v, want %d", k2.ID, err, c.KeyId)
	}
	// Another process (no cache) opens it; under another session or sender
	// it does not open.
	other := open(t, p, kek, Options{CacheTTL: 200 * time.Millisecond})
	got, err := other.OpenBody(ctx, c.KeyId, c.Body, sess, alice)
	if err != nil || string(got) != "meet me at noon" {
		t.Fatalf("open: %q %v", got, err)
	}
	if _, err := other.OpenBody(ctx, c.KeyId, c.Body, sess, bob); err == nil {
		t.Fatal("a body opened as another sender's")
	}
	// A process holding another KEK cannot unwrap it, and says so.
	if _, err := open(t, p, newKEK(t), Options{}).OpenBody(ctx, c.KeyId, c.Body, sess, alice); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("open under another KEK: %v, want ErrUnavailable", err)
	}
	cb := &imv1.MessageContent{Type: "text", Body: []byte("bob's words")}
	if err := s.SealContent(ctx, sess, bob, cb); err != nil {
		t.Fatal(err)
	}

	e, err := s.EraseUser(ctx, alice, "test")
	if err != nil || e.KeysDestroyed != 1 || e.Again {
		t.Fatalf("erase: %+v %v, want 1 key destroyed", e, err)
	}
	// A fresh process: destroyed at once. The process that cached the key:
	// once its cache TTL passes.
	if _, err := open(t, p, kek, Options{}).OpenBody(ctx, c.KeyId, c.Body, sess, alice); !errors.Is(err, ErrDestroyed) || !Erased(err) {
		t.Fatalf("open after erase: %v, want ErrDestroyed", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := other.OpenBody(ctx, c.KeyId, c.Body, sess, alice)
		if errors.Is(err, ErrDestroyed) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the caching process still opens an erased body: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := open(t, p, kek, Options{}).ForWrite(ctx, alice, id("s")); !errors.Is(err, ErrOwnerErased) {
		t.Fatalf("a key for an erased user: %v, want ErrOwnerErased", err)
	}
	if got, err := other.OpenBody(ctx, cb.KeyId, cb.Body, sess, bob); err != nil || string(got) != "bob's words" {
		t.Fatalf("bob's body after alice's erasure: %q %v", got, err)
	}
	if _, err := other.OpenBody(ctx, 1<<62, []byte("x"), sess, bob); !errors.Is(err, ErrUnknown) {
		t.Fatalf("unknown key: %v", err)
	}
	var n int
	if err := p.QueryRow(ctx, `SELECT count(*) FROM seqflow_data_keys WHERE owner_user_id = $1`, alice).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d keys of alice left (%v)", n, err)
	}
	if e, err := s.EraseUser(ctx, alice, "test"); err != nil || !e.Again {
		t.Fatalf("second erase: %+v %v, want Again", e, err)
	}
}

// TestEraseRacesKeyMaking: keys made while the owner is erased are either
// destroyed by the erasure or refused; none survives it.
func TestEraseRacesKeyMaking(t *testing.T) {
	ctx := context.Background()
	p, kek := pool(t), newKEK(t)
	user := id("u")
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := open(t, p, kek, Options{})
			for j := range 20 {
				_, err := s.ForWrite(ctx, user, id("s"))
				if err != nil && !errors.Is(err, ErrOwnerErased) {
					t.Errorf("maker %d/%d: %v", i, j, err)
				}
			}
		}()
	}
	time.Sleep(20 * time.Millisecond)
	if _, err := open(t, p, kek, Options{}).EraseUser(ctx, user, "test"); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	var n int
	if err := p.QueryRow(ctx, `SELECT count(*) FROM seqflow_data_keys WHERE owner_user_id = $1`, user).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d keys of the erased user survive (%v)", n, err)
	}
}

func TestExpireBefore(t *testing.T) {
	ctx := context.Background()
	p, kek := pool(t), newKEK(t)
	now := time.Date(2026, 1, 1, 10, 30, 0, 0, time.UTC)
	s := open(t, p, kek, Options{Period: time.Hour, Now: func() time.Time { return now }})
	user, sess := id("u"), id("s")
	old, err := s.ForWrite(ctx, user, sess)
	if err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Hour) // 12:30, a later period
	cur, err := s.ForWrite(ctx, user, sess)
	if err != nil || cur.ID == old.ID {
		t.Fatalf("a new period's key %d %v, the old was %d", cur.ID, err, old.ID)
	}
	// Cutoff 11:59: the 10:00 period ended at 11:00, the 12:00 one not.
	n, err := s.ExpireBefore(ctx, sess, time.Date(2026, 1, 1, 11, 59, 0, 0, time.UTC))
	if err != nil || n != 1 {
		t.Fatalf("expired %d (%v), want 1", n, err)
	}
	fresh := open(t, p, kek, Options{Period: time.Hour})
	if _, err := fresh.Get(ctx, old.ID); !errors.Is(err, ErrDestroyed) {
		t.Fatalf("the expired key: %v", err)
	}
	if _, err := fresh.Get(ctx, cur.ID); err != nil {
		t.Fatalf("the current key: %v", err)
	}
}

// TestUnavailable: an unreachable key store is ErrUnavailable, never a
// key or a plaintext fallback.
func TestUnavailable(t *testing.T) {
	p, err := pgxpool.New(context.Background(), "postgres://x@127.0.0.1:1/x?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := Open(ctx, p, newKEK(t), Options{}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("open: %v, want ErrUnavailable", err)
	}
	s := newStore(p, newKEK(t), Options{}) // as if the store went away after Open
	c := &imv1.MessageContent{Type: "text", Body: []byte("secret")}
	if err := s.SealContent(ctx, "s", "u", c); !errors.Is(err, ErrUnavailable) || c.KeyId != 0 || string(c.Body) != "secret" {
		t.Fatalf("seal: %v, content %v: want ErrUnavailable and the content untouched", err, c)
	}
}

// TestRetention: ApplyRetention destroys the keys whose period ended more
// than the session's policy (or the policy of every session) before now,
// and no other. The clock is in 2001, so keys other tests make now (this
// database is shared) are never old enough; the policy of every session
// is removed again at the end.
func TestRetention(t *testing.T) {
	ctx := context.Background()
	p, kek := pool(t), newKEK(t)
	now := time.Date(2001, 6, 1, 0, 0, 0, 0, time.UTC)
	s := open(t, p, kek, Options{Period: time.Hour, Now: func() time.Time { return now }})
	t.Cleanup(func() { _ = s.SetRetention(context.Background(), AllSessions, 0) })
	u, a, b, c := id("u"), id("a"), id("b"), id("c")
	mk := func(session string, at time.Time) Key {
		t.Helper()
		now = at
		k, err := s.ForWrite(ctx, u, session)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	bOld := mk(b, time.Date(2001, 1, 1, 0, 10, 0, 0, time.UTC)) // ends Jan 1 01:00
	a1 := mk(a, time.Date(2001, 6, 1, 0, 10, 0, 0, time.UTC))   // ends 01:00
	a2 := mk(a, time.Date(2001, 6, 1, 5, 10, 0, 0, time.UTC))   // ends 06:00
	c1 := mk(c, time.Date(2001, 6, 1, 0, 10, 0, 0, time.UTC))   // ends 01:00

	for _, bad := range []time.Duration{-time.Hour, time.Millisecond} {
		if err := s.SetRetention(ctx, a, bad); err == nil {
			t.Errorf("SetRetention(%s) accepted", bad)
		}
	}
	if err := s.SetRetention(ctx, "", time.Hour); err == nil {
		t.Error("SetRetention without a scope accepted")
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.SetRetention(ctx, a, 2*time.Hour))
	must(s.SetRetention(ctx, AllSessions, 30*24*time.Hour))
	must(s.SetRetention(ctx, c, time.Hour))
	must(s.SetRetention(ctx, c, 0)) // c falls back to every session's 30 days
	ps, err := s.Retentions(ctx)
	must(err)
	if len(ps) < 2 || ps[0].Scope != AllSessions || ps[0].Keep != 30*24*time.Hour {
		t.Fatalf("policies %+v, want * first", ps)
	}

	now = time.Date(2001, 6, 1, 7, 30, 0, 0, time.UTC) // a's cutoff 05:30, the others' May 2
	n, err := s.ApplyRetention(ctx)
	must(err)
	fresh := open(t, p, kek, Options{})
	for _, k := range []struct {
		name string
		key  Key
		gone bool
	}{{"b's January key (every session's 30 days)", bOld, true}, {"a's key that ended at 01:00 (a's 2h)", a1, true},
		{"a's key that ended at 06:00", a2, false}, {"c's key (its own policy removed)", c1, false}} {
		_, err := fresh.Get(ctx, k.key.ID)
		if gone := errors.Is(err, ErrDestroyed); gone != k.gone || (!gone && err != nil) {
			t.Errorf("%s: %v, want destroyed %v", k.name, err, k.gone)
		}
	}
	if n < 2 {
		t.Errorf("ApplyRetention destroyed %d keys, want at least this test's 2", n)
	}
}

// TestRotateKEK: a store whose current KEK is B and previous A opens keys
// wrapped with A and makes new ones with B; Rewrap moves A's keys to B,
// after which B alone opens them and A alone opens none.
func TestRotateKEK(t *testing.T) {
	ctx := context.Background()
	p, a, b := pool(t), newKEK(t), newKEK(t)
	u := id("u")
	sa := open(t, p, a, Options{})
	k1, err := sa.ForWrite(ctx, u, id("s"))
	if err != nil {
		t.Fatal(err)
	}
	k2, err := sa.ForWrite(ctx, u, id("s"))
	if err != nil {
		t.Fatal(err)
	}
	sealed := k1.Seal([]byte("before the rotation"), "s", u)

	if _, err := open(t, p, b, Options{}).Get(ctx, k1.ID); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "SEQFLOW_KEK_PREVIOUS") {
		t.Fatalf("B alone, a key under A: %v, want ErrUnavailable naming SEQFLOW_KEK_PREVIOUS", err)
	}
	sb := open(t, p, b, Options{Previous: []Wrapper{a}})
	if got, err := sb.Get(ctx, k1.ID); err != nil {
		t.Fatalf("B with A as previous: %v", err)
	} else if plain, err := got.Open(sealed, "s", u); err != nil || string(plain) != "before the rotation" {
		t.Fatalf("open under the rotating store: %q %v", plain, err)
	}
	k3, err := sb.ForWrite(ctx, u, id("s"))
	if err != nil {
		t.Fatal(err)
	}
	moved, _, err := sb.Rewrap(ctx)
	if err != nil || moved != 2 {
		t.Fatalf("rewrap moved %d (%v), want A's 2 keys", moved, err)
	}
	uses, err := sb.KEKs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, use := range uses {
		if use.KEKID == a.ID() {
			t.Errorf("%d keys still under A after the rewrap", use.Keys)
		}
	}
	bOnly, aOnly := open(t, p, b, Options{}), open(t, p, a, Options{})
	for _, k := range []Key{k1, k2, k3} {
		if _, err := bOnly.Get(ctx, k.ID); err != nil {
			t.Errorf("B alone after the rewrap, key %d: %v", k.ID, err)
		}
		if _, err := aOnly.Get(ctx, k.ID); !errors.Is(err, ErrUnavailable) {
			t.Errorf("A alone after the rewrap, key %d: %v, want ErrUnavailable", k.ID, err)
		}
	}
}

// TestKeysInUseStayCached: a key used all the time is confirmed in the
// background before its cache entry expires, so neither sealing nor
// opening goes to PostgreSQL on the caller's path again after the first
// use, over many cache lives; once destroyed, it still leaves the cache
// within the TTL.
func TestKeysInUseStayCached(t *testing.T) {
	ctx := context.Background()
	p, kek := pool(t), newKEK(t)
	const ttl = 200 * time.Millisecond
	s := open(t, p, kek, Options{CacheTTL: ttl})
	reader := open(t, p, kek, Options{CacheTTL: ttl})
	alice, sess := id("alice"), id("s")
	c := &imv1.MessageContent{Type: "text", Body: []byte("hello")}
	if err := s.SealContent(ctx, sess, alice, c); err != nil {
		t.Fatal(err)
	}
	if _, err := reader.OpenBody(ctx, c.KeyId, c.Body, sess, alice); err != nil {
		t.Fatal(err)
	}
	sealMisses, openMisses := s.misses.Load(), reader.misses.Load()
	if sealMisses != 1 || openMisses != 1 {
		t.Fatalf("first use: %d seal misses, %d open misses, want 1 each", sealMisses, openMisses)
	}
	for end := time.Now().Add(10 * ttl); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if _, err := s.ForWrite(ctx, alice, sess); err != nil {
			t.Fatal(err)
		}
		if _, err := reader.OpenBody(ctx, c.KeyId, c.Body, sess, alice); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.misses.Load(); got != sealMisses {
		t.Errorf("sealing went to PostgreSQL %d more times over 10 cache lives of a key in use", got-sealMisses)
	}
	if got := reader.misses.Load(); got != openMisses {
		t.Errorf("opening went to PostgreSQL %d more times over 10 cache lives of a key in use", got-openMisses)
	}

	if _, err := s.EraseUser(ctx, alice, "test"); err != nil {
		t.Fatal(err)
	}
	erased := time.Now()
	for {
		_, err := reader.OpenBody(ctx, c.KeyId, c.Body, sess, alice)
		if errors.Is(err, ErrDestroyed) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		// The bound is the TTL since the last confirmation, which came
		// before the erasure; allow a scheduling margin on a busy box.
		if time.Since(erased) > ttl+time.Second {
			t.Fatalf("an erased key still opens %v after the erasure (cache TTL %v)", time.Since(erased), ttl)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestNextPeriodKeyMadeAhead: a key in use within half a cache life of
// its period's end has the next period's key made in the background, so
// the first send of the new period finds its key cached (no PostgreSQL on
// the sender's path); it is the next period's row, a different key.
func TestNextPeriodKeyMadeAhead(t *testing.T) {
	ctx := context.Background()
	p, kek := pool(t), newKEK(t)
	const period, ttl = time.Hour, 10 * time.Second
	base := time.Unix((time.Now().Unix()/3600+2)*3600, 0) // a period start, in the future
	now := base.Add(time.Minute)
	s := open(t, p, kek, Options{Period: period, CacheTTL: ttl, Now: func() time.Time { return now }})
	alice, sess := id("alice"), id("s")
	rows := func() int {
		var n int
		if err := p.QueryRow(ctx, `SELECT count(*) FROM seqflow_data_keys WHERE owner_user_id = $1 AND session_id = $2`, alice, sess).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	k1, err := s.ForWrite(ctx, alice, sess)
	if err != nil {
		t.Fatal(err)
	}
	// A minute before the end: more than half a cache life, nothing yet.
	now = base.Add(period - time.Minute)
	if _, err := s.ForWrite(ctx, alice, sess); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if n := rows(); n != 1 {
		t.Fatalf("%d keys a minute before the period's end, want 1", n)
	}
	// Two seconds before the end: the next period's key is made.
	now = base.Add(period - 2*time.Second)
	if k, err := s.ForWrite(ctx, alice, sess); err != nil || k.ID != k1.ID {
		t.Fatalf("key %d, %v before the period's end, want %d", k.ID, err, k1.ID)
	}
	next := slot{alice, sess, base.Add(period).Unix()}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, ok, _ := s.bySlot.Get(next); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the next period's key was not made ahead within 5 s")
		}
	}
	misses := s.misses.Load()
	now = base.Add(period + time.Second)
	k2, err := s.ForWrite(ctx, alice, sess)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.misses.Load(); got != misses {
		t.Errorf("the first send of the period went to PostgreSQL (%d misses, want %d)", got, misses)
	}
	var want int64
	if err := p.QueryRow(ctx, `SELECT key_id FROM seqflow_data_keys WHERE owner_user_id = $1 AND session_id = $2
		AND period_start = to_timestamp($3)`, alice, sess, base.Add(period).Unix()).Scan(&want); err != nil {
		t.Fatal(err)
	}
	if k2.ID == k1.ID || k2.ID != want {
		t.Fatalf("key %d in the new period, want the new period's row %d (the last period's was %d)", k2.ID, want, k1.ID)
	}
}
