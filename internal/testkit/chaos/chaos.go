// Package chaos is seqflow's reliability suite as a library: it runs the
// whole pipeline (two instances of every service as real processes, on the
// three-broker Kafka cluster, with a private Redis and PostgreSQL) under
// load from client/load, injects faults on a seeded schedule — kill -9,
// SIGSTOP zombies, broker and transaction-coordinator failover, Redis
// wiped, PostgreSQL restarted, a gateway killed mid-send — while users
// are erased (eraser.go), measures each fault's recovery with probe
// messages, and audits at the end what the clients were acknowledged
// against the log and the message store, and what the erasures left.
// `seqflow chaos` is the command over Run.
package chaos

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seqflow/seqflow/client/load"
	"github.com/seqflow/seqflow/internal/auth"
	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/keystore"
	"github.com/seqflow/seqflow/internal/migrate"
	"github.com/seqflow/seqflow/internal/testkit/proc"
	"github.com/seqflow/seqflow/internal/testkit/stack"
)

// Options describe a run. Zero values take the defaults named.
type Options struct {
	// Brokers of the three-broker cluster (SEQFLOW_KAFKA3_BROKERS of
	// `stack.sh up-kafka3`); node n of stack.sh is Brokers[n-1]. Required.
	Brokers []string
	// Root is the repository root: the services are built from it, and
	// infra/local/stack.sh under it kills and restarts brokers. Default
	// the nearest parent of the working directory holding go.mod.
	Root string
	// Dir receives the run's logs, one file per process. Default
	// Root/.data/chaos/<run id>.
	Dir string
	// Seed fixes the fault schedule (kinds, order, targets, durations).
	// Default: from the clock; the report names it for a repeat.
	Seed uint64
	// Kinds are the fault kinds the schedule cycles through. Default
	// AllKinds.
	Kinds []Kind
	// MaxFaults stops injecting after this many; 0: as many as fit in the
	// send phase. MinFaults is the fewest a passing run injects (default 1).
	MaxFaults, MinFaults int
	// NoFaults runs the topology and the load without injecting any
	// fault (the bench's replicated phase); MinFaults is then 0.
	NoFaults bool
	// Duration is the load's send phase; faults are injected during it,
	// each only while its budget still fits. Default 15m.
	Duration time.Duration
	// Warmup is the quiet time between the start of sending and the first
	// fault. Default 10s.
	Warmup time.Duration
	// Rate is the load in messages per second over all users. Default 20.
	Rate float64
	// Users and Sessions of the load (half the sessions are groups of 4).
	// Defaults 12 and 6.
	Users, Sessions int
	// Governance is the load's governance interval per group
	// (load.Options.Governance): members added, removed, muted, promoted,
	// leaving and rejoining while the load sends. Default 500ms; negative
	// turns it off.
	Governance time.Duration
	// Plaintext turns off sealing. By default the gateways seal every body
	// with a KEK of the run (docs/erasure.md), so the key store, in the
	// PostgreSQL that postgres_restart restarts, is on every send's path.
	Plaintext bool
	// EraseEvery: victims, one after the other, join sessions with the
	// load's users, have a few messages acked, and are erased through a
	// gateway's admin endpoint this long (±50%) after, or at once when a
	// fault is injected meanwhile (eraser.go); the audit then checks the
	// erasures (ErasureChecks). Default 5s; negative turns it off, and so
	// does Plaintext (nothing can be erased without keys).
	EraseEvery time.Duration
	// Partitions of every keyed topic (replication factor 3). Default 6.
	Partitions int32
	// SessionTimeout is every consumer group's session timeout; zombie
	// pauses last longer than it. Default 6s.
	SessionTimeout time.Duration
	// DeliverP99Bound is the delivery-lag harm's bound: a minute clear of
	// faults whose deliver p99 is over it counts (Report.DeliveryLag).
	// Default 2s.
	DeliverP99Bound time.Duration
	// MaxRecovery bounds a fault's recovery; past it the fault counts as
	// not recovered and the run fails. Default 2m.
	MaxRecovery time.Duration
	// ServiceEnv is added to every service's environment after the
	// suite's own settings (NAME=value), for experiments.
	ServiceEnv []string
	// DeliveredInterval is the load's clients' delivered-receipt window
	// (client.Options.DeliveredInterval); 0: the SDK's default.
	DeliveredInterval time.Duration
	// Keep leaves the run's topics in place (they are deleted by default).
	Keep bool
	// Log gets the suite's own events (faults, recoveries). Default discard.
	Log *slog.Logger
	// Out, when set, gets one line per fault as it happens.
	Out io.Writer
}

func (o *Options) defaults() error {
	if o.Root == "" {
		o.Root = stack.Root()
	}
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano())
	}
	if len(o.Kinds) == 0 {
		o.Kinds = AllKinds
	}
	if o.MinFaults == 0 && !o.NoFaults {
		o.MinFaults = 1
	}
	if o.NoFaults {
		o.MaxFaults, o.MinFaults = 0, 0
	}
	if o.Duration == 0 {
		o.Duration = 15 * time.Minute
	}
	if o.Warmup == 0 {
		o.Warmup = 10 * time.Second
	}
	if o.Rate == 0 {
		o.Rate = 20
	}
	if o.Users == 0 {
		o.Users = 12
	}
	if o.Sessions == 0 {
		o.Sessions = 6
	}
	switch {
	case o.Governance == 0:
		o.Governance = 500 * time.Millisecond
	case o.Governance < 0:
		o.Governance = 0
	}
	switch {
	case o.Plaintext || o.EraseEvery < 0:
		o.EraseEvery = 0
	case o.EraseEvery == 0:
		o.EraseEvery = 5 * time.Second
	}
	if o.Partitions == 0 {
		o.Partitions = 6
	}
	if o.SessionTimeout == 0 {
		o.SessionTimeout = 6 * time.Second
	}
	if o.MaxRecovery == 0 {
		o.MaxRecovery = 2 * time.Minute
	}
	if o.DeliverP99Bound == 0 {
		o.DeliverP99Bound = 2 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	var errs []error
	if len(o.Brokers) != 3 {
		errs = append(errs, fmt.Errorf("Brokers: %d given, want the 3 of the three-broker cluster (stack.sh up-kafka3)", len(o.Brokers)))
	}
	for _, k := range o.Kinds {
		if !knownKind(k) {
			errs = append(errs, fmt.Errorf("Kinds: unknown fault kind %q", k))
		}
	}
	if o.MaxFaults < 0 || o.MinFaults < 0 {
		errs = append(errs, errors.New("MaxFaults and MinFaults must not be negative"))
	}
	if o.Duration < 30*time.Second {
		errs = append(errs, fmt.Errorf("Duration: %s, want at least 30s", o.Duration))
	}
	if o.Rate < 0 || o.Users < 4 || o.Sessions < 1 || o.Partitions < 2 {
		errs = append(errs, fmt.Errorf("Rate %v, Users %d, Sessions %d, Partitions %d: want Rate >= 0, Users >= 4, Sessions >= 1, Partitions >= 2",
			o.Rate, o.Users, o.Sessions, o.Partitions))
	}
	if o.SessionTimeout < time.Second || o.SessionTimeout > time.Minute {
		errs = append(errs, fmt.Errorf("SessionTimeout: %s not in 1s..1m", o.SessionTimeout))
	}
	if len(errs) > 0 {
		return fmt.Errorf("chaos options: %w", errors.Join(errs...))
	}
	return nil
}

func knownKind(k Kind) bool {
	for _, a := range AllKinds {
		if a == k {
			return true
		}
	}
	return false
}

// Service types and how many instances of each run.
var services = []string{"sequencer", "persister", "pusher", "gateway"}

const instances = 2

// sequencerStep is the sequencers' segment step and largest transaction,
// set explicitly (the default is 5000) because the log check must know the
// largest gap one crash may leave: it flags any larger gap as a harm. 1000
// keeps that check tighter than the default would.
const sequencerStep = 1000

// suite is one run's state.
type suite struct {
	o      Options
	id     string
	prefix string
	topics eventlog.Topics
	secret string
	kek    string // SEQFLOW_KEK of the gateways, unless Plaintext
	// adminToken is the eraser's operator token (eraseActor's line of the
	// gateways' SEQFLOW_ADMIN_TOKENS_FILE).
	adminToken string
	log        *slog.Logger

	redis *redisServer
	pg    *postgres
	pool  *pgxpool.Pool
	k3    *kafka3
	kcl   *kgo.Client
	adm   *kadm.Client
	procs map[string][]*proc.Proc
	gws   []string // gateway addresses
	book  *ackBook
	probe *probe
	er    *eraser // nil without erasures

	sendStart time.Time
}

// Run executes a run and returns its report; an error means the run
// could not be carried out (a *SetupError, or ctx ended), not that it
// found harm: that is in Report.OK and Report.Failures.
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	s := &suite{o: o, id: hex.EncodeToString(b), log: o.Log, procs: map[string][]*proc.Proc{}}
	s.prefix = "chaos-" + s.id + "."
	s.topics = eventlog.Names(s.prefix)
	sb := make([]byte, 24)
	_, _ = rand.Read(sb)
	s.secret = hex.EncodeToString(sb)
	kek := make([]byte, 32)
	_, _ = rand.Read(kek)
	s.kek = base64.StdEncoding.EncodeToString(kek)
	tb := make([]byte, 32)
	_, _ = rand.Read(tb)
	s.adminToken = hex.EncodeToString(tb)
	if s.o.Dir == "" {
		s.o.Dir = filepath.Join(o.Root, ".data", "chaos", s.id)
	}
	began := time.Now()
	rep := &Report{Seed: o.Seed, RunID: s.id, Started: began.UTC().Format(time.RFC3339),
		RecoveryTargetS: (o.SessionTimeout + 5*time.Second).Seconds(), RecoveryLimitS: o.MaxRecovery.Seconds(),
		Config: map[string]string{
			"users": strconv.Itoa(o.Users), "sessions": strconv.Itoa(o.Sessions), "rate": fmt.Sprint(o.Rate),
			"duration": o.Duration.String(), "partitions": fmt.Sprint(o.Partitions), "session_timeout": o.SessionTimeout.String(),
			"brokers": strings.Join(o.Brokers, ","), "topic_prefix": s.prefix, "logs": s.o.Dir, "instances_per_service": strconv.Itoa(instances),
			"governance": o.Governance.String(), "erase_every": o.EraseEvery.String(),
		}}
	defer s.teardown()
	if err := s.setup(ctx); err != nil {
		return nil, err
	}

	bctx, stopBG := context.WithCancel(ctx)
	var bg sync.WaitGroup
	defer func() { stopBG(); bg.Wait() }()
	s.book = newAckBook(len(s.gws))
	var urls []string
	for i := range s.gws {
		// Proxy i prefers gateway i, then the others.
		ups := append(append([]string(nil), s.gws[i:]...), s.gws[:i]...)
		px, err := newProxy(s.book, ups, s.gwIndex)
		if err != nil {
			return nil, &SetupError{"proxy", err}
		}
		urls = append(urls, px.URL())
		bg.Go(func() { _ = px.Run(bctx) })
	}
	signer, err := auth.NewHS256Signer([]byte(s.secret))
	if err != nil {
		return nil, &SetupError{"token signer", err}
	}
	if s.probe, err = newProbe(bctx, &bg, signer, urls, "c"+s.id, s.topics.Sequenced, int(o.Partitions), s.pg.URL, s.log); err != nil {
		return nil, &SetupError{"probe", err}
	}
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	base, err := s.probe.round(pctx)
	cancel()
	if err != nil {
		return nil, &SetupError{"first probe round", err}
	}
	rep.ProbeBaseline = base.String()

	// The load: its first progress draw marks the start of its send phase.
	started := make(chan struct{})
	var once sync.Once
	type result struct {
		rep load.Report
		err error
	}
	loadDone := make(chan result, 1)
	go func() {
		lr, err := load.Run(ctx, load.Options{
			Gateways: urls, Secret: s.secret, Users: o.Users, Sessions: o.Sessions, GroupShare: 0.5, GroupSize: min(4, o.Users),
			Rate: o.Rate, Duration: o.Duration, Drain: 90 * time.Second, BodyBytes: 64, UserPrefix: "c" + s.id, Governance: o.Governance,
			DeliveredInterval: o.DeliveredInterval,
			Progress:          writerFunc(func(p []byte) (int, error) { once.Do(func() { close(started) }); return len(p), nil }),
		})
		loadDone <- result{lr, err}
	}()
	var lr result
	select {
	case <-started:
	case lr = <-loadDone:
		return nil, &SetupError{"load setup", fmt.Errorf("load ended before sending: %v", lr.err)}
	}
	s.sendStart = time.Now()
	sendEnd := s.sendStart.Add(o.Duration)
	busy := &busyMeter{}
	bg.Go(func() { busy.run(bctx, sendEnd) })
	lag := &lagMeter{}
	bg.Go(func() { s.measureLag(bctx, lag, sendEnd) })
	cpuStart := s.groupCPU()
	var cpuEnd map[string]float64
	bg.Go(func() {
		select {
		case <-bctx.Done():
		case <-time.After(time.Until(sendEnd)):
			cpuEnd = s.groupCPU()
		}
	})
	fmt.Fprintf(o.Out, "chaos %s: sending; faults from %s on (seed %d)\n", s.id, o.Warmup, o.Seed)
	erased := make(chan struct{})
	if o.EraseEvery > 0 {
		s.er = s.newEraser(signer, urls)
		go func() { defer close(erased); s.er.run(ctx, sendEnd) }()
		defer func() { <-erased }() // before the proxies stop; at once when ctx ended
	} else {
		close(erased)
	}

	if err := sleep(ctx, o.Warmup); err != nil {
		return nil, err
	}
	for _, f := range Schedule(o.Seed, o.Kinds, 100_000, o.SessionTimeout) {
		if o.NoFaults {
			break
		}
		if o.MaxFaults > 0 && len(rep.Faults) >= o.MaxFaults {
			break
		}
		if time.Now().Add(f.budget(o.SessionTimeout)).After(sendEnd) {
			break
		}
		res := s.inject(ctx, f)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		rep.Faults = append(rep.Faults, res)
		note := ""
		if res.Error != "" {
			note = " ERROR " + res.Error
		}
		restart := ""
		if res.RestartS > 0 {
			restart = fmt.Sprintf(" (restart took %.1fs)", res.RestartS)
		}
		fmt.Fprintf(o.Out, "  #%-3d %5.0fs %-24s %-28s hold %4.1fs%s recovered in %5.1fs [%s | %s]%s\n",
			res.N, res.AtS, res.Kind, res.Target, res.HoldS, restart, res.RecoveryS, res.FirstRound, res.AfterEnd, note)
		s.log.Info("fault", "n", res.N, "kind", string(res.Kind), "target", res.Target, "recovery_s", res.RecoveryS, "err", res.Error)
		if err := sleep(ctx, f.Gap); err != nil {
			return nil, err
		}
	}
	fmt.Fprintf(o.Out, "chaos %s: %d faults injected; waiting for the load to end and drain\n", s.id, len(rep.Faults))
	select {
	case lr = <-loadDone:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	rep.Load = lr.rep
	if lr.err != nil {
		rep.LoadError = lr.err.Error()
	}
	// The last victim's erasure uses the proxies: it ends first.
	select {
	case <-erased:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	// Probes and proxies stop before the audit, so the acked set is final.
	stopBG()
	bg.Wait()
	rep.Acked = len(s.book.Acked())
	fmt.Fprintf(o.Out, "chaos %s: auditing the log and the store\n", s.id)
	actx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	var ec *ErasureChecks
	if s.er != nil {
		// First: it waits for the last leaves to be sequenced, which the
		// store audit then finds stored too.
		rep.Victims = s.er.done()
		if ec, err = s.verifyErasures(actx, rep.Victims); err != nil {
			return nil, &SetupError{"erasure audit", err}
		}
	}
	c, err := verify(actx, o.Brokers, s.topics, s.pool, s.book.Acked(), rep.Load.RefusedIDs, sequencerStep, 2*time.Minute)
	if err != nil {
		return nil, &SetupError{"audit", err}
	}
	c.Erasure = ec
	rep.Checks = c
	rep.DurationS = time.Since(began).Seconds()
	rep.DeliverP99BoundMs = float64(o.DeliverP99Bound) / float64(time.Millisecond)
	at, ms := make([]float64, len(rep.Load.Deliveries)), make([]float64, len(rep.Load.Deliveries))
	for i, d := range rep.Load.Deliveries {
		at[i], ms[i] = d.At.Sub(s.sendStart).Seconds(), d.Ms
	}
	rep.DeliveryMinutes = deliveryMinutes(at, ms, rep.Faults, rep.RecoveryTargetS)
	for i := range rep.DeliveryMinutes {
		rep.DeliveryMinutes[i].BusyPct = busy.minute(i)
		rep.DeliveryMinutes[i].MaxLag = lag.minute(i)
	}
	rep.BusyPct = busy.whole()
	if cpuEnd != nil {
		rep.CPUCores = coresBetween(cpuStart, cpuEnd, o.Duration.Seconds())
	}
	rep.judge(o.MinFaults)
	return rep, nil
}

// newEraser makes the run's eraser: victims connect through the proxies
// (urls), so their ACKs are booked with the load's, and are erased
// through the gateways' admin ports.
func (s *suite) newEraser(signer *auth.Signer, urls []string) *eraser {
	var admins, peers []string
	for _, p := range s.procs["gateway"] {
		admins = append(admins, p.Admin)
	}
	for i := range s.o.Users {
		peers = append(peers, fmt.Sprintf("c%s-u%04d", s.id, i+1)) // load.Options.UserPrefix's names
	}
	return &eraser{every: s.o.EraseEvery, signer: signer, urls: urls, admins: admins, token: s.adminToken, pool: s.pool, peers: peers,
		prefix: "c" + s.id, seed: s.o.Seed, log: s.log, hc: &http.Client{}, faults: make(chan Kind, 1)}
}

// verifyErasures checks the victims' erasures with a key store of its
// own (empty caches: what any new process would find).
func (s *suite) verifyErasures(ctx context.Context, victims []Victim) (*ErasureChecks, error) {
	kek, err := keystore.ParseKEK(s.kek)
	if err != nil {
		return nil, err
	}
	keys, err := keystore.Open(ctx, s.pool, kek, keystore.Options{})
	if err != nil {
		return nil, err
	}
	c, err := verifyErasures(ctx, s.o.Brokers, s.topics.Sequenced, s.pool, keys, victims, 2*time.Minute)
	return &c, err
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func (s *suite) gwIndex(addr string) int {
	for i, a := range s.gws {
		if a == addr {
			return i
		}
	}
	return -1
}

// setup builds the services, starts Redis and PostgreSQL, creates the
// topics and starts two instances of every service.
func (s *suite) setup(ctx context.Context) error {
	o := s.o
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return &SetupError{"run dir", err}
	}
	bins, err := proc.Compile(ctx, o.Root, filepath.Join(o.Dir, "bin"), "./sequencer", "./persister", "./pusher", "./producer-gw")
	if err != nil {
		return &SetupError{"build", err}
	}
	if s.redis, err = startRedis(ctx, o.Dir); err != nil {
		return &SetupError{"redis", err}
	}
	tmp, err := os.MkdirTemp("", "seqflow-chaos-pg-")
	if err != nil {
		return &SetupError{"postgres dir", err}
	}
	if s.pg, err = startPostgres(ctx, tmp); err != nil {
		return &SetupError{"postgres", err}
	}
	if s.pool, err = pgxpool.New(ctx, s.pg.URL); err != nil {
		return &SetupError{"postgres pool", err}
	}
	if _, err := migrate.Up(ctx, s.pool, ""); err != nil {
		return &SetupError{"migrate", err}
	}
	s.k3 = &kafka3{Brokers: o.Brokers, script: filepath.Join(o.Root, "infra", "local", "stack.sh")}
	if s.kcl, err = kgo.NewClient(eventlog.ClientOpts(o.Brokers, "seqflow-chaos-"+s.id)...); err != nil {
		return &SetupError{"kafka client", err}
	}
	s.adm = kadm.NewClient(s.kcl)
	tctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := eventlog.EnsureTopics(tctx, s.adm, eventlog.Specs(s.topics, o.Partitions), 3); err != nil {
		return &SetupError{"topics", err}
	}
	tokens := filepath.Join(o.Dir, "admin-tokens")
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return &SetupError{"admin tokens", err}
	}
	if err := os.WriteFile(tokens, []byte(eraseActor+":"+s.adminToken+"\n"), 0o600); err != nil {
		return &SetupError{"admin tokens", err}
	}
	common := []string{
		"SEQFLOW_KAFKA_BROKERS=" + strings.Join(o.Brokers, ","), "SEQFLOW_PG_URL=" + s.pg.URL,
		"SEQFLOW_REDIS_ADDR=" + s.redis.Addr, "SEQFLOW_TOPIC_PREFIX=" + s.prefix, "SEQFLOW_ADMIN_TOKENS_FILE=" + tokens,
	}
	st := o.SessionTimeout.String()
	for i := range instances {
		name := string(rune('a' + i))
		inst := "chaos-" + s.id + "-" + name
		env := map[string][]string{
			"sequencer": {"SEQUENCER_GROUP=chaos-" + s.id + "-seq", "SEQUENCER_INSTANCE_ID=" + inst, "SEQUENCER_SESSION_TIMEOUT=" + st,
				"SEQUENCER_TXN_TIMEOUT=" + st, "SEQUENCER_STEP=" + strconv.Itoa(sequencerStep), "SEQUENCER_MAX_POLL_RECORDS=" + strconv.Itoa(sequencerStep)},
			"persister": {"PERSISTER_GROUP=chaos-" + s.id + "-per", "PERSISTER_INSTANCE_ID=" + inst, "PERSISTER_MIGRATE=false",
				"PERSISTER_SESSION_TIMEOUT=" + st},
			"pusher": {"PUSHER_GROUP=chaos-" + s.id + "-push", "PUSHER_INSTANCE_ID=" + inst, "PUSHER_RESET_OFFSET=start",
				"PUSHER_SESSION_TIMEOUT=" + st},
			"gateway": {"GATEWAY_ID=" + inst, "GATEWAY_ADDR=" + proc.AnyPort, "GATEWAY_JWT_HS256_SECRET=" + s.secret,
				"GATEWAY_HEARTBEAT=2s", "GATEWAY_PRESENCE_TTL=6s", "GATEWAY_RATE_PER_USER=1000", "GATEWAY_RATE_BURST=1000",
				"GATEWAY_SHUTDOWN_TIMEOUT=3s"},
		}
		if o.Plaintext {
			env["gateway"] = append(env["gateway"], "SEQFLOW_KEK=", "SEQFLOW_PLAINTEXT_BODIES=true")
		} else {
			env["gateway"] = append(env["gateway"], "SEQFLOW_KEK="+s.kek)
		}
		adminVar := map[string]string{"sequencer": "SEQUENCER_ADMIN_ADDR", "persister": "PERSISTER_ADMIN_ADDR",
			"pusher": "PUSHER_ADMIN_ADDR", "gateway": "GATEWAY_ADMIN_ADDR"}
		pkg := map[string]string{"sequencer": "./sequencer", "persister": "./persister", "pusher": "./pusher", "gateway": "./producer-gw"}
		for _, svc := range services {
			p := &proc.Proc{Name: svc + "-" + name, Bin: bins[pkg[svc]],
				Env: append(append(append(append([]string(nil), common...), env[svc]...), o.ServiceEnv...), adminVar[svc]+"="+proc.AnyPort),
				Log: filepath.Join(o.Dir, svc+"-"+name+".log")}
			if err := p.Start(); err != nil {
				return &SetupError{"start " + p.Name, err}
			}
			s.procs[svc] = append(s.procs[svc], p)
			// The kernel picks the ports (two runs or tests never race for
			// one); pinned, so a restart comes back where clients look.
			actx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			admin, err := p.Addr(actx, "admin listening")
			if err == nil && svc == "gateway" {
				var gw string
				if gw, err = p.Addr(actx, "gateway listening"); err == nil {
					s.gws = append(s.gws, gw)
					p.Env = append(p.Env, "GATEWAY_ADDR="+gw)
				}
			}
			cancel()
			if err != nil {
				return &SetupError{"ports", err}
			}
			p.Admin = admin
			p.Env = append(p.Env, adminVar[svc]+"="+admin)
		}
	}
	for _, svc := range services {
		for _, p := range s.procs[svc] {
			if err := waitFor(ctx, 2*time.Minute, p.Name, func(ctx context.Context) error { return p.Ready(ctx) }); err != nil {
				return &SetupError{"ready", err}
			}
		}
	}
	return nil
}

// teardown stops everything the run started, in reverse order.
func (s *suite) teardown() {
	for i := len(services) - 1; i >= 0; i-- {
		var wg sync.WaitGroup
		for _, p := range s.procs[services[i]] {
			wg.Go(func() { p.Stop(10 * time.Second) })
		}
		wg.Wait()
	}
	if s.pool != nil {
		s.pool.Close()
	}
	if s.pg != nil {
		s.pg.close()
		_ = os.RemoveAll(filepath.Dir(s.pg.dir))
	}
	if s.redis != nil {
		s.redis.close()
	}
	if s.k3 != nil {
		s.k3.wait()
	}
	if s.adm != nil && !s.o.Keep {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		t := s.topics
		_, _ = s.adm.DeleteTopics(ctx, t.Uplink, t.Sequenced, t.Duplicates, t.Receipts, t.Offline, t.DeadLetter)
		cancel()
	}
	if s.kcl != nil {
		s.kcl.Close()
	}
}

// inject carries out one fault and measures its recovery.
func (s *suite) inject(ctx context.Context, f Fault) FaultResult {
	res := FaultResult{N: f.N, Kind: f.Kind, HoldS: f.Hold.Seconds()}
	if f.Kind == KafkaBroker || f.Kind == KafkaCoordinator {
		// The previous restart may still be finishing in the background;
		// its wait is not part of this fault, and the target is picked after it.
		s.k3.wait()
	}
	var begin, end func(context.Context) error
	switch {
	case f.Kind.service() != "":
		p := s.procs[f.Kind.service()][f.Instance%instances]
		res.Target = p.Name
		switch {
		case f.Kind.isStop():
			begin = func(context.Context) error { p.Signal(syscall.SIGSTOP); return nil }
			end = func(context.Context) error { p.Signal(syscall.SIGCONT); return nil }
		default:
			if f.Kind == GatewayMidSend {
				// The wait for commands in flight comes before the
				// fault's clock starts: the fault is the kill.
				res.InFlight = s.awaitInFlight(ctx, f.Instance%instances)
			}
			begin = func(context.Context) error { p.Kill(); return nil }
			end = func(context.Context) error { return p.Start() }
		}
	case f.Kind == KafkaBroker || f.Kind == KafkaCoordinator:
		node, why := s.brokerFor(ctx, f)
		res.Target = fmt.Sprintf("broker %d (%s)", node, why)
		begin = func(ctx context.Context) error { return s.k3.kill(ctx, node) }
		end = func(ctx context.Context) error { return s.k3.start(ctx, node, s.topicsInSync) }
	case f.Kind == RedisWipe:
		res.Target = "redis " + s.redis.Addr
		begin = func(context.Context) error { s.redis.p.Kill(); return nil }
		end = s.redis.start
	case f.Kind == PostgresRestart:
		res.Target = "postgres"
		begin = func(ctx context.Context) error {
			out, err := s.pg.run(ctx, "pg_ctl", "-D", s.pg.dir, "-m", "immediate", "-w", "-t", "60", "-s", "stop")
			if err != nil {
				return fmt.Errorf("%w: %s", err, out)
			}
			return nil
		}
		end = s.pg.start
	}
	res.AtS = time.Since(s.sendStart).Seconds()
	t0 := time.Now()
	if err := begin(ctx); err != nil {
		res.Error = "inject: " + err.Error()
		return res
	}
	res.AtS = t0.Sub(s.sendStart).Seconds()
	s.er.faultInjected(f.Kind)
	r1 := make(chan time.Time, 1)
	rctx, cancel := context.WithTimeout(ctx, s.o.MaxRecovery)
	defer cancel()
	var r1err error
	var st1 stages
	go func() {
		st1, r1err = s.probe.round(rctx)
		r1 <- time.Now()
	}()
	_ = sleep(ctx, f.Hold)
	t1 := time.Now()
	if err := end(ctx); err != nil {
		res.Error = "end fault: " + err.Error()
	}
	if f.Kind.service() == "" {
		res.RestartS = time.Since(t1).Seconds()
		t1 = time.Now()
	}
	done1 := <-r1
	r2ctx, cancel2 := context.WithTimeout(ctx, s.o.MaxRecovery)
	defer cancel2()
	st2, r2err := s.probe.round(r2ctx)
	done2 := time.Now()
	res.RecoveryS = max(done1.Sub(t0), done2.Sub(t1)).Seconds()
	res.FirstRound, res.AfterEnd = st1.String(), fmt.Sprintf("%s (after %.1fs)", st2, done2.Sub(t1).Seconds())
	for _, err := range []error{r1err, r2err} {
		if err != nil && res.Error == "" {
			res.Error = fmt.Sprintf("%v: %v", ErrNotRecovered, err)
		}
	}
	return res
}

// topicsInSync says whether every partition of the run's topics has all
// three replicas in sync.
func (s *suite) topicsInSync(ctx context.Context) error {
	t := s.topics
	td, err := s.adm.ListTopics(ctx, t.Uplink, t.Sequenced, t.Duplicates, t.Receipts, t.Offline, t.DeadLetter)
	if err != nil {
		return err
	}
	for _, d := range td {
		if d.Err != nil {
			return d.Err
		}
		for _, p := range d.Partitions {
			if p.Err != nil || len(p.ISR) < 3 || p.Leader < 0 {
				return fmt.Errorf("%s/%d: leader %d, ISR %v", d.Topic, p.Partition, p.Leader, p.ISR)
			}
		}
	}
	return nil
}

// awaitInFlight waits (up to 10s) until commands are in flight through
// gateway gw and returns how many.
func (s *suite) awaitInFlight(ctx context.Context, gw int) int {
	deadline := time.Now().Add(10 * time.Second)
	for {
		if n := s.book.InFlight(gw); n > 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return n
		}
		time.Sleep(time.Millisecond)
	}
}

// brokerFor picks the broker a Kafka fault kills: the transaction
// coordinator of the fault's sequencer instance, or the leader of most
// partitions of the sequenced topic.
func (s *suite) brokerFor(ctx context.Context, f Fault) (int, string) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if f.Kind == KafkaCoordinator {
		txn := "seqflow-sequencer-chaos-" + s.id + "-" + string(rune('a'+f.Instance%instances))
		for _, c := range s.adm.FindTxnCoordinators(cctx, txn) {
			if c.Err == nil {
				if n := s.k3.node(c.Host, c.Port); n > 0 {
					return n, "txn coordinator of " + txn
				}
			}
		}
		return f.Node, "coordinator unknown, seeded pick"
	}
	td, err := s.adm.ListTopics(cctx, s.topics.Sequenced)
	meta, merr := s.adm.BrokerMetadata(cctx)
	if err == nil && merr == nil {
		count := map[int32]int{}
		for _, p := range td[s.topics.Sequenced].Partitions {
			count[p.Leader]++
		}
		best, most := int32(-1), 0
		for id, n := range count {
			if n > most || (n == most && id < best) {
				best, most = id, n
			}
		}
		for _, b := range meta.Brokers {
			if b.NodeID == best {
				if n := s.k3.node(b.Host, b.Port); n > 0 {
					return n, fmt.Sprintf("leader of %d sequenced partitions", most)
				}
			}
		}
	}
	return f.Node, "leaders unknown, seeded pick"
}
