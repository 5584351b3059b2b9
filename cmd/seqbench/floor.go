package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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
func (b *Bench) floor(ctx context.Context, r *Results) error {
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
	// SEQBENCH_SERVICE_ENV reaches the floor's server as it reaches the
	// services, so a setting under test (GOGC, GOMAXPROCS, the codec)
	// applies to both sides of e2e_cpu_over_floor.
	p := &proc.Proc{Name: "seqfloor", Bin: bins[floorPkg],
		Env: append([]string{"SEQFLOW_KAFKA_BROKERS=" + strings.Join(b.cfg.Brokers, ","), "SEQFLOW_TOPIC_PREFIX=" + prefix,
			"SEQFLOOR_GROUP=bench-floor-" + id, "SEQFLOOR_ADDR=" + proc.AnyPort}, b.cfg.ServiceEnv...),
		Log: filepath.Join(b.logDir, "floor-seqfloor.log")}
	if err := p.Start(); err != nil {
		return &ServiceError{Service: p.Name, Log: p.Log, Err: err}
	}
	defer p.Stop(15 * time.Second)
	rctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	addr, err := p.Addr(rctx, "floor listening")
	if err == nil {
		p.Admin = addr
		err = p.WaitReady(rctx)
	}
	if err != nil {
		return &ServiceError{Service: p.Name, Log: p.Log, Err: err}
	}

	fc, err := floor.Dial(ctx, "ws://"+addr+"/ws", b.cfg.E2EUsers)
	if err != nil {
		return err
	}
	defer fc.Close()
	src := fmt.Sprintf("go tool task bench (cmd/seqbench floor: cmd/seqfloor, %d users, %d direct sessions, 200-byte bodies, %s, paced at %d msg/s",
		b.cfg.E2EUsers, b.cfg.E2EUsers/2, b.cfg.E2EDuration, b.cfg.FixedRate)
	if b.cfg.E2EWarmup > 0 {
		rep := fc.Run(ctx, float64(b.cfg.FixedRate), b.cfg.E2EWarmup)
		b.log.Info("floor warm-up done, not measured", "seconds", b.cfg.E2EWarmup.Seconds(), "acked", rep.Acked)
	}
	named := map[int]string{os.Getpid(): "seqbench (floor clients)", p.Pid(): "seqfloor"}
	cpu0 := takeCPU(named)
	snap0 := floorSnap(ctx, addr)
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
	stageRs := floorStages(snap0, floorSnap(ctx, addr))
	if !p.Running() {
		return &ServiceError{Service: p.Name, Log: p.Log, Err: fmt.Errorf("exited during the phase: %v", p.Err())}
	}
	fsrc := src + fmt.Sprintf(", median of %d runs)", len(reps))
	csrc := fsrc + ": /proc/stat and /proc/<pid>/stat before and after the paced runs"
	var total float64
	for key, group := range map[string]string{"kafka": "kafka", "server": "seqfloor", "clients": "seqbench (floor clients)"} {
		secs := groupSecs(cpu0, cpu1, group)
		total += secs
		r.set("floor_cpu_ms_per_1k_"+key, 1e6*secs/max(float64(acked), 1), csrc)
	}
	r.set("floor_cpu_ms_per_1k_total", 1e6*total/max(float64(acked), 1), csrc)
	r.set("floor_machine_busy_pct", busyPct(cpu0, cpu1), csrc)
	if e2e, ok := r.Values["e2e_paced_cpu_ms_per_1k_total"]; ok && total > 0 {
		r.set("e2e_cpu_over_floor", e2e/r.Values["floor_cpu_ms_per_1k_total"],
			"go tool task bench: e2e_paced_cpu_ms_per_1k_total / floor_cpu_ms_per_1k_total of the same run")
	}
	med := func(f func(floorRun) float64) float64 { return median(reps, f) }
	r.set("floor_ack_p50_ms", med(func(x floorRun) float64 { return x.ack(0.5) }), fsrc)
	r.set("floor_ack_p99_ms", med(func(x floorRun) float64 { return x.ack(0.99) }), fsrc)
	r.set("floor_deliver_p50_ms", med(func(x floorRun) float64 { return x.deliver(0.5) }), fsrc)
	r.set("floor_deliver_p99_ms", med(func(x floorRun) float64 { return x.deliver(0.99) }), fsrc)
	r.set("floor_deliver_p999_ms", med(func(x floorRun) float64 { return x.deliver(0.999) }), fsrc)
	for _, st := range stageRs {
		ssrc := fsrc + ": " + st.metric + " " + st.labels + " of cmd/seqfloor's /metrics before and after the paced runs"
		r.set("floor_stage_"+st.key+"_p50_ms", st.p50, ssrc)
		r.set("floor_stage_"+st.key+"_p99_ms", st.p99, ssrc)
	}
	var lost, harmed int64
	var rows []string
	for i, x := range reps {
		lost += x.Sent - min(x.Acked, x.Delivered)
		harmed += x.Harmed()
		rows = append(rows, fmt.Sprintf("| %d | %d | %d | %d | %d / %d / %d | %.1f / %.1f | %.1f / %.1f / %.1f |", i+1, x.Sent, x.Acked, x.Delivered,
			x.Duplicates, x.Misrouted, x.SeqErrors, x.ack(0.5), x.ack(0.99), x.deliver(0.5), x.deliver(0.99), x.deliver(0.999)))
	}
	r.set("floor_lost", float64(lost), fsrc)
	r.set("floor_harmed", float64(harmed), fsrc)
	r.Details = append(r.Details, fmt.Sprintf(`### The floor: Kafka and WebSocket alone

`+"`cmd/seqfloor`"+` as a process: the uplink produce (acks=all, idempotent,
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
service whose hop it stands for; the floor has no hop between processes,
so the rows of the push transport and of the direct ACK are absent):

%s
CPU during the paced runs:

%s
`, b.cfg.E2EUsers, b.cfg.E2EUsers/2, b.cfg.FixedRate, b.cfg.E2EDuration, b.cfg.E2EWarmup, strings.Join(rows, "\n"), stageTable(stageRs), cpuTable(cpu0, cpu1, float64(acked))))
	if harmed > 0 {
		return fmt.Errorf("floor: %d messages not acked or not delivered, %d duplicates, misrouted events or seq errors", lost, harmed-lost)
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

// floorSnap reads cmd/seqfloor's /metrics at addr; an error leaves the
// snapshot empty (and the phase without its stage rows).
func floorSnap(ctx context.Context, addr string) map[string]*hist {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	h, _, err := scrapeHistograms(ctx, "http://"+addr+"/metrics")
	if err != nil {
		return nil
	}
	return h
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
