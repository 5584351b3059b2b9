package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/seqflow/seqflow/client/load"
	"github.com/seqflow/seqflow/internal/testkit/proc"
)

// The replayer of a replay_live run copies for replayWindow, is paused
// (SIGSTOP) for replayWindow, and so on; the messages scheduled within
// replaySettle after a switch count on neither side, since the broker and
// the pipeline are still working off the other state.
const (
	replayWindow = 2 * time.Second
	replaySettle = 500 * time.Millisecond
)

// replayProgressRE is the replayer's progress line: events copied by
// this run, and its rate over its whole run.
var replayProgressRE = regexp.MustCompile(`\((\d+) this run, (\d+) events/s\)`)

// toggle is a moment the replayer was resumed (on) or paused, with the
// CPU used so far.
type toggle struct {
	at  time.Time
	on  bool
	cpu cpuSnapshot
}

// splitByReplay sorts the ACK latencies of tl by whether the replayer was
// copying when each message was scheduled (by the last toggle at or
// before it), leaving out those scheduled before the first toggle or
// within settle after one. Both results are sorted.
func splitByReplay(tl []load.TimelinePoint, toggles []toggle, settle time.Duration) (on, off []float64) {
	for _, p := range tl {
		k := sort.Search(len(toggles), func(i int) bool { return toggles[i].at.After(p.At) })
		if k == 0 {
			continue
		}
		t := toggles[k-1]
		if p.At.Sub(t.at) < settle {
			continue
		}
		if t.on {
			on = append(on, p.AckMs)
		} else {
			off = append(off, p.AckMs)
		}
	}
	slices.Sort(on)
	slices.Sort(off)
	return on, off
}

// liveRun is one paced run of the replay_live phase, split by whether the
// replayer was copying.
type liveRun struct {
	on, off   []float64 // ACK ms, sorted
	rate      float64   // the run's msgs/s
	copied    int64     // events the replayer copied by the end of the run
	onSeconds float64   // how long the replayer was running, not paused
	// CPU ms per second while it copied and while it was paused: the
	// broker's, the replayer's and other engineers' work on the machine.
	kafkaOn, kafkaOff, replayerOn, otherOn, otherOff float64
}

// cpuSplit adds up a group's CPU over the windows between toggles (the
// last one ending at end), by the replayer's state, in ms per second.
func cpuSplit(toggles []toggle, end cpuSnapshot, group string) (on, off float64) {
	var secsOn, secsOff, cpuOn, cpuOff float64
	for i, t := range toggles {
		next := end
		if i+1 < len(toggles) {
			next = toggles[i+1].cpu
		}
		d, c := next.at.Sub(t.cpu.at).Seconds(), groupSecs(t.cpu, next, group)
		if t.on {
			secsOn, cpuOn = secsOn+d, cpuOn+c
		} else {
			secsOff, cpuOff = secsOff+d, cpuOff+c
		}
	}
	return 1000 * cpuOn / max(secsOn, 1e-9), 1000 * cpuOff / max(secsOff, 1e-9)
}

// replayLive measures the live pipeline's ACK latency while a replay
// copies and while it does not, in the same runs: the four services on a
// prefix of their own (as in e2e), warmed up, then ReplayLiveRuns runs
// paced at the fixed rate, each with `seqflow replay-topic create` at the
// command's default rate started before the run and paused (SIGSTOP) and
// resumed every replayWindow. On this shared machine the load of other
// work moves more from one minute to the next than a replay can; windows
// a few seconds apart see the same background, where whole runs with
// and without a replay did not (three pairs of 15 s runs gave ACK p99s of
// 130 to 308 ms without a replay).
//
// The replay reads the filled log, not the live topic: for the broker,
// the disk and the CPUs that is the same work (a replay of the live topic
// reads its older segments, not the tail the services read), and the live
// consumers do not have to read a million events of history first.
func (b *Bench) replayLive(ctx context.Context, r *Results) error {
	if err := b.buildCLI(ctx); err != nil {
		return err
	}
	lg, err := b.filledLog(ctx)
	if err != nil {
		return err
	}
	s, err := b.startServices(ctx, "replay_live", nil, serviceOrder...)
	if err != nil {
		return err
	}
	defer s.stop()
	o := b.loadOptions()
	o.Rate = float64(b.cfg.FixedRate)
	if b.cfg.E2EWarmup > 0 {
		warm := o
		warm.Duration, warm.Drain = b.cfg.E2EWarmup, 5*time.Second
		if _, err := runLoad(ctx, warm); err != nil {
			return fmt.Errorf("warm-up run: %w", err)
		}
	}
	o.Duration, o.Timeline = b.cfg.ReplayLiveDuration, true
	var runs []liveRun
	var errs []error
	for i := range b.cfg.ReplayLiveRuns {
		run, err := b.liveRun(ctx, lg, o, i+1)
		if err != nil {
			errs = append(errs, err)
		} else {
			runs = append(runs, run)
		}
		if err := s.exited(); err != nil {
			return errors.Join(append(errs, err)...)
		}
		if ctx.Err() != nil {
			break
		}
	}
	var on, off []float64
	var rows []string
	for i, run := range runs {
		on, off = append(on, run.on...), append(off, run.off...)
		rows = append(rows, fmt.Sprintf("| %d | %s | %d / %d | %s / %s | %s / %s | %.2f | %d | %s | %.0f / %.0f | %.0f | %.0f / %.0f |", i+1, num(run.rate), len(run.on), len(run.off),
			num(load.Quantile(run.on, 0.5)), num(load.Quantile(run.on, 0.99)), num(load.Quantile(run.off, 0.5)), num(load.Quantile(run.off, 0.99)),
			load.Quantile(run.on, 0.99)/load.Quantile(run.off, 0.99), run.copied, num(float64(run.copied)/max(run.onSeconds, 1e-9)),
			run.kafkaOn, run.kafkaOff, run.replayerOn, run.otherOn, run.otherOff))
	}
	if len(on) == 0 || len(off) == 0 {
		return errors.Join(append(errs, errors.New("no ACK on one side"))...)
	}
	slices.Sort(on)
	slices.Sort(off)
	src := fmt.Sprintf("go tool task bench (cmd/seqbench replay_live: client/load as in e2e, paced at %d msg/s, %d runs of %s; `seqflow replay-topic create NAME -rate %g` over a sequenced log of %d events, paused and resumed every %s; ACKs of the messages scheduled while it copied vs while it was paused, %s after each switch left out)",
		b.cfg.FixedRate, len(runs), b.cfg.ReplayLiveDuration, b.cfg.ReplayLiveRate, lg.events, replayWindow, replaySettle)
	during, without := load.Quantile(on, 0.99), load.Quantile(off, 0.99)
	r.set("e2e_ack_p99_ms_during_replay", during, src)
	r.set("e2e_ack_p99_ms_without_replay", without, src)
	r.set("e2e_ack_p99_replay_ratio", during/without, src)
	r.set("e2e_ack_p50_ms_during_replay", load.Quantile(on, 0.5), src)
	r.set("e2e_ack_p50_ms_without_replay", load.Quantile(off, 0.5), src)
	r.Details = append(r.Details, fmt.Sprintf(`### Live ACK latency while a replay copies

The four services as processes on a prefix of their own (as in e2e: %d
users, %d direct sessions, 200-byte bodies), warmed up for %s, then
runs of %s paced at %d msg/s. During each run `+"`seqflow replay-topic create NAME -rate %g`"+`
(the command's default rate) copies the sequenced log of %d events the
replay phase reads, paused (SIGSTOP) and resumed every %s from before
the run's setup to after its drain; each message's ACK counts on the side
the replayer was on when the message was scheduled, those scheduled in
the first %s after a switch on neither. The replay reads a log on another
prefix of the same broker: the same broker, disk and CPU work as a replay
of the live topic's history. Copy rate = events copied over the seconds
the replayer was not paused. CPU in ms per second from /proc, copying /
paused: the broker's, the replayer's while it copied, and other work on
the machine (other engineers', not the bench's or the stack's).

| run | msgs/s | ACKs copying / paused | ACK p50 / p99 ms copying | ACK p50 / p99 ms paused | p99 ratio | events copied | copy rate /s | broker CPU | replayer CPU | other CPU |
|---|---|---|---|---|---|---|---|---|---|---|
%s

All runs together: ACK p99 %s ms while the replay copied, %s ms while it
was paused (ratio %.2f); p50 %s and %s ms.
`, b.cfg.E2EUsers, b.cfg.E2EUsers/2, b.cfg.E2EWarmup, b.cfg.ReplayLiveDuration, b.cfg.FixedRate, b.cfg.ReplayLiveRate, lg.events,
		replayWindow, replaySettle, joinLines(rows), num(during), num(without), during/without,
		num(load.Quantile(on, 0.5)), num(load.Quantile(off, 0.5))))
	return errors.Join(errs...)
}

// liveRun runs one paced run with a replayer copying and pausing in turns
// from before its setup to after its drain.
func (b *Bench) liveRun(ctx context.Context, lg *sequencedLog, o load.Options, n int) (liveRun, error) {
	var run liveRun
	name := "live-" + randHex(4)
	args := []string{"replay-topic", "create", name, "-rate", strconv.FormatFloat(b.cfg.ReplayLiveRate, 'f', -1, 64), "-retention", "1h"}
	if b.cfg.ReplayLiveNice >= 0 {
		args = append(args, "-nice", strconv.Itoa(b.cfg.ReplayLiveNice))
	}
	rp := &proc.Proc{Name: "replay-topic", Bin: b.seqflowBin(), Args: args,
		Env: []string{"SEQFLOW_KAFKA_BROKERS=" + strings.Join(b.cfg.Brokers, ","), "SEQFLOW_TOPIC_PREFIX=" + lg.prefix},
		Log: filepath.Join(b.logDir, fmt.Sprintf("replay_live-replayer-%d.log", n))}
	_ = os.Remove(rp.Log) // a log of an earlier bench: its progress lines are not this run's
	if err := rp.Start(); err != nil {
		return run, err
	}
	named := map[int]string{rp.Pid(): "replay-topic", os.Getpid(): "seqbench"}
	toggles := []toggle{{time.Now(), true, takeCPU(named)}}
	tctx, stopToggling := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(replayWindow)
		defer tick.Stop()
		for on := true; ; {
			select {
			case <-tctx.Done():
				return
			case <-tick.C:
			}
			on = !on
			c := takeCPU(named)
			if on {
				rp.Signal(syscall.SIGCONT)
			} else {
				rp.Signal(syscall.SIGSTOP)
			}
			toggles = append(toggles, toggle{time.Now(), on, c})
		}
	}()
	rep, err := runLoad(ctx, o)
	stopToggling()
	wg.Wait()
	endCPU := takeCPU(named)
	end := time.Now()
	finished := !rp.Running()
	rp.Stop(15 * time.Second) // SIGCONT first
	for i, t := range toggles {
		if !t.on {
			continue
		}
		until := end
		if i+1 < len(toggles) {
			until = toggles[i+1].at
		}
		run.onSeconds += until.Sub(t.at).Seconds()
	}
	if log, rerr := os.ReadFile(rp.Log); rerr == nil {
		if m := replayProgressRE.FindAllSubmatch(log, -1); len(m) > 0 {
			run.copied, _ = strconv.ParseInt(string(m[len(m)-1][1]), 10, 64)
		}
	}
	if _, _, _, _, derr := b.cli(context.WithoutCancel(ctx), lg, "replay_live-delete.log", "replay-topic", "delete", name); derr != nil {
		b.log.Warn("delete replay", "replay", name, "err", derr)
	}
	if err != nil {
		return run, fmt.Errorf("paced run %d: %w", n, err)
	}
	if finished {
		return run, fmt.Errorf("paced run %d: the replay ended before the run did (%v; log %s): raise SEQBENCH_REPLAY_EVENTS", n, rp.Err(), rp.Log)
	}
	run.rate = rep.RateMsgsPerS
	run.kafkaOn, run.kafkaOff = cpuSplit(toggles, endCPU, "kafka")
	run.replayerOn, _ = cpuSplit(toggles, endCPU, "replay-topic")
	run.otherOn, run.otherOff = cpuSplit(toggles, endCPU, "other")
	run.on, run.off = splitByReplay(rep.Timeline, toggles, replaySettle)
	return run, nil
}
