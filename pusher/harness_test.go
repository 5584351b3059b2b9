package main

import (
	"context"
	"log/slog"
	"maps"
	"os"
	"runtime/pprof"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/config"
	"github.com/seqflow/seqflow/internal/delivery"
	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/peerauth"
	"github.com/seqflow/seqflow/internal/presence"
	"github.com/seqflow/seqflow/internal/testkit/stack"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// testPartitions is the partition count of the test topics.
const testPartitions = 4

// wait bounds every wait for an effect in these tests.
const wait = 30 * time.Second

// env is one test's world: topics under a prefix of its own on the local
// Kafka, the local Redis, and helpers to play the sequencer (producing
// SequencedEvents transactionally, as it does) and the gateways.
type env struct {
	t      testing.TB
	st     stack.Stack
	prefix string
	topics eventlog.Topics
	group  string
	cl     *kgo.Client // plain producer and admin
	txn    *kgo.Client // transactional producer, the sequencer's role
	rdb    redis.UniversalClient
	pres   *presence.Store
	seq    map[string]int64 // next seq per session
	mu     sync.Mutex
}

func newEnv(t testing.TB) *env {
	t.Helper()
	st := stack.Require(t, "kafka", "redis")
	id := uuid.NewString()[:8]
	e := &env{t: t, st: st, prefix: "t-" + id + ".", group: "pusher-test-" + id, seq: map[string]int64{}}
	e.topics = eventlog.Names(e.prefix)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(append(eventlog.ClientOpts(st.KafkaBrokers, "pusher-test"), eventlog.ProducerOpts()...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	e.cl = cl
	adm := kadm.NewClient(cl)
	if err := eventlog.EnsureTopics(ctx, adm, eventlog.Specs(e.topics, testPartitions), 0); err != nil {
		t.Fatalf("create topics: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = adm.DeleteTopics(ctx, e.topics.Uplink, e.topics.Sequenced, e.topics.Duplicates, e.topics.Receipts, e.topics.Offline, e.topics.DeadLetter)
	})
	txn, err := kgo.NewClient(append(eventlog.ClientOpts(st.KafkaBrokers, "pusher-test-seq"), append(eventlog.ProducerOpts(),
		kgo.TransactionalID("pusher-test-"+id))...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(txn.Close)
	e.txn = txn
	e.rdb = redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{st.RedisAddr}})
	t.Cleanup(func() { _ = e.rdb.Close() })
	e.pres = presence.New(e.rdb, time.Minute)
	return e
}

// user names a user unique to this test.
func (e *env) user(name string) string { return e.prefix + name }

func (e *env) session(name string) string { return e.prefix + "sess-" + name }

func (e *env) config() Config {
	m := map[string]string{
		"SEQFLOW_KAFKA_BROKERS":  e.st.KafkaBrokers[0],
		"SEQFLOW_REDIS_ADDR":     e.st.RedisAddr,
		"SEQFLOW_TOPIC_PREFIX":   e.prefix,
		"PUSHER_GROUP":           e.group,
		"PUSHER_ADMIN_ADDR":      "off",
		"PUSHER_RESET_OFFSET":    "start",
		"PUSHER_SESSION_TIMEOUT": "6s",
		"PUSHER_COMMIT_INTERVAL": "100ms",
	}
	maps.Copy(m, stack.PeerEnv(e.st))
	cfg, err := LoadConfig(config.FromMap(m))
	if err != nil {
		e.t.Fatal(err)
	}
	return cfg
}

// keys is the peer key ring of the stack, which the pushers of config use.
func (e *env) keys() *peerauth.Keyring {
	k, err := peerauth.Load(func(k string) (string, bool) { v, ok := stack.PeerEnv(e.st)[k]; return v, ok })
	if err != nil {
		e.t.Fatal(err)
	}
	return k
}

// running is an in-process pusher.
type running struct {
	p        *Pusher
	cancel   context.CancelFunc
	done     chan error
	stopOnce sync.Once
}

// startPusher runs a pusher until the test ends (or stop), and waits until
// it has partitions.
func (e *env) startPusher(cfg Config) *running {
	e.t.Helper()
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: testLogLevel()}))
	p := New(cfg, log)
	if os.Getenv("SEQFLOW_TEST_KGO_LOG") != "" {
		p.kgoOpts = append(p.kgoOpts, kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelInfo, func() string { return cfg.Topics.Sequenced + " " })))
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{p: p, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- p.Run(ctx) }()
	e.t.Cleanup(func() { r.stop(e.t) })
	deadline := time.Now().Add(3 * wait) // a group join waits out a loaded broker
	for !p.ready.Load() {
		select {
		case err := <-r.done:
			r.done <- err
			e.t.Fatalf("pusher exited at start: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 2)
			e.t.Fatal("pusher got no partitions")
		}
	}
	return r
}

func (r *running) stop(t testing.TB) {
	r.stopOnce.Do(func() {
		r.cancel()
		select {
		case err := <-r.done:
			if err != nil && err != context.Canceled {
				t.Errorf("pusher Run = %v, want context.Canceled", err)
			}
		case <-time.After(wait):
			t.Error("pusher did not stop")
		}
	})
}

// emit writes events to im.sequenced.v1 in one committed transaction, as
// the sequencer does, giving each the next seq of its session.
func (e *env) emit(evs ...*imv1.SequencedEvent) []*imv1.SequencedEvent {
	e.t.Helper()
	return e.emitTxn(true, evs...)
}

func (e *env) emitTxn(commit bool, evs ...*imv1.SequencedEvent) []*imv1.SequencedEvent {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := e.txn.BeginTransaction(); err != nil {
		e.t.Fatal(err)
	}
	for _, ev := range evs {
		e.mu.Lock()
		e.seq[ev.SessionId]++
		ev.Seq = e.seq[ev.SessionId]
		e.mu.Unlock()
		ev.MsgId = time.Now().UnixNano()
		ev.ServerTsMs = time.Now().UnixMilli()
		v, _ := proto.Marshal(ev)
		r := &kgo.Record{Topic: e.topics.Sequenced, Key: []byte(ev.SessionId), Value: v,
			Headers: eventlog.Headers(kind(ev), "seqflow.im.v1.SequencedEvent", "test", "")}
		if err := e.txn.ProduceSync(ctx, r).FirstErr(); err != nil {
			e.t.Fatal(err)
		}
	}
	if err := e.txn.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
		e.t.Fatal(err)
	}
	return evs
}

func (e *env) emitDuplicate(d *imv1.DuplicateAck) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	v, _ := proto.Marshal(d)
	if err := e.cl.ProduceSync(ctx, &kgo.Record{Topic: e.topics.Duplicates, Key: []byte(d.SessionId), Value: v}).FirstErr(); err != nil {
		e.t.Fatal(err)
	}
}

func createEv(session, sender string, members ...string) *imv1.SequencedEvent {
	return &imv1.SequencedEvent{SessionId: session, SenderUserId: sender, SenderDeviceId: "d",
		Payload: &imv1.SequencedEvent_SessionCreate{SessionCreate: &imv1.SessionCreate{Kind: imv1.SessionKind_SESSION_KIND_GROUP, MemberUserIds: members}}}
}

func memberEv(session, sender string, op imv1.MembershipChange_Op, users ...string) *imv1.SequencedEvent {
	return &imv1.SequencedEvent{SessionId: session, SenderUserId: sender, SenderDeviceId: "d",
		Payload: &imv1.SequencedEvent_Membership{Membership: &imv1.MembershipChange{Op: op, UserIds: users}}}
}

func msgEv(session, sender, body string) *imv1.SequencedEvent {
	return &imv1.SequencedEvent{SessionId: session, SenderUserId: sender, SenderDeviceId: "d", ClientMsgId: uuid.NewString(),
		Payload: &imv1.SequencedEvent_Message{Message: &imv1.MessageContent{Type: "text", Body: []byte(body)}}}
}

// gateway is a test gateway: it receives its batches over the real
// transport and records, per connection, what reached it.
type gateway struct {
	id     string
	e      *env
	cancel context.CancelFunc
	done   chan error

	mu      sync.Mutex
	got     map[string][]*imv1.PushItem // conn ID → items, in arrival order
	batches int
}

func (e *env) gateway(name string) *gateway { return e.gatewayOf("redis", name) }

// gatewayOf starts a test gateway receiving over kind: "redis" (pub/sub)
// or "tcp" (a registered stream listener).
func (e *env) gatewayOf(kind, name string) *gateway {
	e.t.Helper()
	g := &gateway{id: e.prefix + name, e: e, got: map[string][]*imv1.PushItem{}, done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	g.cancel = cancel
	var rcv delivery.Receiver = delivery.NewRedisReceiver(e.rdb, e.keys(), delivery.RedisReceiverOptions{})
	if kind == "tcp" {
		rcv = delivery.NewTCPReceiver(delivery.NewRedisRegistry(e.rdb, e.keys()), e.keys(), delivery.TCPReceiverOptions{})
	}
	go func() { g.done <- rcv.Receive(ctx, g.id, g.handle) }()
	e.t.Cleanup(g.kill)
	g.awaitListening(kind)
	return g
}

// awaitListening waits until Redis counts a subscriber on the channel, or
// the registry holds the stream address.
func (g *gateway) awaitListening(kind string) {
	g.e.t.Helper()
	deadline := time.Now().Add(wait)
	for {
		n, err := g.e.rdb.PubSubShardNumSub(context.Background(), delivery.Channel(g.id)).Result()
		if kind == "redis" && err == nil && n[delivery.Channel(g.id)] > 0 {
			return
		}
		if _, err := delivery.NewRedisRegistry(g.e.rdb, g.e.keys()).Lookup(context.Background(), g.id); kind == "tcp" && err == nil {
			return
		}
		if time.Now().After(deadline) {
			g.e.t.Fatalf("gateway %s never subscribed", g.id)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (g *gateway) handle(b *imv1.PushBatch) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.batches++
	for _, it := range b.Items {
		for _, r := range it.Recipients {
			g.got[r.ConnId] = append(g.got[r.ConnId], it)
		}
	}
}

// kill makes the gateway disappear, as a crash would.
func (g *gateway) kill() {
	g.cancel()
	<-g.done
	g.done <- context.Canceled // later kills return at once
}

// connect registers a connection of user's device on g in presence.
func (g *gateway) connect(user, device string) presence.Conn {
	g.e.t.Helper()
	c := presence.Conn{UserID: user, DeviceID: device, ConnID: g.id + "/" + user + "/" + device, GatewayID: g.id}
	if err := g.e.pres.Put(context.Background(), c); err != nil {
		g.e.t.Fatal(err)
	}
	g.e.t.Cleanup(func() { _ = g.e.pres.Remove(context.Background(), c) })
	return c
}

// seqs returns the seqs of session's events that reached conn, in order.
func (g *gateway) seqs(c presence.Conn, session string) []int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []int64
	for _, it := range g.got[c.ConnID] {
		if ev := it.GetEvent(); ev != nil && ev.SessionId == session {
			out = append(out, ev.Seq)
		}
	}
	return out
}

func (g *gateway) duplicates(c presence.Conn) []*imv1.DuplicateAck {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []*imv1.DuplicateAck
	for _, it := range g.got[c.ConnID] {
		if d := it.GetDuplicate(); d != nil {
			out = append(out, d)
		}
	}
	return out
}

// eventually polls cond until it holds or the wait ends.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// awaitSeqs waits until conn on g has received exactly want of session.
func awaitSeqs(t *testing.T, g *gateway, c presence.Conn, session string, want ...int64) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		got := g.seqs(c, session)
		if slices.Equal(got, want) {
			return
		}
		if len(got) > len(want) || time.Now().After(deadline) {
			t.Fatalf("%s received seqs %v of %s, want %v", c.ConnID, got, session, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// offline reads every OfflineNotification of session from im.offline.v1
// until n have arrived, then a little longer to catch extras.
func (e *env) offline(session string, n int) []*imv1.OfflineNotification {
	e.t.Helper()
	rd, err := kgo.NewClient(append(eventlog.ClientOpts(e.st.KafkaBrokers, "pusher-test-offline"),
		kgo.ConsumeTopics(e.topics.Offline), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(200*time.Millisecond))...)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rd.Close()
	var out []*imv1.OfflineNotification
	deadline := time.Now().Add(wait)
	var extra time.Time
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		fs := rd.PollFetches(ctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) {
			var o imv1.OfflineNotification
			if err := proto.Unmarshal(r.Value, &o); err != nil {
				e.t.Fatalf("offline record does not decode: %v", err)
			}
			if string(r.Key) != o.RecipientUserId {
				e.t.Fatalf("offline record key %q is not the recipient %q", r.Key, o.RecipientUserId)
			}
			if o.SessionId == session {
				out = append(out, &o)
			}
		})
		switch {
		case len(out) >= n && extra.IsZero():
			extra = time.Now().Add(time.Second)
		case !extra.IsZero() && time.Now().After(extra):
			return out
		case time.Now().After(deadline):
			e.t.Fatalf("%d offline notifications of %s, want %d", len(out), session, n)
		}
	}
}

// awaitCommitted waits until the group has committed every partition of
// im.sequenced.v1 up to its end (the last offset of a transactional
// partition is its commit marker, which a consumer does not commit past).
func (e *env) awaitCommitted() {
	e.t.Helper()
	adm := kadm.NewClient(e.cl)
	eventually(e.t, "offsets committed to the end", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ends, err := adm.ListEndOffsets(ctx, e.topics.Sequenced)
		if err != nil {
			return false
		}
		committed, err := adm.FetchOffsets(ctx, e.group)
		if err != nil {
			return false
		}
		ok := true
		ends.Each(func(o kadm.ListedOffset) {
			if o.Offset == 0 {
				return
			}
			c, found := committed.Lookup(o.Topic, o.Partition)
			if !found || c.At < o.Offset-1 {
				ok = false
			}
		})
		return ok
	})
}

// testLogLevel is warn, or info with SEQFLOW_TEST_LOG=info.
func testLogLevel() slog.Level {
	if os.Getenv("SEQFLOW_TEST_LOG") == "info" {
		return slog.LevelInfo
	}
	return slog.LevelWarn
}
