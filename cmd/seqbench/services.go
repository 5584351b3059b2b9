package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/migrate"
)

// benchSecret is the HS256 secret of the bench's gateways; the load
// generator mints its users' tokens with it.
const benchSecret = "seqbench-secret-seqbench-secret-0123456789"

// services is a set of service processes of one phase, on one topic
// prefix of their own.
type services struct {
	b      *Bench
	prefix string
	procs  []*proc
}

type proc struct {
	name  string
	cmd   *exec.Cmd
	log   string
	admin string
	done  chan struct{}
	err   error
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
	for _, svc := range serviceOrder {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(".data", "bin", svc), "./"+svc)
		cmd.Dir = b.cfg.Root
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("build %s: %w: %s", svc, err, out)
		}
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
	s := &services{b: b, prefix: "bench-" + id + "."}
	if err := b.setupTopics(ctx, s.prefix); err != nil {
		return nil, err
	}
	common := []string{
		"SEQFLOW_KAFKA_BROKERS=" + strings.Join(b.cfg.Brokers, ","),
		"SEQFLOW_PG_URL=" + b.cfg.PGURL,
		"SEQFLOW_REDIS_ADDR=" + b.cfg.RedisAddr,
		"SEQFLOW_TOPIC_PREFIX=" + s.prefix,
	}
	own := map[string][]string{
		"sequencer": {"SEQUENCER_GROUP=bench-seq-" + id, "SEQUENCER_INSTANCE_ID=bench-" + id, "SEQUENCER_ADMIN_ADDR=" + b.adminAddr("sequencer")},
		"persister": {"PERSISTER_GROUP=bench-per-" + id, "PERSISTER_INSTANCE_ID=bench-" + id, "PERSISTER_ADMIN_ADDR=" + b.adminAddr("persister")},
		"pusher":    {"PUSHER_GROUP=bench-push-" + id, "PUSHER_INSTANCE_ID=bench-" + id, "PUSHER_ADMIN_ADDR=" + b.adminAddr("pusher")},
		// The per-user rate limit (50/s by default) is raised so the
		// as-fast-as-possible run measures the pipeline, not the limiter.
		"producer-gw": {"GATEWAY_ID=bench-" + id, "GATEWAY_ADDR=" + b.gatewayAddr(), "GATEWAY_ADMIN_ADDR=" + b.adminAddr("producer-gw"),
			"GATEWAY_JWT_HS256_SECRET=" + benchSecret, "GATEWAY_RATE_PER_USER=100000", "GATEWAY_RATE_BURST=100000"},
	}
	for _, name := range names {
		p := &proc{name: name, log: filepath.Join(b.logDir, phase+"-"+name+".log"), admin: b.adminAddr(name), done: make(chan struct{})}
		f, err := os.Create(p.log)
		if err != nil {
			s.stop()
			return nil, fmt.Errorf("create service log: %w", err)
		}
		// Not CommandContext: stop() ends them with SIGTERM, then SIGKILL.
		p.cmd = exec.Command(filepath.Join(b.cfg.Root, ".data", "bin", name))
		p.cmd.Env = slices.Concat(os.Environ(), common, own[name], b.cfg.ServiceEnv, extra)
		p.cmd.Stdout, p.cmd.Stderr = f, f
		if err := p.cmd.Start(); err != nil {
			f.Close()
			s.stop()
			return nil, &ServiceError{Service: name, Log: p.log, Err: err}
		}
		go func() {
			p.err = p.cmd.Wait()
			f.Close()
			close(p.done)
		}()
		s.procs = append(s.procs, p)
	}
	rctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	for _, p := range s.procs {
		if err := waitReady(rctx, p); err != nil {
			s.stop()
			return nil, err
		}
	}
	return s, nil
}

func waitReady(ctx context.Context, p *proc) error {
	url := "http://" + p.admin + "/readyz"
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.done:
			return &ServiceError{Service: p.name, Log: p.log, Err: fmt.Errorf("exited before ready: %v", p.err)}
		case <-ctx.Done():
			return &ServiceError{Service: p.name, Log: p.log, Err: fmt.Errorf("not ready: %w", ctx.Err())}
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// pid returns the process ID of the named service, 0 if not started.
func (s *services) pid(name string) int {
	for _, p := range s.procs {
		if p.name == name {
			return p.cmd.Process.Pid
		}
	}
	return 0
}

// exited returns an error for every service that is no longer running.
func (s *services) exited() error {
	var errs []error
	for _, p := range s.procs {
		select {
		case <-p.done:
			errs = append(errs, &ServiceError{Service: p.name, Log: p.log, Err: fmt.Errorf("exited during the phase: %v", p.err)})
		default:
		}
	}
	return errors.Join(errs...)
}

// stop ends the services in reverse start order: SIGTERM, then SIGKILL
// after 15 s.
func (s *services) stop() {
	for i := len(s.procs) - 1; i >= 0; i-- {
		p := s.procs[i]
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	s.b.deleteTopics(s.prefix)
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

// setupTopics creates the prefix's topics and applies the migrations.
func (b *Bench) setupTopics(ctx context.Context, prefix string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.cfg.Brokers...))
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	if err := eventlog.EnsureTopics(ctx, kadm.NewClient(cl), eventlog.Specs(eventlog.Names(prefix), int32(b.cfg.Partitions)), 0); err != nil {
		return fmt.Errorf("create topics: %w", err)
	}
	pool, err := pgxpool.New(ctx, b.cfg.PGURL)
	if err != nil {
		return fmt.Errorf("postgres pool: %w", err)
	}
	defer pool.Close()
	if _, err := migrate.Up(ctx, pool, "public"); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}
