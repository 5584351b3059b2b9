package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/seqflow/seqflow/client/load"
	"github.com/seqflow/seqflow/internal/eventlog"
)

// e2e runs the full pipeline as processes (gateway, sequencer, persister,
// pusher) and drives it with client/load over 1:1 sessions with 200-byte
// bodies: once as fast as the clients' windows allow (the sustained
// rate), then at the fixed rate for the latency figures.
func (b *Bench) e2e(ctx context.Context, r *Results) error {
	s, err := b.startServices(ctx, "e2e", nil, serviceOrder...)
	if err != nil {
		return err
	}
	defer s.stop()
	stopProfile, err := b.startProfile("")
	if err != nil {
		return err
	}
	defer stopProfile()
	users := b.cfg.E2EUsers
	base := b.loadOptions()
	src := fmt.Sprintf("go tool task bench (cmd/seqbench e2e: client/load, %d users, %d direct sessions, 200-byte bodies, %s",
		users, users/2, b.cfg.E2EDuration)
	var rows []string
	var errs []error

	named := map[int]string{os.Getpid(): "seqbench (load generator, clients)"}
	for _, p := range s.procs {
		named[p.Pid()] = p.Name
	}
	var cpuNotes []string
	if b.cfg.E2EWarmup > 0 {
		warm := base
		warm.Rate, warm.Duration, warm.Drain = float64(b.cfg.FixedRate), b.cfg.E2EWarmup, 5*time.Second
		rep, err := runLoad(ctx, warm)
		b.log.Info("e2e warm-up done, not measured", "seconds", b.cfg.E2EWarmup.Seconds(), "acked", rep.Acked, "err", err)
		if err != nil {
			return fmt.Errorf("warm-up run: %w", err)
		}
	}
	if b.cfg.E2EMax {
		maxO := base
		maxO.InFlight = b.cfg.E2EInFlight
		cpu0 := takeCPU(named)
		rep, err := runLoad(ctx, maxO)
		cpuNotes = append(cpuNotes, "CPU during the as-fast-as-possible run (setup, send and drain):\n\n"+cpuTable(cpu0, takeCPU(named), float64(rep.Acked)))
		if err != nil {
			errs = append(errs, fmt.Errorf("as-fast-as-possible run: %w", err))
		}
		if rep.Sent > 0 {
			msrc := src + fmt.Sprintf(", as fast as a window of %d per client allows)", maxO.InFlight)
			r.set("e2e_max_msgs_per_s", rep.RateMsgsPerS, msrc)
			r.set("e2e_max_lost", float64(rep.Lost), msrc)
			r.set("e2e_max_ack_p99_ms", rep.AckP99Ms, msrc)
			r.set("e2e_max_deliver_p99_ms", rep.DeliverP99Ms, msrc)
			rows = append(rows, loadRow("as fast as possible", rep))
		}
		if err := s.exited(); err != nil {
			return errors.Join(append(errs, err)...)
		}
	}

	fixO := base
	fixO.Rate = float64(b.cfg.FixedRate)
	fixO.Timeline = true
	cpu0 := takeCPU(named)
	snap0 := s.snapMetrics(ctx)
	var watch *committedWatch
	if b.cfg.WatchCommitted {
		if watch, err = b.watchCommitted(eventlog.Names(s.prefix).Sequenced); err != nil {
			b.log.Warn("no committed_visible stage", "err", err)
		}
	}
	var reps []load.Report
	var acked int64
	var timeNotes []string
	for i := 0; i < b.cfg.PacedRuns; i++ {
		rep, err := runLoad(ctx, fixO)
		if err != nil {
			errs = append(errs, fmt.Errorf("fixed-rate run %d: %w", i+1, err))
		}
		if rep.Sent > 0 {
			reps = append(reps, rep)
			acked += rep.Acked
			timeNotes = append(timeNotes, b.timelineNote(i+1, rep.Timeline))
		}
		if err != nil || ctx.Err() != nil {
			break
		}
	}
	snap1 := s.snapMetrics(ctx)
	stageRs, counts := stageRows(snap0, snap1), counterRows(snap0, snap1)
	if watch != nil {
		stageRs = append(stageRs, watch.stop())
	}
	b.log.Info("e2e paced run stages", "table", stageTable(stageRs), "counters", counts)
	cpu1 := takeCPU(named)
	cpuNotes = append(cpuNotes, fmt.Sprintf("CPU during the runs paced at %d msg/s:\n\n", b.cfg.FixedRate)+cpuTable(cpu0, cpu1, float64(acked)))
	if len(reps) > 0 {
		fsrc := src + fmt.Sprintf(", paced at %d msg/s, median of %d runs)", b.cfg.FixedRate, len(reps))
		csrc := fsrc + ": /proc/stat and /proc/<pid>/stat before and after the paced runs"
		r.set("e2e_paced_machine_busy_pct", busyPct(cpu0, cpu1), csrc)
		// With these two the per-1k figures become CPU-ms per second
		// (infra/local/rate-sweep.sh): what a process pays whatever the rate.
		r.set("e2e_paced_acked", float64(acked), csrc)
		r.set("e2e_paced_cpu_window_s", cpu1.at.Sub(cpu0.at).Seconds(), csrc)
		// total: every process of the pipeline and its load (the stack's
		// Kafka, PostgreSQL and Redis, the four services, the load
		// generator); not the other work on the box ("other", another
		// Kafka cluster).
		var total float64
		for key, group := range map[string]string{"kafka": "kafka", "gateway": "producer-gw", "loadgen": "seqbench (load generator, clients)", "sequencer": "sequencer", "pusher": "pusher", "persister": "persister", "postgres": "postgres", "redis": "redis-server"} {
			secs := groupSecs(cpu0, cpu1, group)
			total += secs
			r.set("e2e_paced_cpu_ms_per_1k_"+key, 1e6*secs/max(float64(acked), 1), csrc)
		}
		r.set("e2e_paced_cpu_ms_per_1k_total", 1e6*total/max(float64(acked), 1), csrc)
		rep := medianReport(reps)
		for _, st := range stageRs {
			ssrc := fsrc + ": " + st.metric + " " + st.labels + " of " + st.svc + "'s /metrics before and after"
			r.set("e2e_stage_"+st.key+"_p50_ms", st.p50, ssrc)
			r.set("e2e_stage_"+st.key+"_p99_ms", st.p99, ssrc)
		}
		r.set("e2e_ack_p50_ms", rep.AckP50Ms, fsrc)
		r.set("e2e_ack_p99_ms", rep.AckP99Ms, fsrc)
		r.set("e2e_deliver_p50_ms", rep.DeliverP50Ms, fsrc)
		r.set("e2e_deliver_p99_ms", rep.DeliverP99Ms, fsrc)
		r.set("e2e_deliver_p999_ms", rep.DeliverP999Ms, fsrc)
		r.set("e2e_fixed_msgs_per_s", rep.RateMsgsPerS, fsrc)
		r.set("e2e_fixed_lost", float64(rep.Lost), fsrc)
		for i, one := range reps {
			rows = append(rows, loadRow(fmt.Sprintf("paced at %d msg/s, run %d of %d", b.cfg.FixedRate, i+1, len(reps)), one))
		}
		rows = append(rows, loadRow(fmt.Sprintf("paced, median of the %d runs (each column on its own; sums for the counts)", len(reps)), rep))
	}
	if len(rows) > 0 {
		r.Details = append(r.Details, fmt.Sprintf(`### End to end: WebSocket send → recipient WebSocket

The four services as processes (built by the run, %d partitions, a fresh
topic prefix, default settings except the gateway's per-user rate limit,
raised to 100,000/s so the limiter is not what is measured), driven by
`+"`client/load`"+` in the orchestrator: %d users, one connection each, %d
direct sessions, 200-byte text bodies, %s send phase, then up to 15 s of
drain and a sync of anything not delivered (late vs lost). ACK = send →
ACK carrying the seq; deliver = send → the recipient's SDK handing the
event over. Latency counts from the scheduled send time. %s

| run | sent | acked | lost | late | dup | msgs/s | ack p50 / p99 / p999 ms | deliver p50 / p99 / p999 ms | errors |
|---|---|---|---|---|---|---|---|---|---|
%s

How the ACK latency moved through each paced run: the median of the
messages scheduled in each 100 ms of it (each run's messages, one line
per message, in `+"`.data/bench/e2e-paced-<run>.tsv`"+`):

%s

Where the time went in the runs paced at %d msg/s, stage by stage: each
service's histogram, read from its /metrics just before the first and just
after the last (setup, send and drain), quantiles interpolated inside buckets of
1.5× (2× for the pusher's and gateway's older series). "both": on the way
of the ACK and of the delivery.

%s
Where the CPU went (all processes of the box, grouped; "other" is other
engineers' work on the shared machine):

%s
`, b.cfg.Partitions, users, users/2, b.cfg.E2EDuration, warmupNote(b.cfg.E2EWarmup, b.cfg.FixedRate), joinLines(rows), strings.Join(timeNotes, "\n"), b.cfg.FixedRate, stageTable(stageRs)+"\n"+strings.Join(counts, "; ")+"\n", strings.Join(cpuNotes, "\n")))
	}
	return errors.Join(append(errs, s.exited())...)
}

// loadOptions is the e2e load against the bench's gateway: E2EUsers
// users over half as many direct sessions, 200-byte bodies, E2EDuration
// of sending and up to 15 s of drain; the caller sets the rate.
func (b *Bench) loadOptions() load.Options {
	return load.Options{
		Gateways: []string{"ws://" + b.gatewayAddr()}, Secret: benchSecret,
		Users: b.cfg.E2EUsers, Sessions: b.cfg.E2EUsers / 2, GroupShare: -1, BodyBytes: 200,
		Duration: b.cfg.E2EDuration, Drain: 15 * time.Second, DeliveredInterval: b.cfg.DeliveredInterval,
	}
}

// runLoad runs load.Run, up to twice more when it fails before sending
// anything (its setup did not see every session reach every member in
// 60 s): a fresh set of users usually gets through.
func runLoad(ctx context.Context, o load.Options) (load.Report, error) {
	var rep load.Report
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		o.UserPrefix = ""
		rep, err = load.Run(ctx, o)
		if err == nil || rep.Sent > 0 || ctx.Err() != nil {
			break
		}
	}
	return rep, err
}

func loadRow(name string, rep load.Report) string {
	return fmt.Sprintf("| %s | %d | %d | %d | %d | %d | %s | %s / %s / %s | %s / %s / %s | %v |",
		name, rep.Sent, rep.Acked, rep.Lost, rep.Late, rep.Duplicated, num(rep.RateMsgsPerS),
		num(rep.AckP50Ms), num(rep.AckP99Ms), num(rep.AckP999Ms),
		num(rep.DeliverP50Ms), num(rep.DeliverP99Ms), num(rep.DeliverP999Ms), errMap(rep.Errors))
}

func errMap(m map[string]int64) string {
	if len(m) == 0 {
		return "none"
	}
	return fmt.Sprint(m)
}

func joinLines(rows []string) string {
	out := ""
	for i, r := range rows {
		if i > 0 {
			out += "\n"
		}
		out += r
	}
	return out
}

// warmupNote says what ran before the measured runs.
func warmupNote(d time.Duration, rate int) string {
	if d <= 0 {
		return "No warm-up ran before them (SEQBENCH_E2E_WARMUP=0)."
	}
	return fmt.Sprintf("Before them the same services ran %s at %d msg/s, not\nmeasured (SEQBENCH_E2E_WARMUP), so a broker or service started shortly\nbefore is past its start-up.", d, rate)
}

// startProfile starts a CPU profile of this process (the load generator
// and its clients) when SEQBENCH_CPUPROFILE is set, written there with
// suffix added; the returned func stops it.
func (b *Bench) startProfile(suffix string) (func(), error) {
	if b.cfg.CPUProfile == "" {
		return func() {}, nil
	}
	f, err := os.Create(b.path(b.cfg.CPUProfile + suffix))
	if err != nil {
		return nil, fmt.Errorf("create CPU profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("start CPU profile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// medianReport is the per-column median of the paced runs' latencies and
// rate, and the sum of their counts.
func medianReport(reps []load.Report) load.Report {
	med := func(f func(load.Report) float64) float64 {
		v := make([]float64, len(reps))
		for i, r := range reps {
			v[i] = f(r)
		}
		sort.Float64s(v)
		if n := len(v); n%2 == 0 {
			return (v[n/2-1] + v[n/2]) / 2
		}
		return v[len(v)/2]
	}
	out := load.Report{
		AckP50Ms: med(func(r load.Report) float64 { return r.AckP50Ms }), AckP99Ms: med(func(r load.Report) float64 { return r.AckP99Ms }),
		AckP999Ms: med(func(r load.Report) float64 { return r.AckP999Ms }), DeliverP50Ms: med(func(r load.Report) float64 { return r.DeliverP50Ms }),
		DeliverP99Ms: med(func(r load.Report) float64 { return r.DeliverP99Ms }), DeliverP999Ms: med(func(r load.Report) float64 { return r.DeliverP999Ms }),
		RateMsgsPerS: med(func(r load.Report) float64 { return r.RateMsgsPerS }), Errors: map[string]int64{},
	}
	for _, r := range reps {
		out.Sent += r.Sent
		out.Acked += r.Acked
		out.Lost += r.Lost
		out.Late += r.Late
		out.Duplicated += r.Duplicated
		for k, v := range r.Errors {
			out.Errors[k] += v
		}
	}
	return out
}

// timelineNote summarises paced run n's ACK latency per 100 ms of send
// time, and writes the run's points to the log directory.
func (b *Bench) timelineNote(n int, tl []load.TimelinePoint) string {
	if len(tl) == 0 {
		return fmt.Sprintf("- run %d: no ACKs", n)
	}
	var buf strings.Builder
	buf.WriteString("scheduled_unix_ms\tack_ms\n")
	for _, p := range tl {
		fmt.Fprintf(&buf, "%d\t%.2f\n", p.At.UnixMilli(), p.AckMs)
	}
	path := filepath.Join(b.logDir, fmt.Sprintf("e2e-paced-%d.tsv", n))
	if err := os.WriteFile(path, []byte(buf.String()), 0o644); err != nil {
		b.log.Warn("write the paced run's timeline", "path", path, "err", err)
	}
	w := load.WindowMedians(tl, 100*time.Millisecond)
	sorted := slices.Clone(w)
	slices.Sort(sorted)
	over := 0
	for _, v := range w {
		if v > 30 {
			over++
		}
	}
	return fmt.Sprintf("- run %d: %d windows; their medians from %s to %s ms (10th / 50th / 90th percentile of the windows %s / %s / %s ms); %d%% of the windows had a median over 30 ms",
		n, len(w), num(sorted[0]), num(sorted[len(sorted)-1]), num(load.Quantile(sorted, 0.1)), num(load.Quantile(sorted, 0.5)), num(load.Quantile(sorted, 0.9)), 100*over/len(w))
}
