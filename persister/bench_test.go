package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/config"
	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/migrate"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// BenchmarkPersister_100k measures the whole persister: 100,000 committed
// message events already in im.sequenced.v1 (1,000 sessions, 4 partitions,
// 100-byte bodies) drained into PostgreSQL by an in-process persister with
// its defaults, timed from its first offset commit to its last. In the same
// run, the same rows are COPYed into a fresh messages table of the same
// shape: the raw ceiling. Reports both and the ratio.
func BenchmarkPersister_100k(b *testing.B) {
	const n, sessions = 100_000, 1000
	for i := 0; i < b.N; i++ {
		e := newEnv(b)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		rows := benchLog(ctx, b, e, n, sessions)

		ceiling := e.schema + "_copy"
		if _, err := migrate.Up(ctx, e.pool, ceiling); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if _, err := e.pool.CopyFrom(ctx, pgx.Identifier{ceiling, "messages"}, []string{"session_id", "seq", "msg_id", "client_msg_id",
			"sender_user_id", "sender_device_id", "kind", "content_type", "body", "server_ts_ms", "log_partition", "log_offset"},
			pgx.CopyFromRows(rows)); err != nil {
			b.Fatal(err)
		}
		copyRate := float64(n) / time.Since(start).Seconds()
		_, _ = e.pool.Exec(ctx, "DROP SCHEMA "+ceiling+" CASCADE")

		cfg, err := LoadConfig(config.FromMap(map[string]string{
			"SEQFLOW_KAFKA_BROKERS": strings.Join(e.st.KafkaBrokers, ","), "SEQFLOW_PG_URL": e.st.PGURL,
			"SEQFLOW_TOPIC_PREFIX": e.prefix, "PERSISTER_GROUP": "per-" + e.id, "PERSISTER_SCHEMA": e.schema,
			"PERSISTER_ADMIN_ADDR": "127.0.0.1:0",
		}))
		if err != nil {
			b.Fatal(err)
		}
		rctx, stop := context.WithCancel(ctx)
		runErr := make(chan error, 1)
		per := New(cfg, slog.New(slog.NewJSONHandler(io.Discard, nil)))
		go func() { runErr <- per.Run(rctx) }()
		// Timed by the group's committed offsets (cheap to poll): from the
		// first commit to the one that reaches the end, counting the
		// records committed in between.
		adm := kadm.NewClient(e.cl)
		var first, last time.Time
		var atFirst int64
		for {
			var got int64
			if offs, err := adm.FetchOffsets(ctx, "per-"+e.id); err == nil {
				offs.Each(func(o kadm.OffsetResponse) {
					if o.Topic == e.topics.Sequenced && o.At > 0 {
						got += o.At
					}
				})
			}
			if got > 0 && first.IsZero() {
				first, atFirst = time.Now(), got
			}
			if got >= int64(n) {
				last = time.Now()
				break
			}
			select {
			case <-ctx.Done():
				b.Fatalf("committed %d of %d", got, n)
			case <-time.After(10 * time.Millisecond):
			}
		}
		var stored int
		if err := e.pool.QueryRow(ctx, "SELECT count(*) FROM "+e.schema+".messages").Scan(&stored); err != nil || stored != n {
			b.Fatalf("stored %d rows (%v), want %d", stored, err, n)
		}
		stop()
		<-runErr
		cancel()
		if mfs, err := per.reg.Gather(); err == nil {
			for _, mf := range mfs {
				switch mf.GetName() {
				case "seqflow_persister_write_seconds", "seqflow_persister_batch_records":
					for _, m := range mf.GetMetric() {
						b.Logf("%s %v: count %d sum %.3f", mf.GetName(), m.GetLabel(), m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum())
					}
				}
			}
		}
		rate := float64(int64(n)-atFirst) / last.Sub(first).Seconds()
		b.ReportMetric(rate, "persister_rows/s")
		b.ReportMetric(copyRate, "copy_rows/s")
		b.ReportMetric(rate/copyRate, "persister/copy")
	}
}

// benchLog writes n message events in transactions and returns them as
// COPY rows.
func benchLog(ctx context.Context, b *testing.B, e *env, n, sessions int) [][]any {
	tx, err := kgo.NewClient(append(eventlog.ClientOpts(e.st.KafkaBrokers, "persister-bench"),
		kgo.TransactionalID("persister-bench-"+e.id), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchMaxBytes(1<<20))...)
	if err != nil {
		b.Fatal(err)
	}
	defer tx.Close()
	body := []byte(strings.Repeat("x", 100))
	next := make([]int64, sessions)
	rows := make([][]any, 0, n)
	for i := 0; i < n; {
		if err := tx.BeginTransaction(); err != nil {
			b.Fatal(err)
		}
		for j := 0; j < 10_000 && i < n; j, i = j+1, i+1 {
			s := i % sessions
			next[s]++
			sid := fmt.Sprintf("b-%s-%d", e.id, s)
			ev := &imv1.SequencedEvent{SessionId: sid, Seq: next[s], MsgId: int64(i + 1), ClientMsgId: fmt.Sprint("c", i),
				SenderUserId: "u", SenderDeviceId: "d", ServerTsMs: time.Now().UnixMilli(),
				Payload: &imv1.SequencedEvent_Message{Message: &imv1.MessageContent{Type: "text", Body: body}}}
			v, _ := proto.Marshal(ev)
			part := int32(s % 4)
			tx.Produce(ctx, &kgo.Record{Topic: e.topics.Sequenced, Partition: part, Key: []byte(sid), Value: v,
				Headers: eventlog.Headers("message", "seqflow.im.v1.SequencedEvent", "bench", "")}, nil)
			rows = append(rows, []any{sid, next[s], int64(i + 1), fmt.Sprint("c", i), "u", "d", "message", "text", body, ev.ServerTsMs, part, int64(i)})
		}
		if err := tx.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		if err := tx.EndTransaction(ctx, kgo.TryCommit); err != nil {
			b.Fatal(err)
		}
	}
	return rows
}
