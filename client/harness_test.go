package client

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seqflow/seqflow/internal/auth"
	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/migrate"
	"github.com/seqflow/seqflow/internal/proctest"
	"github.com/seqflow/seqflow/internal/stack"
)

// The integration harness runs the whole pipeline as processes under a
// fresh topic prefix: sequencer, persister, pusher and any number of
// producer-gw processes, so a test can kill -9 and restart a gateway.
// (The pattern is producer-gw/harness_test.go's, with the gateway as a
// process too.)

const testSecret = "client-test-secret-client-test-secret"

type pipeline struct {
	t      *testing.T
	st     stack.Stack
	prefix string
	id     string
	pool   *pgxpool.Pool
	signer *auth.Signer
	gwBin  string
}

func newPipeline(t *testing.T) *pipeline {
	t.Helper()
	st := stack.Require(t, "kafka", "pg", "redis")
	id := uuid.NewString()[:8]
	p := &pipeline{t: t, st: st, prefix: "t-" + id + ".", id: id}
	topics := eventlog.Names(p.prefix)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(eventlog.ClientOpts(st.KafkaBrokers, "client-test-admin")...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	if err := eventlog.EnsureTopics(ctx, adm, eventlog.Specs(topics, 4), 0); err != nil {
		t.Fatalf("create topics: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = adm.DeleteTopics(ctx, topics.Uplink, topics.Sequenced, topics.Duplicates, topics.Receipts, topics.Offline, topics.DeadLetter)
	})
	if p.pool, err = pgxpool.New(ctx, st.PGURL); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.pool.Close)
	if _, err := migrate.Up(ctx, p.pool, ""); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	p.signer, _ = auth.NewHS256Signer([]byte(testSecret))

	common := p.common()
	seq := proctest.Build(t, "./sequencer")
	per := proctest.Build(t, "./persister")
	push := proctest.Build(t, "./pusher")
	p.gwBin = proctest.Build(t, "./producer-gw")
	admins := []string{freeAddr(t), freeAddr(t), freeAddr(t)}
	proctest.Start(t, "sequencer", seq, append(common, "SEQUENCER_GROUP=clt-seq-"+id, "SEQUENCER_INSTANCE_ID=clt-"+id,
		"SEQUENCER_ADMIN_ADDR="+admins[0], "SEQUENCER_SESSION_TIMEOUT=6s")...)
	proctest.Start(t, "persister", per, append(common, "PERSISTER_GROUP=clt-per-"+id, "PERSISTER_INSTANCE_ID=clt-"+id,
		"PERSISTER_ADMIN_ADDR="+admins[1], "PERSISTER_MIGRATE=false", "PERSISTER_SESSION_TIMEOUT=6s")...)
	proctest.Start(t, "pusher", push, append(common, "PUSHER_GROUP=clt-push-"+id, "PUSHER_INSTANCE_ID=clt-"+id,
		"PUSHER_ADMIN_ADDR="+admins[2], "PUSHER_RESET_OFFSET=start", "PUSHER_SESSION_TIMEOUT=6s")...)
	// Ready means partitions assigned: before that, the first commands
	// would wait for a group join.
	deadline := time.Now().Add(90 * time.Second)
	for i, a := range admins {
		for {
			resp, err := http.Get("http://" + a + "/readyz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not ready within 90s: %v", []string{"sequencer", "persister", "pusher"}[i], err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return p
}

func (p *pipeline) common() []string {
	return []string{
		"SEQFLOW_KAFKA_BROKERS=" + strings.Join(p.st.KafkaBrokers, ","),
		"SEQFLOW_PG_URL=" + p.st.PGURL,
		"SEQFLOW_REDIS_ADDR=" + p.st.RedisAddr,
		"SEQFLOW_TOPIC_PREFIX=" + p.prefix,
	}
}

// gateway is a producer-gw process on a fixed address, so a restart
// comes back where the clients look for it.
type gateway struct {
	proc *proctest.Proc
	addr string
	url  string
}

func (p *pipeline) gateway(t *testing.T, name string, env ...string) *gateway {
	t.Helper()
	addr := freeAddr(t)
	all := append(p.common(), "GATEWAY_ID=clt-"+name+"-"+p.id, "GATEWAY_ADDR="+addr, "GATEWAY_ADMIN_ADDR=",
		"GATEWAY_JWT_HS256_SECRET="+testSecret, "GATEWAY_ACK_WAIT=5s", "GATEWAY_SHUTDOWN_TIMEOUT=3s",
		"GATEWAY_RATE_PER_USER=2000", "GATEWAY_RATE_BURST=2000")
	g := &gateway{proc: proctest.Start(t, name, p.gwBin, append(all, env...)...), addr: addr, url: "ws://" + addr}
	g.waitListening(t)
	return g
}

func (g *gateway) waitListening(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + g.addr + "/v1/changes")
		if err == nil {
			resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway %s not listening: %v", g.proc, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func (p *pipeline) token(user, device string) string {
	tok, err := p.signer.Mint(user, device, time.Hour)
	if err != nil {
		p.t.Fatal(err)
	}
	return tok
}

// recorder collects what a client's app receives.
type recorder struct {
	mu     sync.Mutex
	events []Event
	wake   chan struct{}
}

func newRecorder() *recorder { return &recorder{wake: make(chan struct{}, 1)} }

func (r *recorder) add(e Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *recorder) snapshot() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.events...)
}

// waitFor waits until ok holds for the events received so far.
func (r *recorder) waitFor(t *testing.T, d time.Duration, what string, ok func([]Event) bool) []Event {
	t.Helper()
	deadline := time.After(d)
	for {
		evs := r.snapshot()
		if ok(evs) {
			return evs
		}
		select {
		case <-r.wake:
		case <-deadline:
			t.Fatalf("no %s within %v; got %d events", what, d, len(evs))
		}
	}
}

// running is a Client with its Run goroutine.
type running struct {
	*Client
	rec  *recorder
	stop func() error
}

// start runs a client for user/device against urls; the test's cleanup
// stops it.
func (p *pipeline) start(t *testing.T, user, device string, urls []string, tune func(*Options)) *running {
	t.Helper()
	rec := newRecorder()
	opts := Options{URLs: urls, Token: p.token(user, device), OnEvent: rec.add, MinBackoff: 50 * time.Millisecond,
		MaxBackoff: time.Second, AckTimeout: 3 * time.Second}
	if tune != nil {
		tune(&opts)
	}
	c, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			runErr = <-errc
			if errors.Is(runErr, context.Canceled) {
				runErr = nil
			}
		})
		return runErr
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("client %s/%s Run: %v", user, device, err)
		}
	})
	return &running{Client: c, rec: rec, stop: stop}
}

func user(prefix string) string { return prefix + "-" + uuid.NewString()[:8] }

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
