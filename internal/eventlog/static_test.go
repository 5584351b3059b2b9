package eventlog_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/testkit/stack"
)

// member is one consumer of the test group and what it was handed.
type member struct {
	cl *kgo.Client
	mu sync.Mutex
	// owned is the partitions assigned and not since revoked or lost;
	// revokes counts revocations and losses.
	owned   map[int32]bool
	revokes int
}

func join(t *testing.T, brokers []string, group, topic, instanceID string) *member {
	t.Helper()
	m := &member{owned: map[int32]bool{}}
	drop := func(_ context.Context, _ *kgo.Client, ps map[string][]int32) {
		m.mu.Lock()
		defer m.mu.Unlock()
		for _, p := range ps[topic] {
			delete(m.owned, p)
		}
		m.revokes++
	}
	cl, err := kgo.NewClient(append(eventlog.ClientOpts(brokers, "static-test-"+instanceID),
		kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), eventlog.StaticMember(instanceID),
		// Far above how long the test waits: anything it sees within its
		// bound cannot be the session timeout's doing.
		kgo.SessionTimeout(45*time.Second),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) {
			m.mu.Lock()
			defer m.mu.Unlock()
			for _, p := range ps[topic] {
				m.owned[p] = true
			}
		}),
		kgo.OnPartitionsRevoked(drop), kgo.OnPartitionsLost(drop),
	)...)
	if err != nil {
		t.Fatal(err)
	}
	m.cl = cl
	return m
}

func (m *member) count() (owned, revokes int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.owned), m.revokes
}

func waitFor(t *testing.T, what string, within time.Duration, ok func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !ok() {
		if time.Since(start) > within {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start)
}

// TestStaticMembership runs against the local Kafka: a static member that
// dies without leaving and comes back under its instance ID gets its
// partitions back at once, without the other member losing any; after an
// orderly stop, LeaveStatic hands its partitions to the other member long
// before the 45 s session timeout, and a leave in the name of an older
// incarnation removes nobody.
func TestStaticMembership(t *testing.T) {
	st := stack.Require(t, "kafka")
	ctx := context.Background()
	id := uuid.NewString()[:8]
	topic, group := "static-test-"+id, "static-test-"+id
	admCl, err := kgo.NewClient(eventlog.ClientOpts(st.KafkaBrokers, "static-test-admin")...)
	if err != nil {
		t.Fatal(err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	if err := eventlog.EnsureTopics(ctx, adm, []eventlog.Spec{{Name: topic, Partitions: 4}}, 0); err != nil {
		t.Fatal(err)
	}
	defer adm.DeleteTopics(context.Background(), topic) //nolint:errcheck
	defer adm.DeleteGroup(context.Background(), group)  //nolint:errcheck

	a := join(t, st.KafkaBrokers, group, topic, "a")
	b := join(t, st.KafkaBrokers, group, topic, "b")
	defer func() { b.cl.Close() }()
	waitFor(t, "both members own two partitions", 60*time.Second, func() bool {
		na, _ := a.count()
		nb, _ := b.count()
		return na == 2 && nb == 2
	})
	_, bRevokes := b.count()

	// A crash: a static member's Close does not leave the group.
	aFirstMember, _ := a.cl.GroupMetadata()
	a.cl.Close()
	time.Sleep(time.Second)
	if nb, r := b.count(); nb != 2 || r != bRevokes {
		t.Fatalf("after a's crash b owns %d partitions with %d revocations, want 2 and %d: the group rebalanced", nb, r, bRevokes)
	}
	a2 := join(t, st.KafkaBrokers, group, topic, "a")
	took := waitFor(t, "a's restart owns its two partitions again", 15*time.Second, func() bool { n, _ := a2.count(); return n == 2 })
	t.Logf("a restarted under its instance ID owned its partitions after %s", took.Round(time.Millisecond))
	if nb, r := b.count(); nb != 2 || r != bRevokes {
		t.Fatalf("a's restart cost b a rebalance: b owns %d partitions with %d revocations, want 2 and %d", nb, r, bRevokes)
	}

	// A leave in the name of a's first incarnation must not remove its
	// restart, which holds the instance ID now.
	if err := eventlog.LeaveStatic(ctx, st.KafkaBrokers, "static-test-leave", group, "a", aFirstMember); err != nil {
		t.Fatalf("a stale leave: %v", err)
	}
	time.Sleep(time.Second)
	if n, _ := a2.count(); n != 2 {
		t.Fatalf("a stale leave removed a's restart: it owns %d partitions", n)
	}
	if nb, r := b.count(); nb != 2 || r != bRevokes {
		t.Fatalf("a stale leave cost b a rebalance: b owns %d partitions with %d revocations", nb, r)
	}

	// An orderly stop leaves the group, and b takes over everything.
	a2Member, _ := a2.cl.GroupMetadata()
	a2.cl.Close()
	if err := eventlog.LeaveStatic(ctx, st.KafkaBrokers, "static-test-leave", group, "a", a2Member); err != nil {
		t.Fatal(err)
	}
	took = waitFor(t, "b owns all four partitions after a left", 15*time.Second, func() bool { n, _ := b.count(); return n == 4 })
	t.Logf("after LeaveStatic b owned all partitions in %s", took.Round(time.Millisecond))
	// Leaving twice is not an error.
	if err := eventlog.LeaveStatic(ctx, st.KafkaBrokers, "static-test-leave", group, "a", a2Member); err != nil {
		t.Fatalf("second leave: %v", err)
	}
}
