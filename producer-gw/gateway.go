package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/seqflow/seqflow/internal/admin"
	"github.com/seqflow/seqflow/internal/auth"
	"github.com/seqflow/seqflow/internal/delivery"
	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/presence"
	"github.com/seqflow/seqflow/internal/store"
	"github.com/seqflow/seqflow/internal/telemetry"
	"github.com/seqflow/seqflow/schemas/imv1"
)

const service = "producer-gw"

// localMembershipTTL is how long membership seen in events overrides the
// store: far above the persister's lag, far below anything a client notices.
const localMembershipTTL = 5 * time.Minute

// Gateway serves clients over WebSocket and HTTP: it authenticates them,
// validates their commands, produces uplinks, answers with the seq, pushes
// events to their connections and serves sync.
type Gateway struct {
	cfg      Config
	log      *slog.Logger
	reg      *prometheus.Registry
	m        *metrics
	verifier *auth.Verifier
	signer   *auth.Signer // dev login only

	// Set up by Run (or by tests before it).
	kc       *kgo.Client
	pool     *pgxpool.Pool
	store    *store.Store
	rdb      redis.UniversalClient
	presence *presence.Store
	receiver delivery.Receiver
	// pushReady is closed once the push subscription is confirmed (nil
	// when the receiver was injected).
	pushReady chan struct{}
	members   *membership
	// tracer is nil with tracing off: sends and deliveries then skip span
	// and trace-context work entirely. Run sets it when an OTLP endpoint is
	// configured; tests may set it before Run.
	tracer trace.Tracer

	limits  *limiters
	waiters *waiters

	mu    sync.Mutex
	conns map[string]*conn

	draining atomic.Bool
	inflight sync.WaitGroup // commands between produce and ACK, all transports
	connWG   sync.WaitGroup // connection handlers
	addr     chan string    // the bound client address, once
	now      func() time.Time
}

// New builds a gateway from a validated Config; it connects to nothing
// until Run.
func New(cfg Config, log *slog.Logger) (*Gateway, error) {
	g := &Gateway{cfg: cfg, log: log, reg: prometheus.NewRegistry(), limits: newLimiters(cfg.RatePerUser, cfg.RateBurst),
		waiters: newWaiters(), conns: map[string]*conn{}, addr: make(chan string, 1), now: time.Now}
	g.reg.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	g.m = newMetrics(g.reg)
	var err error
	switch {
	case cfg.HS256Secret != nil:
		g.verifier, err = auth.NewHS256Verifier(cfg.HS256Secret)
		if err == nil && cfg.DevMode {
			g.signer, err = auth.NewHS256Signer(cfg.HS256Secret)
		}
	default:
		g.verifier, err = auth.NewEd25519Verifier(cfg.Ed25519Public)
		if err == nil && cfg.DevMode {
			g.signer, err = auth.NewEd25519Signer(cfg.DevEd25519Private)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("producer-gw auth: %w", err)
	}
	return g, nil
}

// Addr returns the address clients connect to, once Run listens.
func (g *Gateway) Addr(ctx context.Context) (string, error) {
	select {
	case a := <-g.addr:
		g.addr <- a
		return a, nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// Run serves until ctx ends, then shuts down gracefully: it stops
// accepting, lets in-flight commands finish (up to ShutdownTimeout), closes
// every socket with 1012 "reconnect" and removes their presence. It
// returns ctx.Err() after a clean shutdown.
func (g *Gateway) Run(ctx context.Context) error {
	shutdown, err := telemetry.Setup(ctx, telemetry.Config{ServiceName: service, OTLPEndpoint: g.cfg.OTLPEndpoint})
	if err != nil {
		return err
	}
	defer telemetry.Flush(shutdown, g.log)
	if g.tracer == nil && g.cfg.OTLPEndpoint != "" {
		g.tracer = telemetry.Tracer(service)
	}
	if err := g.connect(ctx); err != nil {
		return err
	}
	defer g.closeClients()
	ln, err := net.Listen("tcp", g.cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", g.cfg.Addr, err)
	}
	g.addr <- ln.Addr().String()
	g.log.Info("gateway listening", "addr", ln.Addr().String(), "gateway_id", g.cfg.GatewayID, "dev_mode", g.cfg.DevMode)

	// Background work outlives ctx until the drain is done: in-flight
	// sends still need their seqs from the push transport.
	bgCtx, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBG()
	bg, bgCtx := errgroup.WithContext(bgCtx)
	bg.Go(func() error { return g.receiver.Receive(bgCtx, g.cfg.GatewayID, g.onBatch) })
	bg.Go(func() error { return g.store.Follow(bgCtx) })
	bg.Go(func() error { return g.refreshPresence(bgCtx) })
	bg.Go(func() error { return g.sweep(bgCtx) })
	bg.Go(func() error {
		return (&admin.Server{Addr: g.cfg.AdminAddr, Reg: g.reg, Ready: g.readyz}).Run(bgCtx)
	})

	// Accept clients only once pushed batches can reach this gateway: a
	// send accepted earlier would wait for a seq that can never arrive.
	if g.pushReady != nil {
		select {
		case <-g.pushReady:
		case <-time.After(10 * time.Second):
			g.log.Warn("push subscription not confirmed after 10s; accepting clients anyway")
		case <-ctx.Done():
		}
	}
	srv := &http.Server{Handler: g.routes(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

	var runErr error
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		runErr = fmt.Errorf("serve clients: %w", err)
		serveErr <- err
	case <-bgCtx.Done():
		runErr = errors.New("a background component stopped")
	}
	g.drain(srv)
	if err := <-serveErr; err != nil && !errors.Is(err, http.ErrServerClosed) && runErr == nil {
		runErr = fmt.Errorf("serve clients: %w", err)
	}
	stopBG()
	if err := bg.Wait(); err != nil && !errors.Is(err, context.Canceled) && runErr == nil {
		runErr = err
	} else if runErr != nil && err != nil && !errors.Is(err, context.Canceled) {
		runErr = fmt.Errorf("%w: %w", runErr, err)
	}
	if runErr != nil {
		return runErr
	}
	return ctx.Err()
}

// connect opens the Kafka, PostgreSQL and Redis clients unless a test set
// them already.
func (g *Gateway) connect(ctx context.Context) error {
	if g.kc == nil {
		opts := append(eventlog.ClientOpts(g.cfg.Brokers, "seqflow-gw-"+g.cfg.GatewayID), eventlog.ProducerOpts()...)
		opts = append(opts, kgo.RecordDeliveryTimeout(g.cfg.ProduceTimeout), kgo.ProducerLinger(g.cfg.ProduceLinger), telemetry.KafkaMetrics(g.reg))
		kc, err := kgo.NewClient(opts...)
		if err != nil {
			return fmt.Errorf("kafka client: %w", err)
		}
		g.kc = kc
	}
	if g.pool == nil {
		pool, err := pgxpool.New(ctx, g.cfg.PGURL)
		if err != nil {
			return fmt.Errorf("connect postgres: %w", err)
		}
		g.pool = pool
	}
	if g.store == nil {
		st, err := store.Open(ctx, g.pool, g.cfg.StoreSchema)
		if err != nil {
			return fmt.Errorf("open message store: %w", err)
		}
		g.store = st
	}
	if g.rdb == nil {
		// Several comma-separated addresses make the universal client a
		// Redis Cluster client.
		addrs := strings.FieldsFunc(g.cfg.RedisAddr, func(r rune) bool { return r == ',' || r == ' ' })
		g.rdb = redis.NewUniversalClient(&redis.UniversalOptions{Addrs: addrs})
	}
	if err := g.rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("connect redis %s: %w", g.cfg.RedisAddr, err)
	}
	if g.presence == nil {
		g.presence = presence.New(g.rdb, g.cfg.PresenceTTL)
	}
	if g.receiver == nil {
		g.receiver = g.pushReceivers()
	}
	if g.members == nil {
		g.members = newMembership(g.store, g.cfg.MemberCacheTTL, localMembershipTTL)
	}
	return nil
}

// pushReceivers is how batches reach this gateway: Redis pub/sub always,
// and the pushers' direct TCP stream unless GATEWAY_PUSH_ADDR is "off"
// (pusher/README.md, "Transport"). pushReady closes once every one of them
// can take batches.
func (g *Gateway) pushReceivers() delivery.Receiver {
	ready := make(chan struct{})
	g.pushReady = ready
	n := 1
	if g.cfg.PushAddr != "off" {
		n++
	}
	var mu sync.Mutex
	up := func() {
		mu.Lock()
		defer mu.Unlock()
		if n--; n == 0 {
			close(ready)
		}
	}
	var once sync.Once
	rs := []delivery.Receiver{countingReceiver{delivery.NewRedisReceiver(g.rdb, delivery.RedisReceiverOptions{
		Log: g.log, OnBadBatch: func(error) { g.m.badBatches.Inc() },
		OnSubscribed: func() { once.Do(up) },
	}), g.m.pushBatches.WithLabelValues("redis")}}
	if g.cfg.PushAddr != "off" {
		rs = append(rs, countingReceiver{delivery.NewTCPReceiver(delivery.NewRedisRegistry(g.rdb), delivery.TCPReceiverOptions{
			ListenAddr: g.cfg.PushAddr, AdvertiseAddr: g.cfg.PushAdvertise, Log: g.log,
			OnBadBatch: func(error) { g.m.badBatches.Inc() },
			OnRegistered: func(addr string) {
				g.log.Info("push stream listening", "addr", addr)
				up()
			},
		}), g.m.pushBatches.WithLabelValues("tcp")})
	}
	return delivery.Fanin(rs...)
}

// countingReceiver counts the batches one transport brings.
type countingReceiver struct {
	delivery.Receiver
	n prometheus.Counter
}

func (r countingReceiver) Receive(ctx context.Context, gatewayID string, h delivery.Handler) error {
	return r.Receiver.Receive(ctx, gatewayID, func(b *imv1.PushBatch) {
		r.n.Inc()
		h(b)
	})
}

func (g *Gateway) closeClients() {
	if g.kc != nil {
		g.kc.Close()
	}
	if g.pool != nil {
		g.pool.Close()
	}
	if g.rdb != nil {
		_ = g.rdb.Close()
	}
}

func (g *Gateway) readyz(ctx context.Context) error {
	if g.draining.Load() {
		return errors.New("draining")
	}
	if err := g.pool.Ping(ctx); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	if err := g.rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	if err := g.kc.Ping(ctx); err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	if g.pushReady != nil {
		select {
		case <-g.pushReady:
		default:
			return errors.New("push subscription not confirmed yet")
		}
	}
	return nil
}

// drain is the shutdown order: refuse new work, stop accepting, wait for
// in-flight commands, flush the producer, close sockets with "reconnect".
func (g *Gateway) drain(srv *http.Server) {
	// Under mu: every beginCommand and register either saw draining or
	// finished its Add before the Waits below.
	g.mu.Lock()
	g.draining.Store(true)
	g.mu.Unlock()
	deadline := time.Now().Add(g.cfg.ShutdownTimeout)
	shut, cancel := context.WithDeadline(context.Background(), deadline.Add(2*time.Second))
	defer cancel()
	_ = srv.Shutdown(shut) // stops accepting; hijacked WebSockets are ours to close
	done := make(chan struct{})
	go func() { g.inflight.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Until(deadline)):
		g.log.Warn("shutdown timeout: closing connections with commands still in flight")
	}
	flush, cancelFlush := context.WithTimeout(context.Background(), 2*time.Second)
	if err := g.kc.Flush(flush); err != nil {
		g.log.Warn("flush producer at shutdown", "err", err)
	}
	cancelFlush()
	g.mu.Lock()
	conns := make([]*conn, 0, len(g.conns))
	for _, c := range g.conns {
		conns = append(conns, c)
	}
	g.mu.Unlock()
	for _, c := range conns {
		c.closeWith(1012, "reconnect", "shutdown") // StatusServiceRestart
	}
	g.connWG.Wait()
	<-done
}

// refreshPresence re-registers every open connection each TTL/3.
func (g *Gateway) refreshPresence(ctx context.Context) error {
	t := time.NewTicker(g.cfg.PresenceTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		g.mu.Lock()
		pcs := make([]presence.Conn, 0, len(g.conns))
		for _, c := range g.conns {
			pcs = append(pcs, c.presence())
		}
		g.mu.Unlock()
		pctx, cancel := context.WithTimeout(ctx, g.cfg.PresenceTTL/3)
		if err := g.presence.Put(pctx, pcs...); err != nil {
			g.m.presenceErrs.Inc()
			g.log.Warn("refresh presence", "connections", len(pcs), "err", err)
		}
		cancel()
	}
}

// sweep expires caches, rate limiters and notices once a second.
func (g *Gateway) sweep(ctx context.Context) error {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		now := g.now()
		g.members.sweep()
		g.limits.sweep(now)
		g.waiters.sweep(now)
	}
}
