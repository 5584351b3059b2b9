package segment

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/seqflow/seqflow/internal/migrate"
	"github.com/seqflow/seqflow/internal/testkit/stack"
)

// The three ways to hand out a session's seqs that the seeds weigh, one
// seq per op each, against the real local PostgreSQL and Redis:
//
//	segment:   this package (one reservation round trip per step seqs)
//	pg_update: one UPDATE ... RETURNING per seq
//	redis:     one INCR per seq (seed 000's first design)
//
// Run: go test -run XXX -bench BenchmarkAlloc ./internal/segment

func benchPool(b *testing.B) *pgxpool.Pool {
	st := stack.Require(b, "pg")
	pool, err := pgxpool.New(context.Background(), st.PGURL)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	if _, err := migrate.Up(context.Background(), pool, ""); err != nil {
		b.Fatal(err)
	}
	return pool
}

func BenchmarkAlloc_Segment(b *testing.B) {
	pool := benchPool(b)
	ctx := context.Background()
	store := NewPGStore(pool, 1000)
	book := NewBook(1000, 0)
	s := "bench-" + uuid.NewString()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, ok := book.Take(s); !ok {
			grants, err := store.Reserve(ctx, book.Shortfall(map[string]int{s: 1}))
			if err != nil {
				b.Fatal(err)
			}
			if err := book.Add(grants); err != nil {
				b.Fatal(err)
			}
			book.Take(s)
		}
		book.Commit()
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "seqs/s")
}

func BenchmarkAlloc_PGUpdate(b *testing.B) {
	pool := benchPool(b)
	ctx := context.Background()
	s := "bench-" + uuid.NewString()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var seq int64
		err := pool.QueryRow(ctx, `INSERT INTO session_seq AS t (session_id, max_seq, step) VALUES ($1, 1, 1)
			ON CONFLICT (session_id) DO UPDATE SET max_seq = t.max_seq + 1 RETURNING max_seq`, s).Scan(&seq)
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "seqs/s")
}

func BenchmarkAlloc_RedisIncr(b *testing.B) {
	st := stack.Require(b, "redis")
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{st.RedisAddr}})
	b.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	k := "bench:seq:" + uuid.NewString()
	b.Cleanup(func() { rdb.Del(context.Background(), k) })
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := rdb.Incr(ctx, k).Err(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "seqs/s")
}
