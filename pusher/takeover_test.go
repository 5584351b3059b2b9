package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestTakeoverPushesAtOnce hands partitions from a leaving pusher back to
// one that keeps running, three times, and times one event per partition
// from its commit to the gateway. A partition a pusher is given is fetched
// only once the fetch in flight to its broker returns (franz-go adds it to
// the next one), and a fetch with nothing new waits at the broker for the
// consumer's fetch wait: with franz-go's 5 s default, moved partitions
// stood still for up to 5 s after a rebalance (chaos run ec4088a9,
// sigstop_pusher, 10.6 s).
func TestTakeoverPushesAtOnce(t *testing.T) {
	e := newEnv(t)
	gw := e.gateway("gw1")
	alice, bob := e.user("alice"), e.user("bob")
	bobConn := gw.connect(bob, "phone")
	sessions := e.spread()
	for _, s := range sessions {
		e.emit(createEv(s, alice, alice, bob))
	}
	withID := func(name string) Config {
		cfg := e.config()
		cfg.InstanceID = e.group + "-" + name
		return cfg
	}
	e.startPusher(withID("stay"))
	want := map[string][]int64{}
	pushed := func() {
		t.Helper()
		for _, s := range sessions {
			want[s] = append(want[s], int64(len(want[s])+1))
			awaitSeqs(t, gw, bobConn, s, want[s]...)
		}
	}
	pushed()
	const limit = 4 * time.Second // about 5 s without the fetch wait, 0.5 s with it on this machine
	for i := 1; i <= 3; i++ {
		leave := e.startPusher(withID("leave"))
		// Every partition gets an event and the gateway all of them: the
		// rebalance that gave leave its share is over.
		for _, s := range sessions {
			e.emit(msgEv(s, alice, "while two run"))
		}
		pushed()
		leave.stop(t) // an orderly stop leaves the group: stay takes its partitions
		start := time.Now()
		for _, s := range sessions {
			e.emit(msgEv(s, alice, fmt.Sprintf("after takeover %d", i)))
		}
		pushed()
		took := time.Since(start)
		t.Logf("takeover %d: every partition's event pushed %v after the leaving pusher stopped", i, took.Round(time.Millisecond))
		if took > limit {
			t.Fatalf("takeover %d: the events took %v, want at most %v", i, took, limit)
		}
	}
}

// spread returns one session per partition of the sequenced topic, found
// by the producers' key partitioner.
func (e *env) spread() []string {
	part := kgo.StickyKeyPartitioner(nil).ForTopic(e.topics.Sequenced)
	out := make([]string, testPartitions)
	for i, n := 0, 0; n < testPartitions; i++ {
		s := e.session(fmt.Sprint("spread-", i))
		if p := part.Partition(&kgo.Record{Key: []byte(s)}, testPartitions); out[p] == "" {
			out[p] = s
			n++
		}
	}
	return out
}
