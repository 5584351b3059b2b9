package store

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// benchRows makes n chat messages over sessions, continuing each session's
// seqs from next.
func benchRows(n, sessions int, next []int64, idBase *int64, tag string) []Row {
	rows := make([]Row, n)
	body := []byte("a typical chat message of about a hundred bytes, with some text in it to make it look real......")
	for i := range rows {
		s := i % sessions
		next[s]++
		*idBase++
		rows[i] = Row{SessionID: fmt.Sprintf("%s-%d", tag, s), Seq: next[s], MsgID: *idBase, ClientMsgID: fmt.Sprintf("c%d", *idBase),
			SenderUserID: "user-1", SenderDeviceID: "dev-1", Kind: KindMessage, ContentType: "text", Body: body,
			ServerTsMs: time.Now().UnixMilli(), Partition: int32(s % 12), Offset: *idBase}
	}
	return rows
}

var copyColumns = []string{"session_id", "seq", "msg_id", "client_msg_id", "sender_user_id", "sender_device_id", "kind",
	"content_type", "body", "server_ts_ms", "gateway_ts_ms", "log_partition", "log_offset"}

func copyRows(ctx context.Context, pool *pgxpool.Pool, schema string, rows []Row) error {
	_, err := pool.CopyFrom(ctx, pgx.Identifier{schema, "messages"}, copyColumns, pgx.CopyFromSlice(len(rows), func(i int) ([]any, error) {
		r := &rows[i]
		return []any{r.SessionID, r.Seq, r.MsgID, r.ClientMsgID, r.SenderUserID, r.SenderDeviceID, r.Kind,
			r.ContentType, r.Body, r.ServerTsMs, r.GatewayTsMs, r.Partition, r.Offset}, nil
	}))
	return err
}

// benchmarkPersist writes batches of batchRows through the Writer (what the
// persister does: ids, messages, sessions, offsets, in one transaction) and
// COPYs the same rows into the same messages table shape in a second schema
// (the raw ceiling), writers goroutines at a time on disjoint sessions, and
// reports both rates and their ratio.
func benchmarkPersist(b *testing.B, batchRows, writers int) {
	pool, schema := freshSchema(b)
	_, ceiling := freshSchema(b)
	ctx := context.Background()
	w := NewWriter(pool, schema)
	const sessions = 2000
	type lane struct {
		next   []int64
		idBase int64
	}
	lanes := make([]*lane, writers)
	for i := range lanes {
		lanes[i] = &lane{next: make([]int64, sessions), idBase: int64(i) << 40}
	}
	var writeTime, copyTime time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		batches := make([][]Row, writers)
		for j, l := range lanes {
			batches[j] = benchRows(batchRows, sessions/writers, l.next, &l.idBase, fmt.Sprintf("w%d", j))
		}
		run := func(f func(rows []Row) error) time.Duration {
			start := time.Now()
			var wg sync.WaitGroup
			errs := make([]error, writers)
			for j := range batches {
				wg.Add(1)
				go func() { defer wg.Done(); errs[j] = f(batches[j]) }()
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					b.Fatal(err)
				}
			}
			return time.Since(start)
		}
		writeTime += run(func(rows []Row) error {
			res, err := w.Write(ctx, &Batch{Rows: rows, Offsets: []Offset{{"bench", 0, rows[len(rows)-1].Offset + 1}}})
			if err == nil && res.Inserted != len(rows) {
				err = fmt.Errorf("inserted %d of %d", res.Inserted, len(rows))
			}
			return err
		})
		copyTime += run(func(rows []Row) error { return copyRows(ctx, pool, ceiling, rows) })
	}
	b.StopTimer()
	total := float64(b.N * batchRows * writers)
	wr, cr := total/writeTime.Seconds(), total/copyTime.Seconds()
	b.ReportMetric(wr, "writer_rows/s")
	b.ReportMetric(cr, "copy_rows/s")
	b.ReportMetric(wr/cr, "writer/copy")
}

func BenchmarkPersist_1000x1(b *testing.B) { benchmarkPersist(b, 1000, 1) }
func BenchmarkPersist_5000x1(b *testing.B) { benchmarkPersist(b, 5000, 1) }
func BenchmarkPersist_5000x2(b *testing.B) { benchmarkPersist(b, 5000, 2) }
