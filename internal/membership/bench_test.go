package membership

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/testkit/stack"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// BenchmarkReplay_Records100k rebuilds the membership of one partition of
// 100,000 sequenced events (1,000 sessions of 20 members, each with a
// create, then messages of a 200-byte body and one membership change in
// 50) from the local Kafka: what a pusher pays when a partition is
// assigned to it. Run with
//
//	go test ./internal/membership -run '^$' -bench BenchmarkReplay_ -benchtime 3x
func BenchmarkReplay_Records100k(b *testing.B) {
	st := stack.Require(b, "kafka")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	topics := eventlog.Names("t-" + uuid.NewString()[:8] + ".")
	cl, err := kgo.NewClient(append(eventlog.ClientOpts(st.KafkaBrokers, "membership-bench"), append(eventlog.ProducerOpts(),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))...)...)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if err := eventlog.EnsureTopics(ctx, adm, eventlog.Specs(topics, 1), 0); err != nil {
		b.Fatal(err)
	}
	defer adm.DeleteTopics(context.Background(), topics.Uplink, topics.Sequenced, topics.Duplicates, topics.Receipts, topics.Offline, topics.DeadLetter) //nolint:errcheck
	const n, sessions = 100_000, 1_000
	body := []byte(strings.Repeat("b", 200))
	seq := make([]int64, sessions)
	for i := range n {
		si := i % sessions
		seq[si]++
		s := fmt.Sprintf("s-%04d", si)
		var ev *imv1.SequencedEvent
		typ := "message"
		switch {
		case seq[si] == 1:
			members := make([]string, 20)
			for j := range members {
				members[j] = fmt.Sprintf("u-%04d-%02d", si, j)
			}
			ev = create(s, seq[si], members[0], members...)
			typ = "session_create"
		case seq[si]%50 == 0:
			ev = change(s, seq[si], "x", add, fmt.Sprintf("u-%04d-new-%d", si, seq[si]))
			typ = "membership"
		default:
			ev = msg(s, seq[si], "x")
			ev.Payload.(*imv1.SequencedEvent_Message).Message.Body = body
		}
		v, _ := proto.Marshal(ev)
		cl.Produce(ctx, &kgo.Record{Topic: topics.Sequenced, Partition: 0, Key: []byte(s), Value: v,
			Headers: eventlog.Headers(typ, "seqflow.im.v1.SequencedEvent", "bench", "")}, func(_ *kgo.Record, err error) {
			if err != nil {
				b.Error(err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		p, stats, err := Replay(ctx, eventlog.ClientOpts(st.KafkaBrokers, "membership-bench"), topics.Sequenced, 0, n, 0)
		if err != nil {
			b.Fatal(err)
		}
		if stats.Records != n || p.Sessions() != sessions {
			b.Fatalf("replayed %d records, %d sessions", stats.Records, p.Sessions())
		}
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "records/s")
}
