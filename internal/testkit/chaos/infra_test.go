package chaos

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// need fails the test under the test task (SEQFLOW_REQUIRE_STACK=1) when
// a binary the suite runs is missing, and skips it otherwise.
func need(t *testing.T, bin string) {
	t.Helper()
	if _, err := exec.LookPath(bin); err == nil {
		return
	}
	if bin == "pg_ctl" {
		if _, err := pgBinDir(); err == nil {
			return
		}
	}
	if os.Getenv("SEQFLOW_REQUIRE_STACK") == "1" {
		t.Fatalf("%s not found; the chaos suite runs its own instance", bin)
	}
	t.Skipf("%s not found; the chaos suite runs its own instance", bin)
}

// TestPrivateRedisRestartComesBackEmpty: the suite's Redis fault really
// loses the data.
func TestPrivateRedisRestartComesBackEmpty(t *testing.T) {
	need(t, "redis-server")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := startRedis(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer rdb.Close()
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.restart(ctx, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if n, err := rdb.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("after the restart: exists = %d, %v; want 0 (data gone)", n, err)
	}
}

// TestPrivatePostgresSurvivesCrashRestart: an immediate stop (no
// checkpoint) and start keeps committed rows: the fault tests recovery,
// it does not lose data PostgreSQL promised to keep.
func TestPrivatePostgresSurvivesCrashRestart(t *testing.T) {
	need(t, "pg_ctl")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// Not t.TempDir: its parent is private to root, and PostgreSQL runs
	// as the postgres user.
	dir, err := os.MkdirTemp("", "seqflow-chaos-pgtest-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	pg, err := startPostgres(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer pg.close()
	exec1 := func(sql string) error {
		c, err := pgx.Connect(ctx, pg.URL)
		if err != nil {
			return err
		}
		defer c.Close(ctx)
		_, err = c.Exec(ctx, sql)
		return err
	}
	if err := exec1(`CREATE TABLE t (v int); INSERT INTO t VALUES (7)`); err != nil {
		t.Fatal(err)
	}
	if err := pg.restart(ctx, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	c, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var v int
	if err := c.QueryRow(ctx, `SELECT v FROM t`).Scan(&v); err != nil || v != 7 {
		t.Fatalf("after the restart: v = %d, %v; want 7", v, err)
	}
}
