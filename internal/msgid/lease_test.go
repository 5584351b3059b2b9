package msgid

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seqflow/seqflow/internal/migrate"
	"github.com/seqflow/seqflow/internal/testkit/stack"
)

// leaseDB connects to the local stack's PostgreSQL with node_lease
// migrated; the pool closes with the test.
func leaseDB(t *testing.T) (*pgxpool.Pool, *slog.Logger) {
	t.Helper()
	st := stack.Require(t, "pg")
	pool, err := pgxpool.New(context.Background(), st.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := migrate.Up(context.Background(), pool, ""); err != nil {
		t.Fatal(err)
	}
	return pool, slog.New(slog.NewTextHandler(os.Stderr, nil))
}

// TestLeaseAgainstPostgres: two live instances never share a node; a
// lease taken over is lost for the old holder, whose generator stops; the
// new holder's IDs start after the old holder's promise.
func TestLeaseAgainstPostgres(t *testing.T) {
	ctx := context.Background()
	pool, log := leaseDB(t)
	a, err := Acquire(ctx, pool, "a-"+uuid.NewString(), 3*time.Second, WallClock, time.Second, log)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Acquire(ctx, pool, "b-"+uuid.NewString(), 3*time.Second, WallClock, time.Second, log)
	if err != nil {
		t.Fatal(err)
	}
	if a.Gen.Node() == b.Gen.Node() {
		t.Fatalf("two live leases share node %d", a.Gen.Node())
	}
	idA, err := a.Gen.Next()
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Renew(ctx); err != nil {
		t.Fatalf("renew a live lease: %v", err)
	}
	// Expire a's lease in the database, as if a had been paused past its
	// TTL, and let another holder take exactly that node.
	if _, err := pool.Exec(ctx, `UPDATE node_lease SET expires_at = now() - interval '1 second' WHERE node_id = $1`, a.Gen.Node()); err != nil {
		t.Fatal(err)
	}
	c, err := acquire(ctx, pool, "c-"+uuid.NewString(), 3*time.Second, WallClock, time.Second, log, a.Gen.Node())
	if err != nil {
		t.Fatal(err)
	}
	if c.Gen.Node() != a.Gen.Node() {
		t.Fatalf("took node %d, want the expired node %d", c.Gen.Node(), a.Gen.Node())
	}
	idC, err := c.Gen.Next()
	if err != nil {
		t.Fatal(err)
	}
	if idC <= idA {
		t.Fatalf("new holder's id %d is not above the old holder's %d", idC, idA)
	}
	if idC.Time() < time.Now().Add(-time.Second).UnixMilli() {
		t.Fatalf("new holder issued an id in the past: %d", idC.Time())
	}
	if err := a.Renew(ctx); !errors.Is(err, ErrLeaseLapsed) {
		t.Fatalf("old holder renewed a taken-over lease: %v", err)
	}
	if _, err := a.Gen.Next(); !errors.Is(err, ErrLeaseLapsed) {
		t.Fatalf("old holder still issues ids: %v", err)
	}
}

// TestAcquirePrefersNodeWithoutPromise: a node released a moment ago still
// carries its holder's promise; a new holder (a restart) takes a node it
// need not wait for.
func TestAcquirePrefersNodeWithoutPromise(t *testing.T) {
	ctx := context.Background()
	pool, log := leaseDB(t)
	a, err := Acquire(ctx, pool, "a-"+uuid.NewString(), 30*time.Second, WallClock, time.Second, log)
	if err != nil {
		t.Fatal(err)
	}
	a.release()
	var promise time.Time
	if err := pool.QueryRow(ctx, `SELECT to_timestamp(issued_until_ms / 1000.0) FROM node_lease WHERE node_id = $1`, a.Gen.Node()).Scan(&promise); err != nil {
		t.Fatal(err)
	}
	if !promise.After(time.Now()) {
		t.Fatalf("released node %d promises only until %s: the test needs a pending promise", a.Gen.Node(), promise)
	}
	b, err := Acquire(ctx, pool, "b-"+uuid.NewString(), 30*time.Second, WallClock, time.Second, log)
	if err != nil {
		t.Fatal(err)
	}
	defer b.release()
	if b.Gen.Node() == a.Gen.Node() {
		t.Fatalf("took back node %d, released with a promise until %s, while nodes without one were free", a.Gen.Node(), promise)
	}
}
