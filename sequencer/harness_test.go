package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/migrate"
	"github.com/seqflow/seqflow/internal/testkit/logcheck"
	"github.com/seqflow/seqflow/internal/testkit/proc"
	"github.com/seqflow/seqflow/internal/testkit/stack"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// testStep is the segment step of test sequencers: small, so tests cross
// many renewals.
const testStep = 20

// harness runs sequencer processes against the real local stack, on topics
// under a prefix of its own.
type harness struct {
	t      *testing.T
	st     stack.Stack
	prefix string
	topics eventlog.Topics
	// partitions of every topic of the harness
	partitions int32
	group      string
	bin        string
	cl         *kgo.Client

	mu   sync.Mutex
	sent map[string][]string // session → client msg IDs in send order
}

func newHarness(t *testing.T, partitions int32) *harness {
	t.Helper()
	st := stack.Require(t, "kafka", "pg")
	id := uuid.NewString()[:8]
	h := &harness{t: t, st: st, prefix: "t-" + id + ".", partitions: partitions, group: "seq-test-" + id, sent: map[string][]string{}}
	h.topics = eventlog.Names(h.prefix)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(append(eventlog.ClientOpts(st.KafkaBrokers, "seq-test"), eventlog.ProducerOpts()...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	h.cl = cl
	adm := kadm.NewClient(cl)
	if err := eventlog.EnsureTopics(ctx, adm, eventlog.Specs(h.topics, partitions), 0); err != nil {
		t.Fatalf("create topics: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		names := []string{h.topics.Uplink, h.topics.Sequenced, h.topics.Duplicates, h.topics.Receipts, h.topics.Offline, h.topics.DeadLetter}
		_, _ = adm.DeleteTopics(ctx, names...)
	})
	pool, err := pgxpool.New(ctx, st.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := migrate.Up(ctx, pool, ""); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	h.bin = proc.Build(t, "./sequencer")
	return h
}

// start runs a sequencer process named name.
func (h *harness) start(name string, env ...string) *proc.Proc {
	base := []string{
		"SEQFLOW_KAFKA_BROKERS=" + strings.Join(h.st.KafkaBrokers, ","),
		"SEQFLOW_PG_URL=" + h.st.PGURL,
		"SEQFLOW_TOPIC_PREFIX=" + h.prefix,
		"SEQUENCER_GROUP=" + h.group,
		"SEQUENCER_INSTANCE_ID=" + h.group + "-" + name,
		"SEQUENCER_ADMIN_ADDR=",
		fmt.Sprintf("SEQUENCER_STEP=%d", testStep),
		fmt.Sprintf("SEQUENCER_MAX_POLL_RECORDS=%d", testStep),
		"SEQUENCER_SESSION_TIMEOUT=6s",
		"SEQUENCER_REBALANCE_TIMEOUT=15s",
		"SEQUENCER_TXN_TIMEOUT=8s",
		"SEQUENCER_NODE_LEASE_TTL=6s",
		"SEQUENCER_KAFKA_DEBUG=" + os.Getenv("SEQUENCER_KAFKA_DEBUG"), // true: franz-go's log in the process log
	}
	return proc.Start(h.t, name, h.bin, append(base, env...)...)
}

func (h *harness) session(i int) string { return fmt.Sprintf("%ssess-%03d", h.prefix, i) }

// spread returns perPartition sessions for each of the uplink topic's
// partitions, found by the producers' own key partitioner (murmur2), so a
// test that moves partitions between instances has traffic on every one of
// them. h.session's names hash at random: with 16 of them over 4
// partitions, one partition gets none in about 4 runs of 100.
func (h *harness) spread(perPartition int) []string {
	h.t.Helper()
	part := kgo.StickyKeyPartitioner(nil).ForTopic(h.topics.Uplink)
	count := make([]int, h.partitions)
	var out []string
	for i := 0; len(out) < perPartition*int(h.partitions); i++ {
		s := h.session(i)
		p := part.Partition(&kgo.Record{Key: []byte(s)}, int(h.partitions))
		if count[p] < perPartition {
			count[p]++
			out = append(out, s)
		}
	}
	return out
}

func uplinkValue(session, clientMsgID, body string) []byte {
	v, _ := proto.Marshal(&imv1.Uplink{
		SessionId: session, ClientMsgId: clientMsgID, SenderUserId: "u-" + session[len(session)-3:], SenderDeviceId: "d1",
		GatewayId: "test", GatewayTsMs: time.Now().UnixMilli(),
		Command: &imv1.Uplink_Message{Message: &imv1.MessageContent{Type: "text", Body: []byte(body)}},
	})
	return v
}

// send produces one uplink and records it as sent (a repeated ID is a retry).
func (h *harness) send(ctx context.Context, session, clientMsgID string) error {
	rec := &kgo.Record{Topic: h.topics.Uplink, Key: []byte(session), Value: uplinkValue(session, clientMsgID, "hi "+clientMsgID)}
	if err := h.cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return err
	}
	h.mu.Lock()
	h.sent[session] = append(h.sent[session], clientMsgID)
	h.mu.Unlock()
	return nil
}

// sendRaw produces a record that is not (necessarily) a valid uplink.
func (h *harness) sendRaw(ctx context.Context, key string, value []byte) {
	h.t.Helper()
	if err := h.cl.ProduceSync(ctx, &kgo.Record{Topic: h.topics.Uplink, Key: []byte(key), Value: value}).FirstErr(); err != nil {
		h.t.Fatalf("produce raw uplink: %v", err)
	}
}

func (h *harness) sentSessions() []logcheck.Sent {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]logcheck.Sent, 0, len(h.sent))
	for s, ids := range h.sent {
		out = append(out, logcheck.Sent{SessionID: s, ClientMsgIDs: append([]string(nil), ids...)})
	}
	return out
}

func (h *harness) distinctSent() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, ids := range h.sent {
		seen := map[string]bool{}
		for _, id := range ids {
			if !seen[id] {
				seen[id] = true
				n++
			}
		}
	}
	return n
}

// settle waits until every sent message is in the committed log (or the
// timeout passes) and returns the audit of the log.
func (h *harness) settle(timeout time.Duration) (*logcheck.Log, *logcheck.Report) {
	h.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		began := time.Now()
		l, err := logcheck.Read(ctx, h.st.KafkaBrokers, h.topics)
		cancel()
		if err != nil {
			h.t.Fatalf("read log: %v", err)
		}
		h.t.Logf("read log: %d events, %d duplicate ACKs in %s", len(l.Events), len(l.Duplicates), time.Since(began).Round(time.Millisecond))
		r := logcheck.Check(l, h.sentSessions(), testStep)
		if len(r.Lost) == 0 || time.Now().After(deadline) {
			return l, r
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// producer sends messages to its own sessions, one at a time per session
// as one client connection would, retrying a random share of them (the
// client's resend or a gateway's duplicate produce), until ctx ends.
func (h *harness) producer(ctx context.Context, sessions []string, dupRate float64, pause time.Duration) error {
	r := rand.New(rand.NewPCG(rand.Uint64(), 1))
	var last = map[string]string{}
	for ctx.Err() == nil {
		s := sessions[r.IntN(len(sessions))]
		id := uuid.Must(uuid.NewV7()).String()
		if prev, ok := last[s]; ok && r.Float64() < dupRate {
			id = prev // resend the previous message of this session
		}
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := h.send(sctx, s, id)
		cancel()
		if err != nil {
			return fmt.Errorf("send: %w", err)
		}
		last[s] = id
		if pause > 0 {
			time.Sleep(pause)
		}
	}
	return nil
}

func requireOK(t *testing.T, r *logcheck.Report) {
	t.Helper()
	if !r.OK() {
		t.Fatalf("guarantees broken:\n%s", r)
	}
	t.Logf("audit: %s", strings.ReplaceAll(r.String(), "\n", " "))
}
