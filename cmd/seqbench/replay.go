package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/testkit/proc"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// sequencedLog is a sequenced log the bench filled for the phases that
// read one (replay, replay_live): ReplayEvents events on a prefix of
// their own, no service running on it. It is kept for the rest of the
// run and deleted at its end (dropLog).
type sequencedLog struct {
	prefix string
	events int64
	fill   time.Duration // produce the uplinks, then the sequencer's work
}

// filledLog returns the run's sequenced log, filling it on first use:
// ReplayEvents uplinks (1,000 direct sessions, 200-byte text bodies, as
// the sequencer phase's) produced to a fresh prefix's uplink topic and
// sequenced by the sequencer service, as a process with its defaults;
// it returns once the sequencer has committed all of them. The sequencer
// is then stopped, so nothing else reads or writes the log.
func (b *Bench) filledLog(ctx context.Context) (*sequencedLog, error) {
	if b.seqLog != nil {
		return b.seqLog, nil
	}
	start := time.Now()
	s, err := b.startServices(ctx, "fill", nil, "sequencer")
	if err != nil {
		return nil, err
	}
	keep := false
	defer func() {
		s.stopProcs()
		b.dropSchema(s.schema)
		if !keep {
			b.deleteTopics(s.prefix)
		}
	}()
	n := b.cfg.ReplayEvents
	cl, err := kgo.NewClient(append(eventlog.ClientOpts(b.cfg.Brokers, "seqbench-fill"), eventlog.ProducerOpts()...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	t := eventlog.Names(s.prefix)
	body := []byte(strings.Repeat("x", 200))
	var mu sync.Mutex
	var perr error
	var failed int
	for i := range n {
		session := fmt.Sprintf("%sfill-%04d", s.prefix, i%1000)
		v, err := proto.Marshal(&imv1.Uplink{
			SessionId: session, ClientMsgId: "m-" + strconv.Itoa(i), SenderUserId: fmt.Sprintf("u-%04d", i%1000),
			SenderDeviceId: "d1", GatewayId: "seqbench", GatewayTsMs: time.Now().UnixMilli(),
			Command: &imv1.Uplink_Message{Message: &imv1.MessageContent{Type: "text", Body: body}},
		})
		if err != nil {
			return nil, fmt.Errorf("encode uplink: %w", err)
		}
		cl.Produce(ctx, &kgo.Record{Topic: t.Uplink, Key: []byte(session), Value: v}, func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				failed++
				perr = err
				mu.Unlock()
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return nil, fmt.Errorf("flush uplinks: %w", err)
	}
	mu.Lock()
	failedN, lastErr := failed, perr
	mu.Unlock()
	if lastErr != nil {
		return nil, fmt.Errorf("produce uplinks: %d failed, the last with: %w", failedN, lastErr)
	}
	produced := time.Since(start)
	// The sequencer commits its uplink offsets in the transaction of the
	// events they became: once the group is at the uplinks' end, every
	// event is committed.
	group := "bench-seq-" + strings.TrimSuffix(strings.TrimPrefix(s.prefix, "bench-"), ".")
	adm := kadm.NewClient(cl)
	for {
		if err := s.exited(); err != nil {
			return nil, err
		}
		ends, err := adm.ListEndOffsets(ctx, t.Uplink)
		if err == nil {
			err = ends.Error()
		}
		if err != nil {
			return nil, fmt.Errorf("list uplink ends: %w", err)
		}
		done, err := adm.FetchOffsets(ctx, group)
		if err == nil {
			err = done.Error()
		}
		if err != nil {
			return nil, fmt.Errorf("fetch the sequencer's offsets: %w", err)
		}
		var end, at int64
		ends.Each(func(o kadm.ListedOffset) {
			end += o.Offset
			if c, ok := done.Lookup(t.Uplink, o.Partition); ok {
				at += c.At
			}
		})
		if at >= end {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	keep = true
	b.seqLog = &sequencedLog{prefix: s.prefix, events: int64(n), fill: time.Since(start)}
	b.log.Info("sequenced log filled", "prefix", s.prefix, "events", n, "produce_seconds", produced.Seconds(), "seconds", b.seqLog.fill.Seconds())
	return b.seqLog, nil
}

// dropLog deletes the run's sequenced log and the replay topics made of it.
func (b *Bench) dropLog() {
	if b.seqLog == nil {
		return
	}
	b.deleteTopics(b.seqLog.prefix)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.cfg.Brokers...))
	if err != nil {
		return
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := kadm.NewClient(cl)
	topics, err := adm.ListTopics(ctx)
	if err != nil {
		return
	}
	var drop []string
	for _, name := range topics.Names() {
		if strings.HasPrefix(name, b.seqLog.prefix) {
			drop = append(drop, name)
		}
	}
	if len(drop) > 0 {
		_, _ = adm.DeleteTopics(ctx, drop...)
	}
	b.seqLog = nil
}

// cli runs the seqflow command with args on the run's log, output
// appended to the phase's log; it returns its stdout and stderr, how
// long it ran and the CPU it used.
func (b *Bench) cli(ctx context.Context, lg *sequencedLog, logName string, args ...string) (out, errOut string, took, cpu time.Duration, err error) {
	f, err := os.OpenFile(filepath.Join(b.logDir, logName), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return "", "", 0, 0, fmt.Errorf("open log: %w", err)
	}
	defer f.Close()
	fmt.Fprintf(f, "--- seqflow %s\n", strings.Join(args, " "))
	var so, se bytes.Buffer
	cmd := exec.CommandContext(ctx, b.seqflowBin(), args...)
	cmd.Env = append(os.Environ(), "SEQFLOW_KAFKA_BROKERS="+strings.Join(b.cfg.Brokers, ","), "SEQFLOW_TOPIC_PREFIX="+lg.prefix)
	cmd.Stdout, cmd.Stderr = &so, &se
	start := time.Now()
	err = cmd.Run()
	took = time.Since(start)
	if cmd.ProcessState != nil {
		cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	f.Write(so.Bytes())
	f.Write(se.Bytes())
	if err != nil {
		err = fmt.Errorf("seqflow %s: %w (log %s)", strings.Join(args, " "), err, f.Name())
	}
	return so.String(), se.String(), took, cpu, err
}

func (b *Bench) seqflowBin() string { return filepath.Join(b.cfg.Root, ".data", "bin", "cmd-seqflow") }

var (
	// replayDoneRE is `seqflow replay-topic create`'s summary line.
	replayDoneRE = regexp.MustCompile(`complete: (\d+) events in \d+ partitions .* this run copied (\d+) in \S+ \((\d+) events/s\)`)
	// exportDoneRE is `seqflow export`'s last line.
	exportDoneRE = regexp.MustCompile(`exported (\d+) events in (\d+) files \((\d+) events/s while reading\)`)
)

// copyRun is one timed run of a command over the whole log.
type copyRun struct {
	events         int64
	took, cpu      time.Duration
	ownRate        float64 // the rate the command printed
	kafkaCPU       float64 // broker CPU seconds during the run
	files          int64   // export only
	wall, perKafka float64
}

func (c *copyRun) finish() {
	c.wall = float64(c.events) / c.took.Seconds()
	c.perKafka = 1e6 * c.kafkaCPU / float64(max(c.events, 1))
}

// replay measures the log's other readers over the filled log, each as
// its command runs it, one after the other, SEQBENCH_REPLAY_RUNS times:
// `seqflow replay-topic create` uncapped (-rate 0) into a fresh replay
// topic, and `seqflow export -until-end` into a fresh directory on a
// fresh consumer group.
func (b *Bench) replay(ctx context.Context, r *Results) error {
	if err := b.buildCLI(ctx); err != nil {
		return err
	}
	lg, err := b.filledLog(ctx)
	if err != nil {
		return err
	}
	named := map[int]string{os.Getpid(): "seqbench"}
	var reps, exps []copyRun
	var errs []error
	for i := range b.cfg.ReplayRuns {
		name := "bench-" + randHex(4)
		c0 := takeCPU(named)
		out, _, took, cpu, err := b.cli(ctx, lg, "replay-topic.log", "replay-topic", "create", name, "-rate", "0", "-quiet", "-retention", "1h")
		c1 := takeCPU(named)
		if err == nil {
			m := replayDoneRE.FindStringSubmatch(out)
			if m == nil {
				err = fmt.Errorf("replay-topic run %d: no summary line in %q", i+1, out)
			} else {
				run := copyRun{took: took, cpu: cpu, kafkaCPU: groupSecs(c0, c1, "kafka")}
				run.events, _ = strconv.ParseInt(m[1], 10, 64)
				run.ownRate, _ = strconv.ParseFloat(m[3], 64)
				if run.events != lg.events {
					err = fmt.Errorf("replay-topic run %d: %d events in the replay topic, the log has %d", i+1, run.events, lg.events)
				}
				run.finish()
				reps = append(reps, run)
			}
		}
		if err != nil {
			errs = append(errs, err)
		}
		if _, _, _, _, err := b.cli(ctx, lg, "replay-topic.log", "replay-topic", "delete", name); err != nil {
			errs = append(errs, err)
		}

		dir, err := os.MkdirTemp(b.logDir, "export-")
		if err != nil {
			return errors.Join(append(errs, fmt.Errorf("export directory: %w", err))...)
		}
		c0 = takeCPU(named)
		_, errOut, took, cpu, err := b.cli(ctx, lg, "export.log", "export", "-dir", dir, "-until-end", "-group", "bench-export-"+randHex(4))
		c1 = takeCPU(named)
		os.RemoveAll(dir)
		if err == nil {
			m := exportDoneRE.FindStringSubmatch(errOut)
			if m == nil {
				err = fmt.Errorf("export run %d: no summary line in %q", i+1, errOut)
			} else {
				run := copyRun{took: took, cpu: cpu, kafkaCPU: groupSecs(c0, c1, "kafka")}
				run.events, _ = strconv.ParseInt(m[1], 10, 64)
				run.files, _ = strconv.ParseInt(m[2], 10, 64)
				run.ownRate, _ = strconv.ParseFloat(m[3], 64)
				if run.events != lg.events {
					err = fmt.Errorf("export run %d: %d events exported, the log has %d", i+1, run.events, lg.events)
				}
				run.finish()
				exps = append(exps, run)
			}
		}
		if err != nil {
			errs = append(errs, err)
		}
		if ctx.Err() != nil {
			break
		}
	}
	what := fmt.Sprintf("%d events of 1,000 sessions, 200-byte bodies, %d partitions", lg.events, b.cfg.Partitions)
	src := func(cmd string, runs int) string {
		return fmt.Sprintf("go tool task bench (cmd/seqbench replay: `%s` over a sequenced log of %s; events over the command's wall time, median of %d runs)", cmd, what, runs)
	}
	var rows []string
	if len(reps) > 0 {
		s := src("seqflow replay-topic create NAME -rate 0", len(reps))
		r.set("replay_topic_events_per_s", median(reps, func(c copyRun) float64 { return c.wall }), s)
		r.set("replay_topic_own_events_per_s", median(reps, func(c copyRun) float64 { return c.ownRate }), s+": the rate of its summary line")
		r.set("replay_topic_cpu_ms_per_1k", median(reps, func(c copyRun) float64 { return 1e6 * c.cpu.Seconds() / float64(c.events) }), s+": the command's user+system CPU")
		r.set("replay_topic_kafka_cpu_ms_per_1k", median(reps, func(c copyRun) float64 { return c.perKafka }), s+": the broker's CPU, /proc/<pid>/stat")
		for i, c := range reps {
			rows = append(rows, copyRow(fmt.Sprintf("replay-topic, run %d", i+1), c))
		}
	}
	if len(exps) > 0 {
		s := src("seqflow export -dir DIR -until-end -group NEW", len(exps))
		r.set("export_events_per_s", median(exps, func(c copyRun) float64 { return c.wall }), s)
		r.set("export_own_events_per_s", median(exps, func(c copyRun) float64 { return c.ownRate }), s+": the rate of its summary line (first to last event read)")
		r.set("export_cpu_ms_per_1k", median(exps, func(c copyRun) float64 { return 1e6 * c.cpu.Seconds() / float64(c.events) }), s+": the command's user+system CPU")
		r.set("export_kafka_cpu_ms_per_1k", median(exps, func(c copyRun) float64 { return c.perKafka }), s+": the broker's CPU, /proc/<pid>/stat")
		for i, c := range exps {
			rows = append(rows, copyRow(fmt.Sprintf("export, run %d", i+1), c))
		}
	}
	if len(rows) > 0 {
		r.Details = append(r.Details, fmt.Sprintf(`### Replay topic and export over a sequenced log

A sequenced log of %s, filled by the sequencer service in %.1f s and
then left alone; each command run by the bench as a process, as an
operator runs it, the two alternating: `+"`seqflow replay-topic create NAME -rate 0 -quiet`"+`
(a fresh replay of the whole log, uncapped; deleted after the run) and
`+"`seqflow export -dir DIR -until-end -group NEW`"+` (a fresh directory
under .data/bench and a fresh consumer group; zstd, default file sizes).
events/s = events over the command's wall time (start to exit: topic
creation or group join included); "own" is the rate the command printed.
CPU from the process's rusage, the broker's from /proc.

| run | events | wall s | events/s | own events/s | command CPU ms per 1,000 | broker CPU ms per 1,000 | files |
|---|---|---|---|---|---|---|---|
%s
`, what, lg.fill.Seconds(), joinLines(rows)))
	}
	return errors.Join(errs...)
}

func copyRow(name string, c copyRun) string {
	files := "–"
	if c.files > 0 {
		files = strconv.FormatInt(c.files, 10)
	}
	return fmt.Sprintf("| %s | %d | %.2f | %s | %s | %.1f | %.1f | %s |", name, c.events, c.took.Seconds(), num(c.wall), num(c.ownRate),
		1e6*c.cpu.Seconds()/float64(max(c.events, 1)), c.perKafka, files)
}

// median is the median of f over xs (the mean of the middle two for an
// even count); 0 for none.
func median[T any](xs []T, f func(T) float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	v := make([]float64, len(xs))
	for i, x := range xs {
		v[i] = f(x)
	}
	sort.Float64s(v)
	if n := len(v); n%2 == 0 {
		return (v[n/2-1] + v[n/2]) / 2
	}
	return v[len(v)/2]
}

// buildCLI builds the seqflow command into .data/bin once per run.
func (b *Bench) buildCLI(ctx context.Context) error {
	if b.cliBuilt {
		return nil
	}
	if _, err := proc.Compile(ctx, b.cfg.Root, filepath.Join(b.cfg.Root, ".data", "bin"), "./cmd/seqflow"); err != nil {
		return err
	}
	b.cliBuilt = true
	return nil
}
