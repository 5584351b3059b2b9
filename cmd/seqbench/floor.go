package main

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/seqflow/seqflow/internal/testkit/floor"
	"github.com/seqflow/seqflow/internal/testkit/proc"
)

// floorPkg is the floor's server (cmd/seqfloor: Kafka and WebSocket
// with the services' settings, and nothing else).
const floorPkg = "./cmd/seqfloor"

// floor measures what the e2e phase's load costs when a message does
// only what no design of seqflow can leave out: the uplink produce, the
// transaction that sequences it, the read_committed read that pushes it,
// three WebSocket frames (send, ACK, event). Same users, sessions,
// bodies, rate, warm-up and paced runs as e2e; the CPU of the floor's
// server, its clients (this process) and the broker per 1,000 messages,
// and the ACK and delivery latency. Run after e2e, it also reports the
// ratio of e2e's total CPU per message to the floor's.
func (b *Bench) floor(ctx context.Context, r *Results) error { return b.floorPhase(ctx, r, false) }

// floorSplit is the floor phase with the floor split as seqflow is: its
// gateway, sequencer and pusher as three processes (SEQFLOOR_ROLE), the
// ACKs and events reaching the gateway over TCP as the direct ACKs and
// the pusher's events reach producer-gw. Its keys are floor_split_*; set
// beside floor_*, they are what the split itself costs.
func (b *Bench) floorSplit(ctx context.Context, r *Results) error { return b.floorPhase(ctx, r, true) }

// floorProcs starts the floor's server (split: its three roles) on the
// topics of prefix and returns the WebSocket and admin address of the
// gateway, the admin addresses of all, and the processes (stopped by
// the caller).
func (b *Bench) floorProcs(ctx context.Context, bin, prefix, id string, split bool) (string, []string, []*proc.Proc, error) {
	// SEQBENCH_SERVICE_ENV reaches the floor's server as it reaches the
	// services, so a setting under test (GOGC, GOMAXPROCS, the codec)
	// applies to both sides of e2e_cpu_over_floor.
	env := append([]string{"SEQFLOW_KAFKA_BROKERS=" + strings.Join(b.cfg.Brokers, ","), "SEQFLOW_TOPIC_PREFIX=" + prefix,
		"SEQFLOOR_GROUP=bench-floor-" + id, "SEQFLOOR_ADDR=" + proc.AnyPort}, b.cfg.ServiceEnv...)
	roles, log := []string{floor.RoleAll}, "floor"
	if split {
		roles, log = []string{floor.RoleGateway, floor.RoleSequencer, floor.RolePusher}, "floor_split"
	}
	rctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	var procs []*proc.Proc
	var admins []string
	var frames string
	for _, role := range roles {
		p := &proc.Proc{Name: "seqfloor", Bin: bin, Log: filepath.Join(b.logDir, log+"-seqfloor-"+role+".log"),
			Env: append(slices.Clone(env), "SEQFLOOR_ROLE="+role, "SEQFLOOR_FRAMES="+cmp.Or(frames, proc.AnyPort))}
		if err := p.Start(); err != nil {
			return "", nil, procs, &ServiceError{Service: p.Name + " " + role, Log: p.Log, Err: err}
		}
		procs = append(procs, p)
		addr, err := p.Addr(rctx, "floor listening")
		if err == nil && role == floor.RoleGateway {
			frames, err = p.Addr(rctx, "floor frames listening")
		}
		if err == nil {
			p.Admin = addr
			admins = append(admins, addr)
			err = p.WaitReady(rctx)
		}
		if err != nil {
			return "", nil, procs, &ServiceError{Service: p.Name + " " + role, Log: p.Log, Err: err}
		}
	}
	return admins[0], admins, procs, nil
}

// floorPhase is the floor phase, in one process or split.
func (b *Bench) floorPhase(ctx context.Context, r *Results, split bool) error {
	bins, err := proc.Compile(ctx, b.cfg.Root, filepath.Join(b.cfg.Root, ".data", "bin"), floorPkg)
	if err != nil {
		return err
	}
	id := randHex(4)
	prefix := "bench-" + id + "."
	defer b.deleteTopics(prefix)
	if err := b.createTopics(ctx, prefix); err != nil {
		return err
	}
	addr, admins, procs, err := b.floorProcs(ctx, bins[floorPkg], prefix, id, split)
	defer func() {
		for _, p := range procs {
			p.Stop(15 * time.Second)
		}
	}()
	if err != nil {
		return err
	}
	key := "floor_"
	if split {
		key = "floor_split_"
	}

	fc, err := floor.Dial(ctx, "ws://"+addr+"/ws", b.cfg.E2EUsers)
	if err != nil {
		return err
	}
	defer fc.Close()
	phase, shape := "floor", "`cmd/seqfloor` as a process"
	if split {
		phase, shape = "floor_split", "`cmd/seqfloor` split as seqflow is, three processes (SEQFLOOR_ROLE gateway, sequencer and pusher; the ACK and event frames reach the gateway over TCP, a write per batch)"
	}
	src := fmt.Sprintf("go tool task bench (cmd/seqbench "+phase+": cmd/seqfloor, %d users, %d direct sessions, 200-byte bodies, %s, paced at %d msg/s",
		b.cfg.E2EUsers, b.cfg.E2EUsers/2, b.cfg.E2EDuration, b.cfg.FixedRate)
	if b.cfg.E2EWarmup > 0 {
		rep := fc.Run(ctx, float64(b.cfg.FixedRate), b.cfg.E2EWarmup)
		b.log.Info("floor warm-up done, not measured", "seconds", b.cfg.E2EWarmup.Seconds(), "acked", rep.Acked)
	}
	named := map[int]string{os.Getpid(): "seqbench (floor clients)"}
	for _, p := range procs {
		named[p.Pid()] = "seqfloor"
	}
	cpu0 := takeCPU(named)
	snap0 := floorSnap(ctx, admins)
	var reps []floorRun
	var acked int64
	for range b.cfg.PacedRuns {
		rep := fc.Run(ctx, float64(b.cfg.FixedRate), b.cfg.E2EDuration)
		reps = append(reps, newFloorRun(rep))
		acked += rep.Acked
		if ctx.Err() != nil {
			break
		}
	}
	cpu1 := takeCPU(named)
	stageRs := floorStages(snap0, floorSnap(ctx, admins))
	for _, p := range procs {
		if !p.Running() {
			return &ServiceError{Service: p.Name, Log: p.Log, Err: fmt.Errorf("exited during the phase: %v", p.Err())}
		}
	}
	fsrc := src + fmt.Sprintf(", median of %d runs)", len(reps))
	csrc := fsrc + ": /proc/stat and /proc/<pid>/stat before and after the paced runs"
	var total float64
	for group, name := range map[string]string{"kafka": "kafka", "server": "seqfloor", "clients": "seqbench (floor clients)"} {
		secs := groupSecs(cpu0, cpu1, name)
		total += secs
		r.set(key+"cpu_ms_per_1k_"+group, 1e6*secs/max(float64(acked), 1), csrc)
	}
	r.set(key+"cpu_ms_per_1k_total", 1e6*total/max(float64(acked), 1), csrc)
	r.set(key+"machine_busy_pct", busyPct(cpu0, cpu1), csrc)
	if e2e, ok := r.Values["e2e_paced_cpu_ms_per_1k_total"]; ok && total > 0 && !split {
		r.set("e2e_cpu_over_floor", e2e/r.Values["floor_cpu_ms_per_1k_total"],
			"go tool task bench: e2e_paced_cpu_ms_per_1k_total / floor_cpu_ms_per_1k_total of the same run")
	}
	med := func(f func(floorRun) float64) float64 { return median(reps, f) }
	r.set(key+"ack_p50_ms", med(func(x floorRun) float64 { return x.ack(0.5) }), fsrc)
	r.set(key+"ack_p99_ms", med(func(x floorRun) float64 { return x.ack(0.99) }), fsrc)
	r.set(key+"deliver_p50_ms", med(func(x floorRun) float64 { return x.deliver(0.5) }), fsrc)
	r.set(key+"deliver_p99_ms", med(func(x floorRun) float64 { return x.deliver(0.99) }), fsrc)
	r.set(key+"deliver_p999_ms", med(func(x floorRun) float64 { return x.deliver(0.999) }), fsrc)
	for _, st := range stageRs {
		ssrc := fsrc + ": " + st.metric + " " + st.labels + " of cmd/seqfloor's /metrics before and after the paced runs"
		r.set(key+"stage_"+st.key+"_p50_ms", st.p50, ssrc)
		r.set(key+"stage_"+st.key+"_p99_ms", st.p99, ssrc)
	}
	var lost, harmed int64
	var rows []string
	for i, x := range reps {
		lost += x.Sent - min(x.Acked, x.Delivered)
		harmed += x.Harmed()
		rows = append(rows, fmt.Sprintf("| %d | %d | %d | %d | %d / %d / %d | %.1f / %.1f | %.1f / %.1f / %.1f |", i+1, x.Sent, x.Acked, x.Delivered,
			x.Duplicates, x.Misrouted, x.SeqErrors, x.ack(0.5), x.ack(0.99), x.deliver(0.5), x.deliver(0.99), x.deliver(0.999)))
	}
	r.set(key+"lost", float64(lost), fsrc)
	r.set(key+"harmed", float64(harmed), fsrc)
	title := "The floor: Kafka and WebSocket alone"
	if split {
		title = "The floor split as seqflow is"
	}
	r.Details = append(r.Details, fmt.Sprintf(`### %s

%s: the uplink produce (acks=all, idempotent,
snappy, 2 ms linger), one transactional sequencer (read_committed, offsets
in the transaction, batches taken as the sequencer takes them with its
merge wait and 12 ms floor, seqs in memory) that writes the ACK frame
after its commit, one read_committed pusher that writes the event frame; %d WebSocket clients in this process over %d
direct sessions, 200-byte bodies, paced at %d msg/s for %s a run after a
%s warm-up. No store, PostgreSQL, Redis, dedup, presence, receipts,
auth or SDK: what is left is the least a message of seqflow's design
costs on this machine.

| run | sent | acked | delivered | duplicates / misrouted / seq errors | ack p50 / p99 ms | deliver p50 / p99 / p999 ms |
|---|---|---|---|---|---|---|
%s

Its stages in the paced runs, from the histograms cmd/seqfloor keeps
under the services' names and buckets (the column "series" names the
service whose hop it stands for; the rows of the push transport and of
the direct ACK are absent):

%s
CPU during the paced runs:

%s
`, title, shape, b.cfg.E2EUsers, b.cfg.E2EUsers/2, b.cfg.FixedRate, b.cfg.E2EDuration, b.cfg.E2EWarmup, strings.Join(rows, "\n"), stageTable(stageRs), cpuTable(cpu0, cpu1, float64(acked))))
	if harmed > 0 {
		return fmt.Errorf("%s: %d messages not acked or not delivered, %d duplicates, misrouted events or seq errors", phase, lost, harmed-lost)
	}
	return nil
}

// floorRun is a paced run of the floor's clients with its quantile
// functions.
type floorRun struct {
	floor.Report
	ack, deliver func(q float64) float64
}

func newFloorRun(r floor.Report) floorRun {
	return floorRun{Report: r, ack: quantiles(r.AckMs), deliver: quantiles(r.DeliverMs)}
}

// floorSnap reads the /metrics of cmd/seqfloor's processes at addrs
// into one map (split, each role has its own series); a process that
// does not answer is left out (and its stages with it).
func floorSnap(ctx context.Context, addrs []string) map[string]*hist {
	out := map[string]*hist{}
	for _, addr := range addrs {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		h, _, err := scrapeHistograms(ctx, "http://"+addr+"/metrics")
		cancel()
		if err != nil {
			continue
		}
		for k, v := range h {
			if v.total() > 0 || out[k] == nil {
				out[k] = v
			}
		}
	}
	return out
}

// floorStages is the stage rows of the floor's histograms between two
// snapshots: the server keeps each under its service's name, so it
// stands in for every service of the stage list.
func floorStages(before, after map[string]*hist) []stageRow {
	snap := func(h map[string]*hist) metricsSnap {
		return metricsSnap{"producer-gw": h, "sequencer": h, "pusher": h}
	}
	rows := stageRows(snap(before), snap(after))
	for i := range rows {
		rows[i].svc = "seqfloor, for " + rows[i].svc
	}
	return rows
}
