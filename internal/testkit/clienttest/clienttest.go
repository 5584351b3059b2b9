// Package clienttest runs the whole seqflow pipeline as processes for
// integration tests of the SDK and the tools built on it: topics under a
// fresh prefix, migrations, and sequencer, persister, pusher and any number
// of producer-gw processes on the local stack, so a test can kill -9 and
// restart a gateway. It follows producer-gw/harness_test.go, with the
// gateway as a process too.
package clienttest

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seqflow/seqflow/internal/auth"
	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/migrate"
	"github.com/seqflow/seqflow/internal/testkit/proc"
	"github.com/seqflow/seqflow/internal/testkit/stack"
)

// Secret is the HS256 secret of every gateway the pipeline starts.
const Secret = "client-test-secret-client-test-secret"

// Pipeline is a running pipeline under its own topic prefix.
type Pipeline struct {
	Stack  stack.Stack
	Prefix string
	ID     string
	Pool   *pgxpool.Pool
	// Pusher is the pipeline's pusher process (a test may pause it).
	Pusher *proc.Proc
	signer *auth.Signer
	gwBin  string
}

// Start creates the topics, applies the migrations and starts the
// sequencer, persister and pusher, waiting until each is ready. The test's
// cleanup stops them and deletes the topics.
func Start(t *testing.T) *Pipeline {
	t.Helper()
	st := stack.Require(t, "kafka", "pg", "redis")
	id := uuid.NewString()[:8]
	p := &Pipeline{Stack: st, Prefix: "t-" + id + ".", ID: id}
	topics := eventlog.Names(p.Prefix)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(eventlog.ClientOpts(st.KafkaBrokers, "clienttest-admin")...)
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
	if p.Pool, err = pgxpool.New(ctx, st.PGURL); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Pool.Close)
	if _, err := migrate.Up(ctx, p.Pool, ""); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	p.signer, _ = auth.NewHS256Signer([]byte(Secret))

	common := p.Env()
	seq := proc.Build(t, "./sequencer")
	per := proc.Build(t, "./persister")
	push := proc.Build(t, "./pusher")
	p.gwBin = proc.Build(t, "./producer-gw")
	procs := []*proc.Proc{
		proc.Start(t, "sequencer", seq, append(common, "SEQUENCER_GROUP=clt-seq-"+id, "SEQUENCER_INSTANCE_ID=clt-"+id,
			"SEQUENCER_ADMIN_ADDR="+proc.AnyPort, "SEQUENCER_SESSION_TIMEOUT=6s")...),
		proc.Start(t, "persister", per, append(common, "PERSISTER_GROUP=clt-per-"+id, "PERSISTER_INSTANCE_ID=clt-"+id,
			"PERSISTER_ADMIN_ADDR="+proc.AnyPort, "PERSISTER_MIGRATE=false", "PERSISTER_SESSION_TIMEOUT=6s")...),
		proc.Start(t, "pusher", push, append(common, "PUSHER_GROUP=clt-push-"+id, "PUSHER_INSTANCE_ID=clt-"+id,
			"PUSHER_ADMIN_ADDR="+proc.AnyPort, "PUSHER_RESET_OFFSET=start", "PUSHER_SESSION_TIMEOUT=6s")...),
	}
	p.Pusher = procs[2]
	// Ready means partitions assigned: before that, the first commands
	// would wait for a group join.
	rctx, rcancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer rcancel()
	for i, pr := range procs {
		pr.Admin = proc.LoggedAddr(t, pr, "admin listening", []string{"SEQUENCER", "PERSISTER", "PUSHER"}[i]+"_ADMIN_ADDR")
		if err := pr.WaitReady(rctx); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// Env is the connection settings every process of the pipeline gets.
func (p *Pipeline) Env() []string {
	return []string{
		"SEQFLOW_KAFKA_BROKERS=" + strings.Join(p.Stack.KafkaBrokers, ","),
		"SEQFLOW_PG_URL=" + p.Stack.PGURL,
		"SEQFLOW_REDIS_ADDR=" + p.Stack.RedisAddr,
		"SEQFLOW_TOPIC_PREFIX=" + p.Prefix,
	}
}

// Gateway is a producer-gw process on a fixed address, so a restart comes
// back where clients look for it.
type Gateway struct {
	Proc *proc.Proc
	Addr string
	URL  string // ws://Addr
}

// Gateway starts a producer-gw process named name (env overrides the
// defaults: ACK wait 5s, rate limits high enough for tests, plaintext
// bodies unless env brings a SEQFLOW_KEK) on a port the kernel picks and
// waits until it listens.
func (p *Pipeline) Gateway(t *testing.T, name string, env ...string) *Gateway {
	t.Helper()
	all := append(p.Env(), "GATEWAY_ID=clt-"+name+"-"+p.ID, "GATEWAY_ADDR="+proc.AnyPort, "GATEWAY_ADMIN_ADDR=",
		"GATEWAY_JWT_HS256_SECRET="+Secret, "GATEWAY_ACK_WAIT=5s", "GATEWAY_SHUTDOWN_TIMEOUT=3s",
		"GATEWAY_RATE_PER_USER=2000", "GATEWAY_RATE_BURST=2000")
	sealed := slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "SEQFLOW_KEK=") && kv != "SEQFLOW_KEK=" })
	if !sealed {
		// The tests read bodies in the log and the store; a KEK of the
		// caller's environment must not make them sealed.
		all = append(all, "SEQFLOW_KEK=", "SEQFLOW_PLAINTEXT_BODIES=true")
	}
	pr := proc.Start(t, name, p.gwBin, append(all, env...)...)
	addr := proc.LoggedAddr(t, pr, "gateway listening", "GATEWAY_ADDR")
	g := &Gateway{Proc: pr, Addr: addr, URL: "ws://" + addr}
	g.WaitListening(t)
	return g
}

// WaitListening waits until the gateway answers HTTP (after a restart).
func (g *Gateway) WaitListening(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + g.Addr + "/v1/changes")
		if err == nil {
			resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway %s not listening: %v", g.Proc, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// FreeAddr returns a 127.0.0.1 address with a port free a moment ago.
func FreeAddr(t *testing.T) string { return proc.FreeAddr(t) }

// Token mints a one-hour token for user and device.
func (p *Pipeline) Token(t *testing.T, user, device string) string {
	t.Helper()
	tok, err := p.signer.Mint(user, device, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// User returns a fresh user ID with prefix.
func User(prefix string) string { return prefix + "-" + uuid.NewString()[:8] }
