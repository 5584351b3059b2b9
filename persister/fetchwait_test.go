package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/config"
	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// TestFetchWaitReadsTheLogInBites feeds the same trickle of small
// committed transactions (one event each, every 50 ms, as a sequencer at a
// moderate rate commits them) to a persister that fetches as soon as
// anything is there and to one with PERSISTER_FETCH_WAIT=400ms. Both store
// every event; the first writes about one batch per transaction, the
// second one per fetch wait.
func TestFetchWaitReadsTheLogInBites(t *testing.T) {
	const txns, every = 40, 50 * time.Millisecond // 2 s of trickle
	for _, c := range []struct {
		wait       string
		minBatches int // at least
		maxBatches int // at most
	}{
		{"0s", txns / 2, txns},
		{"400ms", 2, int(txns*every/(400*time.Millisecond)) + 3},
	} {
		t.Run("wait="+c.wait, func(t *testing.T) {
			e := newEnv(t)
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			cfg, err := LoadConfig(config.FromMap(map[string]string{
				"SEQFLOW_KAFKA_BROKERS": strings.Join(e.st.KafkaBrokers, ","), "SEQFLOW_PG_URL": e.st.PGURL,
				"SEQFLOW_TOPIC_PREFIX": e.prefix, "PERSISTER_GROUP": "per-" + e.id, "PERSISTER_SCHEMA": e.schema,
				"PERSISTER_ADMIN_ADDR": "", "PERSISTER_FETCH_WAIT": c.wait,
			}))
			if err != nil {
				t.Fatal(err)
			}
			p := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
			rctx, stop := context.WithCancel(ctx)
			runErr := make(chan error, 1)
			go func() { runErr <- p.Run(rctx) }()
			defer func() {
				stop()
				if err := <-runErr; err != context.Canceled {
					t.Errorf("Run returned %v, want context.Canceled", err)
				}
			}()
			for !p.ready.Load() {
				select {
				case <-ctx.Done():
					t.Fatal("the persister was never assigned its partitions")
				case <-time.After(50 * time.Millisecond):
				}
			}

			tx, err := kgo.NewClient(append(eventlog.ClientOpts(e.st.KafkaBrokers, "persister-test-trickle"),
				kgo.TransactionalID("persister-trickle-"+e.id), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Close()
			s := "s-" + e.id
			for i := 1; i <= txns; i++ {
				v, _ := proto.Marshal(&imv1.SequencedEvent{SessionId: s, Seq: int64(i), MsgId: int64(1000 + i),
					ClientMsgId: fmt.Sprintf("c-%d", i), SenderUserId: "alice", SenderDeviceId: "d", ServerTsMs: time.Now().UnixMilli(),
					Payload: &imv1.SequencedEvent_Message{Message: &imv1.MessageContent{Type: "text", Body: []byte("hi")}}})
				if err := tx.BeginTransaction(); err != nil {
					t.Fatal(err)
				}
				if err := tx.ProduceSync(ctx, &kgo.Record{Topic: e.topics.Sequenced, Partition: 0, Key: []byte(s), Value: v,
					Headers: eventlog.Headers("message", "seqflow.im.v1.SequencedEvent", "test", "")}).FirstErr(); err != nil {
					t.Fatal(err)
				}
				if err := tx.EndTransaction(ctx, kgo.TryCommit); err != nil {
					t.Fatal(err)
				}
				time.Sleep(every)
			}

			for {
				var rows int
				if err := e.pool.QueryRow(ctx, "SELECT count(*) FROM "+e.schema+".messages").Scan(&rows); err == nil && rows == txns {
					break
				}
				select {
				case <-ctx.Done():
					t.Fatal("the persister never stored every event")
				case <-time.After(100 * time.Millisecond):
				}
			}
			batches := batchCount(t, p)
			t.Logf("PERSISTER_FETCH_WAIT=%s: %d transactions stored in %d batches", c.wait, txns, batches)
			if batches < c.minBatches || batches > c.maxBatches {
				t.Fatalf("%d batches, want %d to %d", batches, c.minBatches, c.maxBatches)
			}
		})
	}
}

// batchCount is how many poll batches the persister wrote (the count of
// seqflow_persister_batch_records).
func batchCount(t *testing.T, p *Persister) int {
	t.Helper()
	var m dto.Metric
	if err := p.m.batchSize.Write(&m); err != nil {
		t.Fatal(err)
	}
	return int(m.GetHistogram().GetSampleCount())
}
