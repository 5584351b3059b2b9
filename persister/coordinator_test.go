package main

import (
	"context"
	"fmt"
	"hash/fnv"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/migrate"
	"github.com/seqflow/seqflow/internal/store"
	"github.com/seqflow/seqflow/internal/testkit/proc"
	"github.com/seqflow/seqflow/internal/testkit/stack"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// TestPersisterSurvivesCoordinatorBrokerKill kills -9 the broker of the
// three-broker cluster that coordinates the persisters' group, starts it
// again about 5 s later, and checks that the persisters store new sequenced
// events within the session timeout plus a few seconds of the broker being
// back (issue 8: they stalled until shutdown, because an error-only poll
// kept blocking the group's rebalance).
func TestPersisterSurvivesCoordinatorBrokerKill(t *testing.T) {
	const (
		sessionTimeout = 6 * time.Second
		down           = 5 * time.Second
		slack          = 30 * time.Second // far below the stall it guards against (until shutdown)
		partitions     = 4
	)
	st := stack.Require(t, "kafka3", "pg")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	id := strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	prefix, schema, group := "t-"+id+".", "p_"+id, "per-"+id
	topics := eventlog.Names(prefix)

	cl, err := kgo.NewClient(eventlog.ClientOpts(st.Kafka3Brokers, "persister-test-kafka3")...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	// The lock first: another package's broker fault (internal/stack)
	// fences a node for seconds, and creating replication-3 topics then
	// fails.
	stack.LockBrokerFaults(t, st)
	waitAllBrokers(ctx, t, adm, len(st.Kafka3Brokers))
	if err := eventlog.EnsureTopics(ctx, adm, eventlog.Specs(topics, partitions), 3); err != nil {
		t.Fatal(err)
	}
	defer adm.DeleteTopics(context.Background(), topics.Uplink, topics.Sequenced, topics.Duplicates, //nolint:errcheck
		topics.Receipts, topics.Offline, topics.DeadLetter)
	pool, err := store.NewPool(ctx, st.PGURL, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := migrate.Up(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}
	defer pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE") //nolint:errcheck

	bin := proc.Build(t, "./persister")
	for _, name := range []string{"a", "b"} {
		per := proc.Start(t, "persister-"+name, bin,
			"SEQFLOW_KAFKA_BROKERS="+strings.Join(st.Kafka3Brokers, ","),
			"SEQFLOW_PG_URL="+st.PGURL,
			"SEQFLOW_TOPIC_PREFIX="+prefix,
			"PERSISTER_GROUP="+group,
			"PERSISTER_INSTANCE_ID="+group+"-"+name,
			"PERSISTER_SCHEMA="+schema,
			"PERSISTER_SESSION_TIMEOUT="+sessionTimeout.String(),
			"PERSISTER_REBALANCE_TIMEOUT=20s",
			"PERSISTER_ADMIN_ADDR=",
		)
		t.Cleanup(func() { // before proctest's kill: goroutine dumps of a stall
			if t.Failed() && per.Running() {
				per.Signal(syscall.SIGQUIT)
				time.Sleep(time.Second)
			}
		})
	}

	sessions := make([]string, 2*partitions)
	for i := range sessions {
		sessions[i] = fmt.Sprintf("s-%s-%d", id, i)
	}
	w := newSeqWriter(t, st.Kafka3Brokers, topics.Sequenced, partitions)
	w.write(ctx, t, sessions, 1, 10)
	waitStored(ctx, t, pool, schema, sessions, 10, time.Minute)

	waitAllBrokers(ctx, t, adm, len(st.Kafka3Brokers))
	node, addr := groupCoordinator(ctx, t, adm, group, st.Kafka3Brokers)
	t.Logf("group %s is coordinated by stack node %d (%s)", group, node, addr)
	script := filepath.Join(st.Root, "infra", "local", "stack.sh")
	if out, err := exec.CommandContext(ctx, "bash", script, "kill-kafka3-node", strconv.Itoa(node)).CombinedOutput(); err != nil {
		t.Fatalf("kill node %d: %v\n%s", node, err, out)
	}
	killed := time.Now()
	// stack.sh start returns once the whole shared cluster is in sync,
	// which can take long; the test watches the broker itself and waits
	// for stack.sh only before it returns.
	started := make(chan error, 1)
	startAt := make(chan time.Time, 1)
	go func() {
		time.Sleep(down)
		startAt <- time.Now()
		out, err := exec.Command("bash", script, "start-kafka3-node", strconv.Itoa(node)).CombinedOutput()
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, out)
		}
		started <- err
	}()
	defer func() {
		if err := <-started; err != nil {
			t.Errorf("restart node %d: %v", node, err)
		}
	}()

	// Events written while the broker is down or restarting: the group
	// moves to another coordinator (once the controller fences the dead
	// broker) or waits for this one; either way they must be stored.
	w.write(ctx, t, sessions, 11, 10)
	during := waitStoredBy(ctx, pool, schema, sessions, 20, killed.Add(down+time.Minute))
	if during == nil {
		t.Logf("events written during the outage stored %s after the kill", time.Since(killed).Round(time.Millisecond))
	}
	back := waitBrokerBack(ctx, t, adm, addr)
	t.Logf("node %d back in the cluster's metadata %s after it was started", node, back.Sub(<-startAt).Round(time.Millisecond))

	// New events after the broker is back; the producer itself may need a
	// moment while partition leadership settles, so it retries.
	w.write(ctx, t, sessions, 21, 10)
	if err := waitStoredBy(ctx, pool, schema, sessions, 30, back.Add(sessionTimeout+slack)); err != nil {
		t.Fatalf("persisters not consuming %s after the coordinator's broker came back (limit: session timeout %s + %s): %v; during the outage: %v",
			time.Since(back).Round(time.Millisecond), sessionTimeout, slack, err, during)
	}
	t.Logf("consuming again %s after the broker was back", time.Since(back).Round(time.Millisecond))
}

// waitAllBrokers waits until the cluster's metadata lists n brokers: the
// previous fault (of this test or another) is healed.
func waitAllBrokers(ctx context.Context, t *testing.T, adm *kadm.Client, n int) {
	t.Helper()
	for {
		bs, err := adm.ListBrokers(ctx)
		if err == nil && len(bs) == n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the cluster lists %d of %d brokers: %v", len(bs), n, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// groupCoordinator returns the stack node number (1..3, the position in
// brokers) and address of the broker coordinating group.
func groupCoordinator(ctx context.Context, t *testing.T, adm *kadm.Client, group string, brokers []string) (int, string) {
	t.Helper()
	resp := adm.FindGroupCoordinators(ctx, group)
	c, ok := resp[group]
	if !ok || c.Err != nil {
		t.Fatalf("find coordinator of %s: %v %v", group, resp, c.Err)
	}
	addr := net.JoinHostPort(c.Host, strconv.Itoa(int(c.Port)))
	i := slices.Index(brokers, addr)
	if i < 0 {
		t.Fatalf("coordinator %s (node %d) is none of %v", addr, c.NodeID, brokers)
	}
	return i + 1, addr
}

// waitBrokerBack waits until the broker at addr is in the cluster's
// metadata again and returns when it was first seen there.
func waitBrokerBack(ctx context.Context, t *testing.T, adm *kadm.Client, addr string) time.Time {
	t.Helper()
	for {
		bs, err := adm.ListBrokers(ctx)
		if err == nil && slices.ContainsFunc(bs, func(b kadm.BrokerDetail) bool {
			return net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port))) == addr
		}) {
			if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				c.Close()
				return time.Now()
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("broker %s never came back: %v", addr, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// seqWriter writes sequenced events as the sequencer lays them out (key =
// session, partition chosen by the session), with an idempotent acks=all
// producer that retries through the outage by itself. It does not use
// transactions: what is under test is the persisters' group, and a
// transactional writer whose own coordinator was on the killed broker only
// adds its recovery time to the measurement.
type seqWriter struct {
	cl         *kgo.Client
	topic      string
	partitions int32
}

func newSeqWriter(t *testing.T, brokers []string, topic string, partitions int32) *seqWriter {
	t.Helper()
	cl, err := kgo.NewClient(append(eventlog.ClientOpts(brokers, "persister-test-writer"),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RecordDeliveryTimeout(2*time.Minute))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &seqWriter{cl: cl, topic: topic, partitions: partitions}
}

// write writes seqs from..from+n-1 of every session and waits for the acks.
func (w *seqWriter) write(ctx context.Context, t *testing.T, sessions []string, from, n int64) {
	t.Helper()
	var recs []*kgo.Record
	for _, s := range sessions {
		h := fnv.New32a()
		h.Write([]byte(s))
		part := int32(h.Sum32() % uint32(w.partitions))
		for seq := from; seq < from+n; seq++ {
			v, _ := proto.Marshal(&imv1.SequencedEvent{SessionId: s, Seq: seq, MsgId: int64(h.Sum32())<<20 | seq,
				ClientMsgId: fmt.Sprint("c", seq), SenderUserId: "u", SenderDeviceId: "d", ServerTsMs: time.Now().UnixMilli(),
				Payload: &imv1.SequencedEvent_Message{Message: &imv1.MessageContent{Type: "text", Body: []byte(fmt.Sprint("m", seq))}}})
			recs = append(recs, &kgo.Record{Topic: w.topic, Partition: part, Key: []byte(s), Value: v,
				Headers: eventlog.Headers("message", "seqflow.im.v1.SequencedEvent", "test", "")})
		}
	}
	if err := w.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("write sequenced events %d..%d: %v", from, from+n-1, err)
	}
}

// waitStored waits up to timeout until every session has seqs 1..upTo in
// the store.
func waitStored(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string, sessions []string, upTo int64, timeout time.Duration) {
	t.Helper()
	if err := waitStoredBy(ctx, pool, schema, sessions, upTo, time.Now().Add(timeout)); err != nil {
		t.Fatal(err)
	}
}

func waitStoredBy(ctx context.Context, pool *pgxpool.Pool, schema string, sessions []string, upTo int64, deadline time.Time) error {
	want := int64(len(sessions)) * upTo
	var got int64
	var err error
	for {
		err = pool.QueryRow(ctx, "SELECT count(*) FROM "+schema+".messages WHERE session_id = ANY($1) AND seq <= $2",
			sessions, upTo).Scan(&got)
		if err == nil && got == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("store holds %d of %d events (last error %v)", got, want, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
