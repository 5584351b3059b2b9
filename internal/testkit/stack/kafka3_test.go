package stack

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestKafka3SurvivesABrokerKill: the three-broker profile is really three
// brokers, and a topic with RF=3 and min.insync.replicas=2 keeps taking
// acks=all writes with one broker killed -9, then catches up when it is back.
func TestKafka3SurvivesABrokerKill(t *testing.T) {
	st := Require(t, "kafka3")
	LockBrokerFaults(t, st)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(st.Kafka3Brokers...), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordRetries(1000), kgo.ProduceRequestTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	brokers, err := adm.ListBrokers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(brokers) != 3 {
		t.Fatalf("kadm sees %d brokers, want 3: %v", len(brokers), brokers.NodeIDs())
	}
	topic := "kafka3-test-" + uuid.NewString()[:8]
	if _, err := adm.CreateTopic(ctx, 3, 3, map[string]*string{"min.insync.replicas": kadm.StringPtr("2")}, topic); err != nil {
		t.Fatal(err)
	}
	defer adm.DeleteTopics(context.Background(), topic) //nolint:errcheck

	produce := func(n int, tag string) {
		t.Helper()
		for i := 0; i < n; i++ {
			r := &kgo.Record{Topic: topic, Key: []byte(fmt.Sprint(i)), Value: []byte(tag)}
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatalf("produce %s #%d with acks=all: %v", tag, i, err)
			}
		}
	}
	produce(50, "before")

	script := filepath.Join(st.Root, "infra", "local", "stack.sh")
	victim := "2"
	if out, err := exec.CommandContext(ctx, "bash", script, "kill-kafka3-node", victim).CombinedOutput(); err != nil {
		t.Fatalf("kill node %s: %v\n%s", victim, err, out)
	}
	defer func() {
		if out, err := exec.Command("bash", script, "start-kafka3-node", victim).CombinedOutput(); err != nil {
			t.Errorf("restart node %s: %v\n%s", victim, err, out)
		}
	}()
	produce(50, "during") // two of three replicas in sync: min ISR 2 holds

	if out, err := exec.CommandContext(ctx, "bash", script, "start-kafka3-node", victim).CombinedOutput(); err != nil {
		t.Fatalf("restart node %s: %v\n%s", victim, err, out)
	}
	produce(50, "after")

	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	if total != 150 {
		t.Fatalf("topic holds %d records, want 150", total)
	}
}
