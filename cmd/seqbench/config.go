package main

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/seqflow/seqflow/internal/config"
	"github.com/seqflow/seqflow/internal/replay"
)

// Phases are the benchmark phases in the order they run.
var Phases = []string{"sequencer", "alloc", "persister", "groups", "e2e", "floor", "floor_split", "idle", "fanout", "replay", "replay_live", "replicated"}

// Config is the benchmark run, from environment variables.
type Config struct {
	// Root: SEQBENCH_ROOT, the repository root the go commands run in,
	// default "." (infra/local/bench.sh runs from the root).
	Root string
	// Brokers: SEQFLOW_KAFKA_BROKERS, required.
	Brokers []string
	// PGURL: SEQFLOW_PG_URL, required.
	PGURL string
	// RedisAddr: SEQFLOW_REDIS_ADDR, required.
	RedisAddr string
	// Phases: SEQBENCH_PHASES, a comma-separated subset of
	// sequencer,alloc,persister,groups,e2e,floor,floor_split,idle,fanout,replay,replay_live;
	// default all. Phases not
	// run leave their keys out of the report (and the doc says "not run").
	Phases []string
	// Partitions: SEQBENCH_PARTITIONS, partitions per topic of the
	// services' run, default 8.
	Partitions int
	// PortBase: SEQBENCH_PORT_BASE, default 18400: the gateway listens on
	// 127.0.0.1:PortBase+80, admin servers on PortBase+1..+4 (sequencer,
	// persister, gateway, pusher), away from the demo's 8080 and 9101-9104.
	PortBase int
	// E2EDuration: SEQBENCH_E2E_DURATION, the send phase of each e2e run,
	// default 15s.
	E2EDuration time.Duration
	// E2EUsers: SEQBENCH_E2E_USERS, users (one connection each) of the
	// e2e runs, default 200; sessions are half as many direct pairs.
	E2EUsers int
	// E2EMax: SEQBENCH_E2E_MAX, whether the e2e phase runs its
	// as-fast-as-possible step before the paced one, default true; false
	// runs only the paced step (its e2e_max_* keys are then absent).
	E2EMax bool
	// E2EWarmup: SEQBENCH_E2E_WARMUP, how long the e2e phase drives its
	// services at FixedRate before it measures anything, default 20s; 0
	// skips it. A broker started shortly before (a fresh machine's
	// `go tool task bench`) spends its first minutes compiling its hot
	// paths, and fresh services their first seconds filling pools and
	// caches: the warm-up keeps that out of the figures.
	E2EWarmup time.Duration
	// PacedRuns: SEQBENCH_E2E_PACED_RUNS, how many times the run paced at
	// FixedRate is repeated (each with fresh users and sessions), default
	// 3; its latency keys are the medians. On this shared 2-core box two
	// runs in a row differed by a factor of two in ACK p99 (68.9 and 143
	// ms, docs/benchmarks.md), more than any change being measured.
	PacedRuns int
	// WatchCommitted: SEQBENCH_WATCH_COMMITTED, whether a read_committed
	// consumer of the bench times each event from its server_ts to being
	// readable during the paced run (the committed_visible stage), default
	// false: it is one more fetch per sequencer transaction on the broker
	// being measured, and the pusher's read latency covers the same hop.
	WatchCommitted bool
	// E2EInFlight: SEQBENCH_E2E_IN_FLIGHT, each client's window in the
	// as-fast-as-possible run, default 32.
	E2EInFlight int
	// DeliveredInterval: SEQBENCH_DELIVERED_INTERVAL, the e2e clients'
	// window for delivered receipts; default 0, the SDK's.
	DeliveredInterval time.Duration
	// FixedRate: SEQBENCH_FIXED_RATE, msgs/s of the latency run, default
	// 2000.
	FixedRate int
	// IdleConns: SEQBENCH_IDLE_CONNS, idle WebSocket connections opened
	// to one gateway, default 19000 (this sandbox allows 20,000 descriptors).
	IdleConns int
	// FanoutMembers: SEQBENCH_FANOUT_MEMBERS, the group sizes measured one
	// after the other (comma-separated), default 10000,100000; keys are
	// named by size (fanout_10k_..., fanout_100k_...).
	FanoutMembers []int
	// FanoutOnline: SEQBENCH_FANOUT_ONLINE, members online, default 1000.
	FanoutOnline int
	// FanoutMessages: SEQBENCH_FANOUT_MESSAGES, messages sent to the
	// group, default 20.
	FanoutMessages int
	// PhaseTimeout: SEQBENCH_PHASE_TIMEOUT, the bound on each phase,
	// default 4m.
	PhaseTimeout time.Duration
	// SequencerRecords: SEQBENCH_SEQUENCER_RECORDS, uplinks per sequencer
	// benchmark run (SEQFLOW_BENCH_RECORDS of ./sequencer), default 200000.
	SequencerRecords int
	// ReplayEvents: SEQBENCH_REPLAY_EVENTS, the events of the sequenced
	// log the replay and replay_live phases read, default 1,000,000
	// (filled once a run, by the sequencer service). replay_live needs
	// enough of them for a replay at ReplayLiveRate to outlast a paced run.
	ReplayEvents int
	// ReplayRuns: SEQBENCH_REPLAY_RUNS, how many times the replay phase
	// copies and exports the whole log, default 3; its keys are medians.
	ReplayRuns int
	// ReplayLiveRuns: SEQBENCH_REPLAY_LIVE_RUNS, the paced runs of
	// replay_live, default 3, each with a replay copying and pausing in
	// turns.
	ReplayLiveRuns int
	// ReplayLiveDuration: SEQBENCH_REPLAY_LIVE_DURATION, the send phase of
	// each of them, default 40s.
	ReplayLiveDuration time.Duration
	// ReplayLiveRate: SEQBENCH_REPLAY_LIVE_RATE, the -rate of the replay
	// during replay_live's runs, default replay.DefaultRate (the
	// command's default); 0: uncapped.
	ReplayLiveRate float64
	// ReplayLiveNice: SEQBENCH_REPLAY_LIVE_NICE, the -nice of the replay
	// (0..19); -1, the default: the command's own default.
	ReplayLiveNice int
	// ReplicatedRates: SEQBENCH_REPLICATED_RATES, the msg/s of the
	// replicated phase's runs, default 250,500.
	ReplicatedRates []int
	// ReplicatedRuns: SEQBENCH_REPLICATED_RUNS, runs per rate, default 3;
	// its keys are medians.
	ReplicatedRuns int
	// ReplicatedDuration: SEQBENCH_REPLICATED_DURATION, the send phase of
	// each run, default 90s. The phase's bound is its own: runs times
	// (this plus 4m of set-up, drain and audit), not PhaseTimeout.
	ReplicatedDuration time.Duration
	// ReplicatedWarmup: SEQBENCH_REPLICATED_WARMUP, the send phase of an
	// unmeasured first run at the first rate, default 60s; 0: none. The
	// brokers compile their hot paths for minutes after a start (their
	// JIT took 45 of the first 140 CPU-s at 250 msg/s), and the runs
	// measure them warm, as they run in production.
	ReplicatedWarmup time.Duration
	// ReplicatedEnv: SEQBENCH_REPLICATED_ENV, space-separated NAME=value
	// the replicated phase's services get (after SEQBENCH_SERVICE_ENV),
	// default the settings docs/operations.md gives for a replicated
	// cluster: GATEWAY_PRODUCE_LINGER=20ms PERSISTER_FETCH_WAIT=500ms;
	// empty: the services' own defaults.
	ReplicatedEnv []string
	// Doc: SEQBENCH_DOC, the doc whose generated section is rewritten,
	// default docs/benchmarks.md; empty: no doc.
	Doc string
	// CPUProfile: SEQBENCH_CPUPROFILE, when set, a CPU profile of this
	// process (the load generator and its clients) during the e2e phase
	// is written there, and one of the fanout phase with ".fanout" added;
	// default none.
	CPUProfile string
	// JSON: SEQBENCH_JSON, the report, default .data/reports/bench.json.
	JSON string
	// ServiceEnv: SEQBENCH_SERVICE_ENV, space-separated NAME=value added to
	// the environment of every service the bench starts (after its own
	// settings, before a phase's), default none. For settings of the
	// services alone, e.g. GOMAXPROCS=1, which would otherwise reach this
	// process (the load generator) too.
	ServiceEnv []string
}

// LoadConfig reads Config from e and validates it.
func LoadConfig(e *config.Env) (Config, error) {
	c := Config{
		Root:               e.String("SEQBENCH_ROOT", "."),
		Brokers:            e.List("SEQFLOW_KAFKA_BROKERS", nil),
		PGURL:              e.Required("SEQFLOW_PG_URL"),
		RedisAddr:          e.Required("SEQFLOW_REDIS_ADDR"),
		Phases:             e.List("SEQBENCH_PHASES", Phases),
		Partitions:         e.Int("SEQBENCH_PARTITIONS", 8, 1, 256),
		PortBase:           e.Int("SEQBENCH_PORT_BASE", 18400, 1024, 65000),
		E2EDuration:        e.Duration("SEQBENCH_E2E_DURATION", 15*time.Second, time.Second, 5*time.Minute),
		E2EUsers:           e.Int("SEQBENCH_E2E_USERS", 200, 2, 100_000),
		E2EMax:             e.Bool("SEQBENCH_E2E_MAX", true),
		E2EWarmup:          e.Duration("SEQBENCH_E2E_WARMUP", 20*time.Second, 0, 10*time.Minute),
		WatchCommitted:     e.Bool("SEQBENCH_WATCH_COMMITTED", false),
		PacedRuns:          e.Int("SEQBENCH_E2E_PACED_RUNS", 3, 1, 20),
		E2EInFlight:        e.Int("SEQBENCH_E2E_IN_FLIGHT", 32, 1, 64),
		DeliveredInterval:  e.Duration("SEQBENCH_DELIVERED_INTERVAL", 0, 0, time.Minute),
		FixedRate:          e.Int("SEQBENCH_FIXED_RATE", 2000, 1, 1_000_000),
		IdleConns:          e.Int("SEQBENCH_IDLE_CONNS", 19_000, 1, 200_000),
		FanoutMembers:      fanoutSizes(e.List("SEQBENCH_FANOUT_MEMBERS", []string{"10000", "100000"})),
		FanoutOnline:       e.Int("SEQBENCH_FANOUT_ONLINE", 1_000, 1, 20_000),
		FanoutMessages:     e.Int("SEQBENCH_FANOUT_MESSAGES", 20, 1, 10_000),
		PhaseTimeout:       e.Duration("SEQBENCH_PHASE_TIMEOUT", 4*time.Minute, 10*time.Second, time.Hour),
		SequencerRecords:   e.Int("SEQBENCH_SEQUENCER_RECORDS", 200_000, 1000, 10_000_000),
		ReplayEvents:       e.Int("SEQBENCH_REPLAY_EVENTS", 1_000_000, 1000, 50_000_000),
		ReplayRuns:         e.Int("SEQBENCH_REPLAY_RUNS", 3, 1, 20),
		ReplayLiveRuns:     e.Int("SEQBENCH_REPLAY_LIVE_RUNS", 3, 1, 20),
		ReplayLiveDuration: e.Duration("SEQBENCH_REPLAY_LIVE_DURATION", 40*time.Second, 10*time.Second, 10*time.Minute),
		ReplayLiveRate:     float64(e.Int("SEQBENCH_REPLAY_LIVE_RATE", replay.DefaultRate, 0, 10_000_000)),
		ReplayLiveNice:     e.Int("SEQBENCH_REPLAY_LIVE_NICE", -1, -1, 19),
		ReplicatedRates:    rates(e.List("SEQBENCH_REPLICATED_RATES", []string{"250", "500"})),
		ReplicatedRuns:     e.Int("SEQBENCH_REPLICATED_RUNS", 3, 1, 20),
		ReplicatedDuration: e.Duration("SEQBENCH_REPLICATED_DURATION", 90*time.Second, 30*time.Second, 30*time.Minute),
		ReplicatedWarmup:   e.Duration("SEQBENCH_REPLICATED_WARMUP", 60*time.Second, 0, 30*time.Minute),
		ReplicatedEnv:      strings.Fields(e.Optional("SEQBENCH_REPLICATED_ENV", "GATEWAY_PRODUCE_LINGER=20ms PERSISTER_FETCH_WAIT=500ms")),
		Doc:                e.Optional("SEQBENCH_DOC", "docs/benchmarks.md"),
		JSON:               e.String("SEQBENCH_JSON", ".data/reports/bench.json"),
		CPUProfile:         e.String("SEQBENCH_CPUPROFILE", ""),
		ServiceEnv:         strings.Fields(e.String("SEQBENCH_SERVICE_ENV", "")),
	}
	errs := []error{e.Err()}
	for _, kv := range append(slices.Clone(c.ServiceEnv), c.ReplicatedEnv...) {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			errs = append(errs, fmt.Errorf("SEQBENCH_SERVICE_ENV: %q is not NAME=value", kv))
		}
	}
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("SEQFLOW_KAFKA_BROKERS: required"))
	}
	for _, p := range c.Phases {
		if !slices.Contains(Phases, p) {
			errs = append(errs, fmt.Errorf("SEQBENCH_PHASES: unknown phase %q (want a subset of %v)", p, Phases))
		}
	}
	if len(c.ReplicatedRates) == 0 {
		errs = append(errs, errors.New("SEQBENCH_REPLICATED_RATES: want msg/s of 1..100000, comma-separated"))
	}
	if len(c.FanoutMembers) == 0 {
		errs = append(errs, errors.New("SEQBENCH_FANOUT_MEMBERS: want group sizes of 2..200000, comma-separated"))
	}
	for _, n := range c.FanoutMembers {
		if c.FanoutOnline >= n {
			errs = append(errs, fmt.Errorf("SEQBENCH_FANOUT_ONLINE: %d, want fewer than SEQBENCH_FANOUT_MEMBERS (%d)", c.FanoutOnline, n))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	return c, nil
}

func (c Config) runs(phase string) bool { return slices.Contains(c.Phases, phase) }

// fanoutSizes parses SEQBENCH_FANOUT_MEMBERS; nil when a size is not
// 2..200000.
func fanoutSizes(list []string) []int {
	var out []int
	for _, s := range list {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 2 || n > 200_000 {
			return nil
		}
		out = append(out, n)
	}
	return out
}

// sizeName names a group size in keys: 10k, 100k, or the number.
func sizeName(n int) string {
	if n%1000 == 0 {
		return strconv.Itoa(n/1000) + "k"
	}
	return strconv.Itoa(n)
}

// rates parses SEQBENCH_REPLICATED_RATES; nil when one is not a number
// of 1..100000.
func rates(list []string) []int {
	var out []int
	for _, s := range list {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 100_000 {
			return nil
		}
		out = append(out, n)
	}
	return out
}
