package membership

import (
	"context"
	"errors"
	"slices"
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

// TestReplay writes sequenced events to a fresh topic the way the sequencer
// does (transactions, some aborted) and checks that a replay up to every
// offset of the partition equals applying the committed events before it.
func TestReplay(t *testing.T) {
	st := stack.Require(t, "kafka")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	topics, adm := freshTopics(ctx, t, st)
	pr, err := kgo.NewClient(append(eventlog.ClientOpts(st.KafkaBrokers, "membership-test"),
		kgo.TransactionalID("membership-test-"+uuid.NewString()), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	s := "s-" + uuid.NewString()[:8]
	txns := []struct {
		commit bool
		evs    []*imv1.SequencedEvent
	}{
		{true, []*imv1.SequencedEvent{create(s, 1, "alice", "bob")}},
		{false, []*imv1.SequencedEvent{change(s, 2, "alice", add, "mallory")}},
		{true, []*imv1.SequencedEvent{msg(s, 3, "bob"), change(s, 4, "alice", add, "carol")}},
		{true, []*imv1.SequencedEvent{change(s, 5, "alice", remove, "bob"), msg(s, 6, "carol")}},
		{false, []*imv1.SequencedEvent{change(s, 7, "alice", remove, "carol")}},
	}
	for _, tx := range txns {
		if err := pr.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for _, ev := range tx.evs {
			v, _ := proto.Marshal(ev)
			typ := "message"
			if ev.GetSessionCreate() != nil {
				typ = "session_create"
			} else if ev.GetMembership() != nil {
				typ = "membership"
			}
			r := &kgo.Record{Topic: topics.Sequenced, Partition: 0, Key: []byte(s), Value: v,
				Headers: eventlog.Headers(typ, "seqflow.im.v1.SequencedEvent", "test", "")}
			if err := pr.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := pr.EndTransaction(ctx, kgo.TransactionEndTry(tx.commit)); err != nil {
			t.Fatal(err)
		}
	}

	// Every record the partition holds, markers included, read_committed.
	type rec struct {
		off int64
		ev  *imv1.SequencedEvent // nil for markers
	}
	var log []rec
	rd, err := kgo.NewClient(append(eventlog.ClientOpts(st.KafkaBrokers, "membership-test"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords(),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topics.Sequenced: {0: kgo.NewOffset().AtStart()}}))...)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	ends, err := kadm.NewClient(adm).ListEndOffsets(ctx, topics.Sequenced)
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup(topics.Sequenced, 0)
	for len(log) == 0 || log[len(log)-1].off < end.Offset-1 {
		fs := rd.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			var ev *imv1.SequencedEvent
			if !r.Attrs.IsControl() {
				ev = &imv1.SequencedEvent{}
				if err := proto.Unmarshal(r.Value, ev); err != nil {
					t.Fatal(err)
				}
			}
			log = append(log, rec{r.Offset, ev})
		})
	}

	for until := int64(0); until <= end.Offset; until++ {
		want := NewPartition()
		for _, r := range log {
			if r.off < until && r.ev != nil {
				want.Apply(r.ev)
			}
		}
		got, stats, err := Replay(ctx, eventlog.ClientOpts(st.KafkaBrokers, "membership-test"), topics.Sequenced, 0, until, 0)
		if err != nil {
			t.Fatalf("replay until %d: %v", until, err)
		}
		if !slices.Equal(got.Members(s), want.Members(s)) {
			t.Fatalf("replay until %d: members %v, want %v (stats %+v)", until, got.Members(s), want.Members(s), stats)
		}
	}
	final, _, _ := Replay(ctx, eventlog.ClientOpts(st.KafkaBrokers, "membership-test"), topics.Sequenced, 0, end.Offset, 0)
	if m := final.Members(s); !slices.Equal(m, []string{"alice", "carol"}) {
		t.Fatalf("final members %v, want [alice carol]: aborted events must not count", m)
	}
}

// TestReplayStalls: a replay whose records do not come (here: until lies
// past the end of the partition, so they never will) gives up after its
// stall time with ErrReplayStalled, instead of holding its caller until
// ctx ends.
func TestReplayStalls(t *testing.T) {
	st := stack.Require(t, "kafka")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	topics, _ := freshTopics(ctx, t, st)
	pr, err := kgo.NewClient(append(eventlog.ClientOpts(st.KafkaBrokers, "membership-test"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	s := "s-" + uuid.NewString()[:8]
	v, _ := proto.Marshal(create(s, 1, "alice", "bob"))
	if err := pr.ProduceSync(ctx, &kgo.Record{Topic: topics.Sequenced, Partition: 0, Key: []byte(s), Value: v,
		Headers: eventlog.Headers("session_create", "seqflow.im.v1.SequencedEvent", "test", "")}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	// Offset 0 is there: the replay up to 1 reads it and ends.
	got, _, err := Replay(ctx, eventlog.ClientOpts(st.KafkaBrokers, "membership-test"), topics.Sequenced, 0, 1, 2*time.Second)
	if err != nil {
		t.Fatalf("replay until 1: %v", err)
	}
	if m := got.Members(s); !slices.Equal(m, []string{"alice", "bob"}) {
		t.Fatalf("members %v, want [alice bob]", m)
	}
	// Offsets 1..9 are not: it must give up after its stall time.
	start := time.Now()
	_, stats, err := Replay(ctx, eventlog.ClientOpts(st.KafkaBrokers, "membership-test"), topics.Sequenced, 0, 10, 500*time.Millisecond)
	if !errors.Is(err, ErrReplayStalled) {
		t.Fatalf("replay until 10 of a 1-record partition: err %v, want ErrReplayStalled", err)
	}
	if stats.Records != 1 {
		t.Fatalf("read %d records before stalling, want 1", stats.Records)
	}
	if ctx.Err() != nil {
		t.Fatalf("the replay returned only when the test's context ended (%v after it started)", time.Since(start))
	}
}

// freshTopics creates topics of their own, one partition each, on st's
// broker, and returns them with an admin client closed at the test's end.
func freshTopics(ctx context.Context, t *testing.T, st stack.Stack) (eventlog.Topics, *kgo.Client) {
	t.Helper()
	topics := eventlog.Names("t-" + uuid.NewString()[:8] + ".")
	adm, err := kgo.NewClient(eventlog.ClientOpts(st.KafkaBrokers, "membership-test")...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(adm.Close)
	if err := eventlog.EnsureTopics(ctx, kadm.NewClient(adm), eventlog.Specs(topics, 1), 0); err != nil {
		t.Fatal(err)
	}
	return topics, adm
}
