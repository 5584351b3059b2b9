package eventlog

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seqflow/seqflow/internal/testkit/stack"
)

// TestKeyPartitioningMatchesOtherClients is the compatibility test for
// producers written with another client: segmentio/kafka-go's Murmur2
// balancer (the Java client's partitioner) must put every session on the
// partition franz-go with ProducerOpts puts it on, or a session would stop
// being sticky to one sequencer. kafka-go is used here only as a plain
// producer: it must never consume im.sequenced.v1, since it does not filter
// aborted transactions.
func TestKeyPartitioningMatchesOtherClients(t *testing.T) {
	st := stack.Require(t, "kafka")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(append(ClientOpts(st.KafkaBrokers, "compat-test"), ProducerOpts()...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topic := "compat-" + uuid.NewString()[:8]
	if err := EnsureTopics(ctx, adm, []Spec{{Name: topic, Partitions: DefaultPartitions}}, 0); err != nil {
		t.Fatal(err)
	}
	defer adm.DeleteTopics(context.Background(), topic) //nolint:errcheck

	w := &kafka.Writer{Addr: kafka.TCP(st.KafkaBrokers...), Topic: topic, Balancer: kafka.Murmur2Balancer{},
		RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	defer w.Close()
	const n = 200
	var msgs []kafka.Message
	for i := 0; i < n; i++ {
		k := fmt.Sprintf("session-%d-%s", i, uuid.NewString())
		msgs = append(msgs, kafka.Message{Key: []byte(k), Value: []byte("kafka-go")})
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte(k), Value: []byte("franz-go")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatalf("kafka-go write: %v", err)
	}

	rd, err := kgo.NewClient(append(ClientOpts(st.KafkaBrokers, "compat-test"),
		kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	where := map[string]map[string]int32{} // key → producer → partition
	for seen := 0; seen < 2*n; {
		fs := rd.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if where[string(r.Key)] == nil {
				where[string(r.Key)] = map[string]int32{}
			}
			where[string(r.Key)][string(r.Value)] = r.Partition
			seen++
		})
	}
	spread := map[int32]bool{}
	for k, p := range where {
		if p["franz-go"] != p["kafka-go"] {
			t.Errorf("key %s: franz-go partition %d, kafka-go partition %d", k, p["franz-go"], p["kafka-go"])
		}
		spread[p["franz-go"]] = true
	}
	if len(spread) < DefaultPartitions/2 {
		t.Errorf("%d keys landed on only %d partitions: not hashing", n, len(spread))
	}
}
