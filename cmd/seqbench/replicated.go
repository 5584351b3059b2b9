package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/seqflow/seqflow/internal/config"
	"github.com/seqflow/seqflow/internal/testkit/chaos"
)

// replicated runs, after an unmeasured warm-up run, the production
// topology of the chaos suite without its
// faults: the three-broker cluster (replication 3, min.insync.replicas 2),
// two of every service as processes of their own, and the suite's load
// mix (SDK users in groups of 4 and direct sessions, delivered and read
// receipts, governance operations) through its ACK-booking proxies, at
// each of ReplicatedRates, ReplicatedRuns times. Each run is audited as a
// chaos run is (nothing acked lost, duplicated or reordered); a run that
// fails the audit fails the phase (its delivery lag is measured here, not
// judged). Keys, medians of the runs:
// replicated_<rate>_ack_p99_ms, _deliver_p99_ms (deliveries to members
// at the message's seq), _history_per_acked (events the clients received
// in sync pages, over acked messages), _busy_pct (the machine over the
// send phase) and _msgs_per_s (acked).
func (b *Bench) replicated(ctx context.Context, r *Results) error {
	st := config.LoadLocal()
	if len(st.Kafka3Brokers) != 3 {
		return errors.New("the replicated phase needs the three-broker cluster: run `go tool task up:kafka3` (bench.sh starts it when the phase is selected)")
	}
	opts := func(rate int, d time.Duration) chaos.Options {
		return chaos.Options{
			Brokers: st.Kafka3Brokers, Root: b.cfg.Root, NoFaults: true, Duration: d,
			Rate: float64(rate), Users: replicatedUsers, Sessions: replicatedSessions, EraseEvery: -1,
			ServiceEnv: append(slices.Clone(b.cfg.ServiceEnv), b.cfg.ReplicatedEnv...),
		}
	}
	var errs []error
	if w := b.cfg.ReplicatedWarmup; w > 0 {
		b.log.Info("replicated warm-up", "rate", b.cfg.ReplicatedRates[0], "duration", w)
		if rep, err := chaos.Run(ctx, opts(b.cfg.ReplicatedRates[0], w)); err != nil {
			errs = append(errs, fmt.Errorf("warm-up: %w", err))
		} else if harm := auditFailures(rep); len(harm) > 0 {
			errs = append(errs, fmt.Errorf("warm-up (logs %s): %s", rep.Config["logs"], strings.Join(harm, "; ")))
		}
	}
	var rows []string
	for _, rate := range b.cfg.ReplicatedRates {
		var reps []*chaos.Report
		for i := range b.cfg.ReplicatedRuns {
			b.log.Info("replicated run", "rate", rate, "run", i+1)
			rep, err := chaos.Run(ctx, opts(rate, b.cfg.ReplicatedDuration))
			if err != nil {
				errs = append(errs, fmt.Errorf("%d msg/s run %d: %w", rate, i+1, err))
				continue
			}
			if harm := auditFailures(rep); len(harm) > 0 {
				errs = append(errs, fmt.Errorf("%d msg/s run %d (logs %s): %s", rate, i+1, rep.Config["logs"], strings.Join(harm, "; ")))
			}
			reps = append(reps, rep)
		}
		if len(reps) == 0 {
			continue
		}
		src := fmt.Sprintf("SEQBENCH_PHASES=replicated go tool task bench (%d runs at %d msg/s, %s each, services with %s; medians)",
			len(reps), rate, b.cfg.ReplicatedDuration, strings.Join(b.cfg.ReplicatedEnv, " "))
		key := func(k string) string { return fmt.Sprintf("replicated_%d_%s", rate, k) }
		ack := median(reps, func(r *chaos.Report) float64 { return r.Load.AckP99Ms })
		del := median(reps, func(r *chaos.Report) float64 { return r.Load.DeliverP99Ms })
		hist := median(reps, func(r *chaos.Report) float64 { return r.Load.SyncedPerAcked })
		busy := median(reps, func(r *chaos.Report) float64 { return r.BusyPct })
		got := median(reps, func(r *chaos.Report) float64 { return r.Load.RateMsgsPerS })
		r.set(key("ack_p99_ms"), ack, src)
		r.set(key("deliver_p99_ms"), del, src)
		r.set(key("history_per_acked"), hist, src)
		r.set(key("busy_pct"), busy, src)
		r.set(key("msgs_per_s"), got, src)
		var each []string
		for _, rep := range reps {
			each = append(each, fmt.Sprintf("%.0f/%.0f", rep.Load.AckP99Ms, rep.Load.DeliverP99Ms))
		}
		rows = append(rows, fmt.Sprintf("| %d | %s | %s | %s | %s | %.2f | %.0f %% | %s |", rate, num(got),
			num(median(reps, func(r *chaos.Report) float64 { return r.Load.AckP50Ms })), num(ack), num(del), hist, busy, strings.Join(each, ", ")))
	}
	env := "`" + strings.Join(b.cfg.ReplicatedEnv, " ") + "`"
	if len(b.cfg.ReplicatedEnv) == 0 {
		env = "their own defaults"
	}
	if len(rows) > 0 {
		r.Details = append(r.Details, fmt.Sprintf("### Replicated: three brokers and two of each service\n\n"+
			"`SEQBENCH_PHASES=replicated go tool task bench`: the chaos suite's topology and load mix without faults\n"+
			"(%d SDK users, %d sessions, half of them groups of 4, receipts and governance), %s send phase per run,\n"+
			"medians of %d runs per rate. Deliver: to members at the message's seq. History: events the clients\n"+
			"received in sync pages per acked message. Busy: the whole machine over the send phase. The services run\n"+
			"with %s (`SEQBENCH_REPLICATED_ENV`).\n\n"+
			"| target msg/s | acked msg/s | ACK p50 ms | ACK p99 ms | deliver p99 ms | history per acked | busy | each run's ACK p99 / deliver p99 ms |\n"+
			"|---|---|---|---|---|---|---|---|\n%s\n",
			replicatedUsers, replicatedSessions, b.cfg.ReplicatedDuration, b.cfg.ReplicatedRuns, env, strings.Join(rows, "\n")))
	}
	return errors.Join(errs...)
}

// auditFailures are a run's failures but delivery lag, which the phase
// measures rather than judges.
func auditFailures(rep *chaos.Report) []string {
	var out []string
	for _, f := range rep.Failures {
		if !strings.HasPrefix(f, "delivery_lag ") {
			out = append(out, f)
		}
	}
	return out
}

// The replicated phase's load: the size of the chaos runs at 250 msg/s.
const (
	replicatedUsers    = 40
	replicatedSessions = 20
)

// replicatedTimeout bounds the phase: each run sets up, sends for
// ReplicatedDuration, drains and is audited.
func (c Config) replicatedTimeout() time.Duration {
	return time.Duration(len(c.ReplicatedRates)*c.ReplicatedRuns)*(c.ReplicatedDuration+4*time.Minute) + c.ReplicatedWarmup + 4*time.Minute
}
