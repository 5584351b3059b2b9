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
	"github.com/seqflow/seqflow/internal/keystore"
	"github.com/seqflow/seqflow/internal/peerauth"
	"github.com/seqflow/seqflow/internal/presence"
	"github.com/seqflow/seqflow/internal/store"
	"github.com/seqflow/seqflow/internal/telemetry"
)

const service = "producer-gw"

// localMembershipTTL is how long membership seen in events overrides the
// store: far above the persister's lag, far below anything a client notices.
const localMembershipTTL = 5 * time.Minute

// Gateway serves clients over WebSocket and HTTP: it authenticates them,
// validates their commands, produces uplinks, answers with the seq, pushes
// events to their connections and serves sync. It is the composition root:
// the work is done by its components (README.md, "Components"), which Run
// wires once the clients are open and runs until shutdown.
type Gateway struct {
	cfg      Config
	log      *slog.Logger
	reg      *prometheus.Registry
	m        *metrics
	verifier *auth.Verifier
	signer   *auth.Signer // dev login only
	now      func() time.Time
	addr     chan string // the bound client address, once
	admin    chan string // the bound admin address, once
	// gate refuses new connections and commands once the drain begins.
	gate *gate

	// Clients, opened by Run (or set by tests before it).
	kc       *kgo.Client
	pool     *pgxpool.Pool
	store    *store.Store
	keys     *keystore.Store // nil without SEQFLOW_KEK
	rdb      redis.UniversalClient
	presence *presence.Store
	receiver delivery.Receiver
	// sender hands ephemeral signals (typing, read cursors) to other gateways, over the
	// push transports: a direct stream where the gateway serves one,
	// Redis pub/sub otherwise.
	sender delivery.Sender
	// pushReady is closed once the push subscription is confirmed (nil
	// when the receiver was injected).
	pushReady <-chan struct{}
	// tracer is nil with tracing off: sends and deliveries then skip span
	// and trace-context work entirely. Run sets it when an OTLP endpoint is
	// configured; tests may set it before Run.
	tracer trace.Tracer

	// Components, wired by compose once the clients are open.
	limits   *limiter
	waiters  *waiters
	members  *membership
	hub      *hub
	up       *uplink
	down     *downlink
	history  *history
	receipts *receipts
	signals  *signals
	devices  *devices
	settings *settings
	// recounter recounts unread counts after reads (unread.go).
	recounter *recounter
	// conns caps the client port's connections (connlimit.go).
	conns *connLimits
	api   *api
}

// New builds a gateway from a validated Config; it connects to nothing
// until Run.
func New(cfg Config, log *slog.Logger) (*Gateway, error) {
	g := &Gateway{cfg: cfg, log: log, reg: prometheus.NewRegistry(), gate: &gate{}, addr: make(chan string, 1), admin: make(chan string, 1), now: time.Now}
	g.reg.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	g.m = newMetrics(g.reg)
	if !cfg.PlaintextBodies {
		g.m.bodiesSealed.Set(1)
	}
	if cfg.PeerKeys == nil {
		return nil, fmt.Errorf("producer-gw: %w", peerauth.ErrNoKeys)
	}
	peerauth.Report(cfg.PeerKeys, log, g.reg)
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
	g.verifier.SetPolicy(auth.Policy{Audience: cfg.JWTAudience, Issuer: cfg.JWTIssuer, MaxLifetime: cfg.DeviceRetention})
	if g.signer != nil {
		g.signer.Audience, g.signer.Issuer = cfg.JWTAudience, cfg.JWTIssuer
	}
	return g, nil
}

// Addr returns the address clients connect to, once Run listens.
func (g *Gateway) Addr(ctx context.Context) (string, error) { return peek(ctx, g.addr) }

// AdminAddr waits until the admin server listens (GATEWAY_ADMIN_ADDR, which
// may be port 0) and returns its address.
func (g *Gateway) AdminAddr(ctx context.Context) (string, error) { return peek(ctx, g.admin) }

// peek reads the value c holds and puts it back for the next reader.
func peek(ctx context.Context, c chan string) (string, error) {
	select {
	case a := <-c:
		c <- a
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
	g.compose()
	ln, err := net.Listen("tcp", g.cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", g.cfg.Addr, err)
	}
	g.addr <- ln.Addr().String()
	if g.cfg.PlaintextBodies {
		g.log.Warn("bodies in plaintext (SEQFLOW_PLAINTEXT_BODIES=true): they enter a log no erasure can reach (docs/erasure.md)")
	}
	g.log.Info("gateway listening", "addr", ln.Addr().String(), "gateway_id", g.cfg.GatewayID, "dev_mode", g.cfg.DevMode,
		"bodies_sealed", !g.cfg.PlaintextBodies)

	// Background work outlives ctx until the drain is done: in-flight
	// sends still need their seqs from the push transport.
	bgCtx, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBG()
	bg, bgCtx := errgroup.WithContext(bgCtx)
	bg.Go(func() error { return g.down.Run(bgCtx) })
	bg.Go(func() error { return g.store.Follow(bgCtx) })
	bg.Go(func() error { return g.hub.Run(bgCtx) })
	bg.Go(func() error { return g.members.Run(bgCtx) })
	bg.Go(func() error { return g.limits.Run(bgCtx) })
	bg.Go(func() error { return g.waiters.Run(bgCtx) })
	bg.Go(func() error { return g.signals.Run(bgCtx) })
	bg.Go(func() error { return g.recounter.Run(bgCtx) })
	bg.Go(func() error { return g.devices.Run(bgCtx) })
	bg.Go(func() error {
		return (&admin.Server{Addr: g.cfg.AdminAddr, Reg: g.reg, Ready: g.readyz, Routes: g.adminRoutes(), Config: g.cfg.Admin, Log: g.log,
			Bound: func(a string) { g.admin <- a }}).Run(bgCtx)
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
	srv := &http.Server{Handler: g.conns.wrap(g.api.routes()), ReadHeaderTimeout: g.cfg.HTTPReadHeaderTimeout,
		ReadTimeout: g.cfg.HTTPReadTimeout, WriteTimeout: g.cfg.HTTPWriteTimeout, IdleTimeout: g.cfg.HTTPIdleTimeout,
		MaxHeaderBytes: g.cfg.MaxHeaderBytes, ErrorLog: slog.NewLogLogger(g.log.Handler(), slog.LevelWarn)}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(g.conns.listener(ln)) }()

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
	if g.cfg.KEK != "" && g.keys == nil {
		kek, err := keystore.ParseKEK(g.cfg.KEK)
		if err != nil {
			return fmt.Errorf("SEQFLOW_KEK: %w", err)
		}
		prev, err := keystore.ParsePrevious(g.cfg.KEKPrevious)
		if err != nil {
			return fmt.Errorf("SEQFLOW_KEK_PREVIOUS: %w", err)
		}
		ks, err := keystore.Open(ctx, g.pool, kek, keystore.Options{Period: g.cfg.KeyPeriod, CacheTTL: g.cfg.KeyCacheTTL, Previous: prev})
		if err != nil {
			return fmt.Errorf("open key store: %w", err)
		}
		g.keys = ks
		g.log.Info("bodies sealed", "kek", kek.ID(), "previous_keks", len(prev))
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
		g.receiver, g.pushReady = pushReceivers(g.cfg, g.rdb, g.log, g.m)
	}
	if g.sender == nil {
		g.sender = delivery.NewChainSender(
			delivery.NewTCPSender(delivery.NewRedisRegistry(g.rdb, g.cfg.PeerKeys), g.cfg.PeerKeys, delivery.TCPSenderOptions{Log: g.log}),
			delivery.NewRedisSender(g.rdb, g.cfg.PeerKeys, delivery.RedisSenderOptions{}))
	}
	return nil
}

// compose wires the components, in the order a command and its ACK pass
// through them. They need the clients, which is why it runs in Run, after
// connect, and not in New, which connects to nothing.
func (g *Gateway) compose() {
	g.limits = newLimiter(g.rdb, g.cfg, g.log, g.m, g.now)
	g.waiters = newWaiters(g.m, g.now)
	g.members = newMembership(g.store, g.cfg.MemberCacheTTL, localMembershipTTL)
	g.hub = newHub(g.gate, g.presence, g.cfg.PresenceTTL, g.log, g.m)
	g.up = newUplink(g.cfg, g.gate, g.kc, g.members, lookups{g.pool, g.store}, g.waiters, g.tracer, g.log, g.m, g.now)
	g.down = newDownlink(g.cfg.GatewayID, g.receiver, g.waiters, g.members, g.hub, g.tracer, g.log, g.m)
	g.settings = newSettings(presence.NewSettings(g.rdb), g.log)
	g.recounter = newRecounter(g.store, g.log, g.m)
	g.history = newHistory(g.store, g.members, g.settings, g.log)
	g.history.slots = newSyncSlots(g.cfg.SyncConcurrency, g.cfg.SyncQueueWait, g.m)
	if g.keys != nil {
		b := &bodies{ks: g.keys, log: g.log, m: g.m}
		g.up.bodies, g.down.bodies, g.history.bodies = b, b, b
	}
	g.receipts = newReceipts(g.cfg, g.kc, g.members, g.log, g.m, g.now)
	g.receipts.seqs = g.store
	g.signals = newSignals(g.cfg.GatewayID, g.members, g.store, g.presence, g.sender, g.log, g.m, g.now)
	g.receipts.cursors = g.signals
	g.devices = newDevices(g.cfg, presence.NewDevices(g.rdb, g.cfg.DeviceRetention), g.presence, g.presence, lookups{g.pool, g.store},
		g.hub, g.log, g.m, g.now)
	g.hub.refreshed = g.devices.refresh
	g.api = newAPI(g.cfg, g.verifier, g.signer, g.gate, g.hub, g.presence, g.limits, g.up, g.history, g.receipts, g.signals, g.devices, g.settings, g.recounter, g.log, g.m, g.now)
	g.conns = newConnLimits(g.cfg, g.m)
	g.api.conns, g.api.members = g.conns, g.members
}

func (g *Gateway) closeClients() {
	if g.sender != nil {
		_ = g.sender.Close()
	}
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
	if g.gate.draining() {
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
	// Once close returns, every command and connection the gate admitted
	// is counted in the Waits below.
	g.gate.close()
	deadline := time.Now().Add(g.cfg.ShutdownTimeout)
	shut, cancel := context.WithDeadline(context.Background(), deadline.Add(2*time.Second))
	defer cancel()
	_ = srv.Shutdown(shut) // stops accepting; hijacked WebSockets are ours to close
	done := make(chan struct{})
	go func() { g.up.wait(); close(done) }()
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
	g.hub.closeAll(1012, "reconnect", "shutdown") // StatusServiceRestart
	g.hub.wait()
	<-done
}

// gate admits connections and commands until the drain begins. admit and
// close take one lock, so once close returns every admitted unit has
// finished its admit function (registered itself, counted itself in a
// WaitGroup) and the drain's Waits see it.
type gate struct {
	mu     sync.Mutex
	closed atomic.Bool
}

// admit runs fn and reports true unless the gate is closed.
func (g *gate) admit(fn func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed.Load() {
		return false
	}
	fn()
	return true
}

// close refuses every later admit.
func (g *gate) close() {
	g.mu.Lock()
	g.closed.Store(true)
	g.mu.Unlock()
}

// draining reports whether close was called; it does not wait for admits
// under way.
func (g *gate) draining() bool { return g.closed.Load() }

// every calls fn each interval until ctx ends, and returns ctx.Err(): the
// loop of the components' background sweeps.
func every(ctx context.Context, interval time.Duration, fn func()) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			fn()
		}
	}
}
