package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// Bench is one benchmark run: every phase in order, each under its own
// timeout, then the report. A failed phase is recorded and the run goes
// on; Run fails only when the report cannot be written or ctx ends.
type Bench struct {
	cfg    Config
	log    *slog.Logger
	logDir string
	built  bool // the service binaries of this run are built

	cliBuilt bool          // .data/bin/cmd-seqflow of this run is built
	seqLog   *sequencedLog // the log the replay phases read, once filled
}

// New returns a Bench for cfg.
func New(cfg Config, log *slog.Logger) *Bench {
	return &Bench{cfg: cfg, log: log, logDir: filepath.Join(cfg.Root, ".data", "bench")}
}

// Run runs the phases and writes the report; it returns ctx.Err() when
// interrupted (after writing what was measured so far).
func (b *Bench) Run(ctx context.Context) error {
	if err := os.MkdirAll(b.logDir, 0o755); err != nil {
		return fmt.Errorf("create log dir: %w", err)
	}
	began := time.Now()
	facts := machineFacts(b.cfg.Root)
	r := newResults()
	phases := map[string]func(context.Context, *Results) error{
		"sequencer": b.sequencer, "alloc": b.alloc, "persister": b.persister, "groups": b.groups,
		"e2e": b.e2e, "floor": b.floor, "floor_split": b.floorSplit, "idle": b.idle, "fanout": b.fanout,
		"replay": b.replay, "replay_live": b.replayLive, "replicated": b.replicated,
	}
	defer b.dropLog()
	for _, name := range Phases {
		if !b.cfg.runs(name) || ctx.Err() != nil {
			continue
		}
		b.log.Info("phase", "phase", name)
		timeout := b.cfg.PhaseTimeout
		if name == "replicated" {
			timeout = b.cfg.replicatedTimeout()
		}
		pctx, cancel := context.WithTimeout(ctx, timeout)
		start := time.Now()
		err := phases[name](pctx, r)
		cancel()
		if err != nil {
			perr := &PhaseError{Phase: name, Err: err}
			b.log.Error("phase failed", "phase", name, "err", err)
			r.Failures = append(r.Failures, perr.Error())
		}
		b.log.Info("phase done", "phase", name, "seconds", time.Since(start).Seconds())
	}
	took := time.Since(began)
	r.set("run_duration_s", took.Seconds(), "go tool task bench")
	facts = append(facts, fmt.Sprintf("whole run: %.0f s (phases: %s)", took.Seconds(), strings.Join(b.cfg.Phases, ", ")))
	var errs []error
	if err := writeJSON(b.path(b.cfg.JSON), r.Values); err != nil {
		errs = append(errs, err)
	}
	if b.cfg.Doc != "" {
		if err := writeDoc(b.path(b.cfg.Doc), Section(facts, r)); err != nil {
			errs = append(errs, err)
		}
	}
	fmt.Println(Summary(r))
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return ctx.Err()
}

// path resolves p against the repository root unless it is absolute.
func (b *Bench) path(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(b.cfg.Root, p)
}

// machineFacts are the doc's machine lines, read once at the start (the
// load average then is what other engineers' work put on the box).
func machineFacts(root string) []string {
	cpu := "unknown"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				if _, v, ok := strings.Cut(l, ":"); ok {
					cpu = strings.TrimSpace(v)
				}
				break
			}
		}
	}
	out := func(name string, args ...string) string {
		b, err := exec.Command(name, args...).Output()
		if err != nil {
			return "unknown"
		}
		return strings.TrimSpace(string(b))
	}
	mem := "unknown"
	if m := out("free", "-g"); m != "unknown" {
		for _, l := range strings.Split(m, "\n") {
			if f := strings.Fields(l); len(f) > 1 && f[0] == "Mem:" {
				mem = f[1] + " GiB total (`free -g`)"
			}
		}
	}
	load := "unknown"
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		load = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	gover := out("go", "env", "GOVERSION")
	return []string{
		"date: " + time.Now().UTC().Format("2006-01-02 15:04 UTC"),
		"command: `go tool task bench` (= `bash infra/local/bench.sh`)",
		fmt.Sprintf("CPU: %s, %s cores (`nproc`), memory %s", cpu, out("nproc"), mem),
		"kernel: " + out("uname", "-r") + ", Go: " + gover + " (orchestrator built with " + runtime.Version() + ")",
		"load average at the start (1, 5, 15 min, `/proc/loadavg`): " + load + " — the box is shared with other engineers' test runs",
		"commit: " + out("git", "-C", root, "rev-parse", "--short", "HEAD"),
	}
}

// sequencer runs the sequencer benchmark at the default step (5000) and at
// 1000, the default until issue 9's throughput work.
func (b *Bench) sequencer(ctx context.Context, r *Results) error {
	cmd := "go test -run XXX -bench BenchmarkSequencer_Throughput -benchtime 1x ./sequencer"
	records := fmt.Sprintf("SEQFLOW_BENCH_RECORDS=%d", b.cfg.SequencerRecords)
	const defaultStep = 5000
	var rows []string
	var errs []error
	for _, step := range []int{defaultStep, 1000} {
		env := []string{records, fmt.Sprintf("SEQUENCER_STEP=%d", step), fmt.Sprintf("SEQUENCER_MAX_POLL_RECORDS=%d", step)}
		lines, err := b.goBench(ctx, filepath.Join(b.logDir, fmt.Sprintf("sequencer-%d.log", step)), env, "./sequencer", "BenchmarkSequencer_Throughput", "-benchtime", "1x")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		seq, err1 := metric(lines, "BenchmarkSequencer_Throughput", "sequencer_msgs/s")
		ceil, err2 := metric(lines, "BenchmarkSequencer_Throughput", "kafka_ceiling_msgs/s")
		if err := errors.Join(err1, err2); err != nil {
			errs = append(errs, err)
			continue
		}
		// Where a batch's time went; absent only if the benchmark is older.
		stage := func(unit string) string {
			v, err := metric(lines, "BenchmarkSequencer_Throughput", unit)
			if err != nil {
				return "–"
			}
			return fmt.Sprintf("%.1f", v)
		}
		src := strings.Join(env, " ") + " " + cmd
		if step == defaultStep {
			r.set("sequencer_msgs_per_s", seq, src)
			r.set("kafka_ceiling_msgs_per_s", ceil, src)
		} else {
			r.set(fmt.Sprintf("sequencer_msgs_per_s_step%d", step), seq, src)
			r.set(fmt.Sprintf("kafka_ceiling_msgs_per_s_step%d", step), ceil, src)
		}
		rows = append(rows, fmt.Sprintf("| %d / %d%s | %s | %s | %.2f | %s | %s / %s / %s |", step, step, map[bool]string{true: " (default)"}[step == defaultStep],
			num(seq), num(ceil), seq/ceil, stage("records/batch"), stage("prepare_ms/batch"), stage("produce_ms/batch"), stage("commit_ms/batch")))
	}
	if len(rows) > 0 {
		r.Details = append(r.Details, fmt.Sprintf("### Sequencer alone vs the Kafka ceiling\n\n`SEQFLOW_BENCH_RECORDS=%d SEQUENCER_STEP=N SEQUENCER_MAX_POLL_RECORDS=N %s`\n(the same records; the ceiling is a plain franz-go consume → produce without\ntransactions or PostgreSQL, measured right before it in the same process).\nEach row is the median round of 3 (`SEQFLOW_BENCH_ROUNDS`; each round on\ntopics of its own, the ceiling then the sequencer): the round whose ratio is\nthe median, every figure of the row from that one round.\nA batch is one transaction: prepare is decode, dedup, segments and encoding,\nproduce the flush of its events, commit TxnOffsetCommit + EndTxn (means over\nthe run, from the sequencer's own histograms).\n\n| step / max poll records | sequencer msgs/s | Kafka ceiling msgs/s | ratio | records per batch | prepare / produce / commit ms |\n|---|---|---|---|---|---|\n%s\n", b.cfg.SequencerRecords, cmd, strings.Join(rows, "\n")))
	}
	return errors.Join(errs...)
}

// alloc runs the seq allocation benchmarks: segments vs a PostgreSQL
// UPDATE per seq vs a Redis INCR per seq.
func (b *Bench) alloc(ctx context.Context, r *Results) error {
	cmd := "go test -run XXX -bench BenchmarkAlloc -benchtime 2s ./internal/segment"
	lines, err := b.goBench(ctx, filepath.Join(b.logDir, "alloc.log"), nil, "./internal/segment", "BenchmarkAlloc", "-benchtime", "2s")
	if err != nil {
		return err
	}
	var errs []error
	for _, k := range []struct{ bench, key string }{
		{"BenchmarkAlloc_Segment", "alloc_segment_per_s"},
		{"BenchmarkAlloc_PGUpdate", "alloc_pg_update_per_s"},
		{"BenchmarkAlloc_RedisIncr", "alloc_redis_incr_per_s"},
	} {
		v, err := metric(lines, k.bench, "seqs/s")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		r.set(k.key, v, cmd)
	}
	return errors.Join(errs...)
}

// groups runs the group state snapshot benchmark: saving and loading the
// snapshot of a 100,000-member group, what a new owner of a partition
// pays before it reads the log after the snapshot.
func (b *Bench) groups(ctx context.Context, r *Results) error {
	cmd := "go test -run XXX -bench BenchmarkSnapshot_100k -benchtime 5x ./internal/groups"
	lines, err := b.goBench(ctx, filepath.Join(b.logDir, "groups.log"), nil, "./internal/groups", "BenchmarkSnapshot_100k", "-benchtime", "5x")
	if err != nil {
		return err
	}
	save, err1 := metric(lines, "BenchmarkSnapshot_100k", "save_ms")
	load, err2 := metric(lines, "BenchmarkSnapshot_100k", "load_ms")
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	r.set("group_snapshot_save_100k_ms", save, cmd)
	r.set("group_snapshot_load_100k_ms", load, cmd)
	return nil
}

// persister runs the persister's write path against a raw COPY of the
// same rows, at its default batch (5000) and writers (2).
func (b *Bench) persister(ctx context.Context, r *Results) error {
	cmd := "go test -run XXX -bench 'BenchmarkPersist_5000x2$' -benchtime 20x ./internal/store"
	lines, err := b.goBench(ctx, filepath.Join(b.logDir, "persister.log"), nil, "./internal/store", "BenchmarkPersist_5000x2$", "-benchtime", "20x")
	if err != nil {
		return err
	}
	w, err1 := metric(lines, "BenchmarkPersist_5000x2", "writer_rows/s")
	c, err2 := metric(lines, "BenchmarkPersist_5000x2", "copy_rows/s")
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	r.set("persister_rows_per_s", w, cmd)
	r.set("copy_ceiling_rows_per_s", c, cmd)
	return nil
}
