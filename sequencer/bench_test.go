package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seqflow/seqflow/internal/config"
	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/migrate"
	"github.com/seqflow/seqflow/internal/testkit/stack"
)

// benchRecords is how many uplinks one benchmark round sequences
// (SEQFLOW_BENCH_RECORDS overrides).
func benchRecords() int {
	if n, err := strconv.Atoi(os.Getenv("SEQFLOW_BENCH_RECORDS")); err == nil && n > 0 {
		return n
	}
	return 200_000
}

// benchRounds is how many rounds one iteration runs (SEQFLOW_BENCH_ROUNDS
// overrides, at least 1).
func benchRounds() int {
	if n, err := strconv.Atoi(os.Getenv("SEQFLOW_BENCH_ROUNDS")); err == nil && n > 0 {
		return n
	}
	return 3
}

// BenchmarkSequencer_Throughput measures uplink → committed sequenced
// events per second of one in-process sequencer on the local stack (Kafka
// transactions, PostgreSQL segments, acks=all; 1,000 sessions, 200-byte
// bodies), next to the ceiling of the same box: a plain franz-go consume →
// produce of the same records on the same broker, without transactions or
// PostgreSQL.
//
// One iteration runs SEQFLOW_BENCH_ROUNDS rounds (default 3), each on
// topics of its own: the ceiling, then the sequencer, on the same freshly
// produced uplinks. It reports the round whose ratio (sequencer / ceiling)
// is the median of the rounds' (the upper middle one for an even count):
// its two rates, its ratio and its batch stages, all measured in that one
// round, back to back. On a noisy machine one round's ratio moves a lot
// with what else runs at that moment; the median round moves less.
//
//	go test -run XXX -bench BenchmarkSequencer_Throughput -benchtime 1x ./sequencer
func BenchmarkSequencer_Throughput(b *testing.B) {
	st := stack.Require(b, "kafka", "pg")
	type round struct {
		seq, ceil float64
		stages    map[string]float64
	}
	for i := 0; i < b.N; i++ {
		var rounds []round
		for r := range benchRounds() {
			seqRate, ceilRate, stages := benchRound(b, st)
			b.Logf("round %d: sequencer %.0f msg/s, ceiling %.0f msg/s, ratio %.3f", r+1, seqRate, ceilRate, seqRate/ceilRate)
			rounds = append(rounds, round{seqRate, ceilRate, stages})
		}
		slices.SortFunc(rounds, func(x, y round) int { return cmp.Compare(x.seq/x.ceil, y.seq/y.ceil) })
		m := rounds[len(rounds)/2]
		for unit, v := range m.stages {
			b.ReportMetric(v, unit)
		}
		b.ReportMetric(m.seq, "sequencer_msgs/s")
		b.ReportMetric(m.ceil, "kafka_ceiling_msgs/s")
		b.ReportMetric(m.seq/m.ceil, "ratio")
	}
}

// benchRound produces benchRecords uplinks to topics of its own, copies
// them with the ceiling's plain consume → produce, then sequences them, and
// returns both rates and the sequencer's batch stages (see batchStages).
// The setup (topics, migrations, the uplinks) is not timed.
func benchRound(b *testing.B, st stack.Stack) (seqRate, ceilRate float64, stages map[string]float64) {
	b.Helper()
	n := benchRecords()
	const sessions, bodyBytes = 1000, 200
	ctx := context.Background()
	prefix := "b-" + uuid.NewString()[:8] + "."
	topics := eventlog.Names(prefix)
	ceiling := prefix + "ceiling"

	cl, err := kgo.NewClient(append(eventlog.ClientOpts(st.KafkaBrokers, "seq-bench"), eventlog.ProducerOpts()...)...)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	specs := append(eventlog.Specs(topics, eventlog.DefaultPartitions), eventlog.Spec{Name: ceiling, Partitions: eventlog.DefaultPartitions})
	if err := eventlog.EnsureTopics(ctx, adm, specs, 0); err != nil {
		b.Fatal(err)
	}
	defer adm.DeleteTopics(context.Background(), topics.Uplink, topics.Sequenced, topics.Duplicates, topics.Receipts, topics.Offline, topics.DeadLetter, ceiling) //nolint:errcheck
	pool, err := pgxpool.New(ctx, st.PGURL)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := migrate.Up(ctx, pool, ""); err != nil {
		b.Fatal(err)
	}
	pool.Close()

	body := strings.Repeat("x", bodyBytes)
	for i := 0; i < n; i++ {
		s := fmt.Sprintf("%sbench-%04d", prefix, i%sessions)
		cl.Produce(ctx, &kgo.Record{Topic: topics.Uplink, Key: []byte(s), Value: uplinkValue(s, fmt.Sprintf("m-%d", i), body)}, func(_ *kgo.Record, err error) {
			if err != nil {
				b.Error(err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatal(err)
	}

	ceilRate = measure(b, adm, ceiling, n, func(ctx context.Context) {
		copyTopic(ctx, st.KafkaBrokers, topics.Uplink, ceiling, prefix+"ceil")
	})
	var seq *Sequencer
	seqRate = measure(b, adm, topics.Sequenced, n, func(ctx context.Context) {
		env := map[string]string{
			"SEQFLOW_KAFKA_BROKERS": strings.Join(st.KafkaBrokers, ","), "SEQFLOW_PG_URL": st.PGURL,
			"SEQFLOW_TOPIC_PREFIX": prefix, "SEQUENCER_GROUP": prefix + "seq",
			"SEQUENCER_INSTANCE_ID": prefix + "bench", "SEQUENCER_ADMIN_ADDR": "",
		}
		for _, k := range []string{"SEQUENCER_STEP", "SEQUENCER_MAX_POLL_RECORDS", "SEQUENCER_POLL_MERGE_WAIT", "SEQUENCER_KAFKA_DEBUG"} { // to compare settings
			if v := os.Getenv(k); v != "" {
				env[k] = v
			}
		}
		cfg, err := LoadConfig(config.FromMap(env))
		if err != nil {
			b.Error(err)
			return
		}
		seq = New(cfg, slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
		_ = seq.Run(ctx)
	})
	return seqRate, ceilRate, batchStages(b, seq)
}

// batchStages returns where a committed batch's time went, as means over
// the round from the sequencer's own histograms, by benchmark unit:
// records per batch and the milliseconds of each stage (prepare, produce,
// commit, total).
func batchStages(b *testing.B, s *Sequencer) map[string]float64 {
	b.Helper()
	out := map[string]float64{}
	if s == nil {
		return out
	}
	mfs, err := s.reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			h := m.GetHistogram()
			if h == nil || h.GetSampleCount() == 0 {
				continue
			}
			mean := h.GetSampleSum() / float64(h.GetSampleCount())
			switch mf.GetName() {
			case "seqflow_sequencer_batch_records":
				out["records/batch"] = mean
			case "seqflow_sequencer_batch_stage_seconds":
				for _, l := range m.GetLabel() {
					if l.GetName() == "stage" {
						out[l.GetValue()+"_ms/batch"] = mean * 1000
					}
				}
			}
		}
	}
	return out
}

// measure runs work until topic's committed end offsets add up to want and
// returns the rate between the first and the last record's arrival, so
// start-up (group join, connections) is not counted.
func measure(b *testing.B, adm *kadm.Client, topic string, want int, work func(context.Context)) float64 {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); work(ctx) }()
	defer func() { cancel(); <-done }()
	var first time.Time
	var firstN int64
	deadline := time.Now().Add(10 * time.Minute)
	for time.Now().Before(deadline) {
		offs, err := adm.ListCommittedOffsets(ctx, topic)
		if err != nil {
			b.Fatal(err)
		}
		var total int64
		offs.Each(func(o kadm.ListedOffset) { total += o.Offset })
		now := time.Now()
		if total > 0 && first.IsZero() {
			first, firstN = now, total
		}
		if total >= int64(want) {
			return float64(total-firstN) / now.Sub(first).Seconds()
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.Fatalf("%s did not reach %d records", topic, want)
	return 0
}

// copyTopic is the ceiling: consume from → produce to, same keys and
// partitions, acks=all, no transactions, no database.
func copyTopic(ctx context.Context, brokers []string, from, to, group string) {
	cl, err := kgo.NewClient(append(eventlog.ClientOpts(brokers, "seq-bench-ceiling"),
		kgo.ConsumerGroup(group), kgo.ConsumeTopics(from), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		eventlog.Compression(), kgo.ProducerLinger(0))...)
	if err != nil {
		return
	}
	defer cl.Close()
	for ctx.Err() == nil {
		fs := cl.PollRecords(ctx, 10_000)
		fs.EachRecord(func(r *kgo.Record) {
			cl.Produce(ctx, &kgo.Record{Topic: to, Partition: r.Partition, Key: r.Key, Value: r.Value}, nil)
		})
		if err := cl.Flush(ctx); err != nil {
			return
		}
		_ = cl.CommitUncommittedOffsets(ctx)
	}
}
