package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/migrate"
	"github.com/seqflow/seqflow/internal/testkit/proc"
)

// benchSecret is the HS256 secret of the bench's gateways; the load
// generator mints its users' tokens with it.
const benchSecret = "seqbench-secret-seqbench-secret-0123456789"

// services is a set of service processes of one phase, on one topic
// prefix of their own.
type services struct {
	b      *Bench
	prefix string
	// schema is the PostgreSQL schema of the phase's store and seq
	// segments, dropped with the topics: bench runs leave nothing in
	// the stack's public schema (millions of rows after a few dozen
	// runs would slow every later test that scans it).
	schema string
	procs  []*proc.Proc
}

// Every service the bench starts, in start order.
var serviceOrder = []string{"sequencer", "persister", "pusher", "producer-gw"}

func (b *Bench) gatewayAddr() string { return fmt.Sprintf("127.0.0.1:%d", b.cfg.PortBase+80) }

func (b *Bench) adminAddr(svc string) string {
	off := map[string]int{"sequencer": 1, "persister": 2, "producer-gw": 3, "pusher": 4}[svc]
	return fmt.Sprintf("127.0.0.1:%d", b.cfg.PortBase+off)
}

// buildServices builds the service binaries into .data/bin once per run.
func (b *Bench) buildServices(ctx context.Context) error {
	if b.built {
		return nil
	}
	pkgs := make([]string, len(serviceOrder))
	for i, svc := range serviceOrder {
		pkgs[i] = "./" + svc
	}
	if _, err := proc.Compile(ctx, b.cfg.Root, filepath.Join(b.cfg.Root, ".data", "bin"), pkgs...); err != nil {
		return err
	}
	b.built = true
	return nil
}

func randHex(n int) string {
	p := make([]byte, n)
	_, _ = rand.Read(p)
	return hex.EncodeToString(p)
}

// startServices creates a fresh topic prefix, its topics and the
// migrations, then starts names as processes (extra env last, so it
// wins) and waits for their /readyz. The caller stops them with stop.
func (b *Bench) startServices(ctx context.Context, phase string, extra []string, names ...string) (*services, error) {
	if err := b.buildServices(ctx); err != nil {
		return nil, err
	}
	id := randHex(4)
	s := &services{b: b, prefix: "bench-" + id + ".", schema: "bench_" + id}
	if err := b.setupTopics(ctx, s.prefix, s.schema); err != nil {
		b.dropSchema(s.schema)
		return nil, err
	}
	pgURL, err := withSearchPath(b.cfg.PGURL, s.schema)
	if err != nil {
		b.dropSchema(s.schema)
		return nil, err
	}
	common := []string{
		"SEQFLOW_KAFKA_BROKERS=" + strings.Join(b.cfg.Brokers, ","),
		"SEQFLOW_PG_URL=" + pgURL,
		"PERSISTER_SCHEMA=" + s.schema,
		"GATEWAY_STORE_SCHEMA=" + s.schema,
		"SEQFLOW_REDIS_ADDR=" + b.cfg.RedisAddr,
		"SEQFLOW_TOPIC_PREFIX=" + s.prefix,
		// Profiles on the admin ports (docs/benchmarks.md), behind the
		// operator tokens of SEQFLOW_ADMIN_TOKENS_FILE (the stack's env).
		"SEQFLOW_ADMIN_PPROF=true",
	}
	own := map[string][]string{
		"sequencer": {"SEQUENCER_GROUP=bench-seq-" + id, "SEQUENCER_INSTANCE_ID=bench-" + id, "SEQUENCER_ADMIN_ADDR=" + b.adminAddr("sequencer")},
		"persister": {"PERSISTER_GROUP=bench-per-" + id, "PERSISTER_INSTANCE_ID=bench-" + id, "PERSISTER_ADMIN_ADDR=" + b.adminAddr("persister")},
		"pusher":    {"PUSHER_GROUP=bench-push-" + id, "PUSHER_INSTANCE_ID=bench-" + id, "PUSHER_ADMIN_ADDR=" + b.adminAddr("pusher")},
		// The per-user rate limit (50/s by default) is raised so the
		// as-fast-as-possible run measures the pipeline, not the limiter;
		// the connection caps are off because every client dials from
		// 127.0.0.1 (the idle phase holds 19,000 and more).
		"producer-gw": {"GATEWAY_ID=bench-" + id, "GATEWAY_ADDR=" + b.gatewayAddr(), "GATEWAY_ADMIN_ADDR=" + b.adminAddr("producer-gw"),
			"GATEWAY_JWT_HS256_SECRET=" + benchSecret, "GATEWAY_RATE_PER_USER=100000", "GATEWAY_RATE_BURST=100000",
			"GATEWAY_MAX_CONNS=0", "GATEWAY_MAX_CONNS_PER_IP=0"},
	}
	// Plaintext bodies, as every figure of docs/benchmarks.md was measured,
	// unless SEQBENCH_SERVICE_ENV brings a KEK (docs/erasure.md, "Cost").
	if !slices.ContainsFunc(b.cfg.ServiceEnv, func(kv string) bool { return strings.HasPrefix(kv, "SEQFLOW_KEK=") && kv != "SEQFLOW_KEK=" }) {
		own["producer-gw"] = append(own["producer-gw"], "SEQFLOW_KEK=", "SEQFLOW_PLAINTEXT_BODIES=true")
	}
	for _, name := range names {
		p := &proc.Proc{Name: name, Bin: filepath.Join(b.cfg.Root, ".data", "bin", name),
			Env:   slices.Concat(common, own[name], b.cfg.ServiceEnv, extra),
			Log:   filepath.Join(b.logDir, phase+"-"+name+".log"),
			Admin: b.adminAddr(name)}
		if err := p.Start(); err != nil {
			s.stop()
			return nil, &ServiceError{Service: name, Log: p.Log, Err: err}
		}
		s.procs = append(s.procs, p)
	}
	rctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	for _, p := range s.procs {
		if err := p.WaitReady(rctx); err != nil {
			s.stop()
			return nil, &ServiceError{Service: p.Name, Log: p.Log, Err: err}
		}
	}
	return s, nil
}

// pid returns the process ID of the named service, 0 if not started.
func (s *services) pid(name string) int {
	for _, p := range s.procs {
		if p.Name == name {
			return p.Pid()
		}
	}
	return 0
}

// exited returns an error for every service that is no longer running.
func (s *services) exited() error {
	var errs []error
	for _, p := range s.procs {
		if !p.Running() {
			errs = append(errs, &ServiceError{Service: p.Name, Log: p.Log, Err: fmt.Errorf("exited during the phase: %v", p.Err())})
		}
	}
	return errors.Join(errs...)
}

// stop ends the services (stopProcs) and deletes their topics and
// their schema.
func (s *services) stop() {
	s.stopProcs()
	s.b.deleteTopics(s.prefix)
	s.b.dropSchema(s.schema)
}

// withSearchPath returns the PostgreSQL URL with search_path set to
// schema, so every unqualified table a service uses (seq segments,
// group snapshots) lands in the phase's schema. pgx sends unknown URL
// parameters as run-time parameters.
func withSearchPath(pgURL, schema string) (string, error) {
	u, err := url.Parse(pgURL)
	if err != nil || u.Scheme == "" {
		return "", fmt.Errorf("SEQFLOW_PG_URL must be a postgres:// URL to give the bench its own schema: %q", pgURL)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// dropSchema removes a phase's schema and everything in it (best
// effort: a failure only leaves it behind).
func (b *Bench) dropSchema(schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, b.cfg.PGURL)
	if err != nil {
		return
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		b.log.Warn("drop bench schema", "schema", schema, "err", err)
	}
}

// stopProcs ends the services in reverse start order: SIGTERM, then
// SIGKILL after 15 s.
func (s *services) stopProcs() {
	for i := len(s.procs) - 1; i >= 0; i-- {
		s.procs[i].Stop(15 * time.Second)
	}
}

// deleteTopics removes the prefix's topics, so bench runs do not pile up
// partitions on the shared broker (a failure only leaves them behind).
func (b *Bench) deleteTopics(prefix string) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.cfg.Brokers...))
	if err != nil {
		return
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t := eventlog.Names(prefix)
	_, _ = kadm.NewClient(cl).DeleteTopics(ctx, t.Uplink, t.Sequenced, t.Duplicates, t.Receipts, t.Offline, t.DeadLetter)
}

// createTopics creates the prefix's topics with the bench's partitions.
func (b *Bench) createTopics(ctx context.Context, prefix string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.cfg.Brokers...))
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	if err := eventlog.EnsureTopics(ctx, kadm.NewClient(cl), eventlog.Specs(eventlog.Names(prefix), int32(b.cfg.Partitions)), 0); err != nil {
		return fmt.Errorf("create topics: %w", err)
	}
	return nil
}

// setupTopics creates the prefix's topics, the schema, and applies the
// migrations in it.
func (b *Bench) setupTopics(ctx context.Context, prefix, schema string) error {
	if err := b.createTopics(ctx, prefix); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, b.cfg.PGURL)
	if err != nil {
		return fmt.Errorf("postgres pool: %w", err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{schema}.Sanitize()); err != nil {
		return fmt.Errorf("create schema: %w", err)
	}
	if _, err := migrate.Up(ctx, pool, schema); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}
