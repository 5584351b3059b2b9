package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/replay"
	"github.com/seqflow/seqflow/schemas/imv1"
)

const replayTopicUsage = `usage:
  seqflow replay-topic create NAME [range flags] [-rate N] [-retention D]
  seqflow replay-topic resume NAME [-rate N]
  seqflow replay-topic list [-json]
  seqflow replay-topic describe NAME [-json]
  seqflow replay-topic delete NAME`

func runReplayTopic(ctx context.Context, args []string) error {
	return replayTopicCmd(ctx, args, os.Stdout, os.Stderr)
}

// replayTopicCmd copies ranges of the sequenced log into replay topics and
// manages them (internal/replay).
func replayTopicCmd(ctx context.Context, args []string, out, errOut io.Writer) error {
	if len(args) == 0 {
		return errors.New(replayTopicUsage)
	}
	switch args[0] {
	case "create":
		return replayTopicCreate(ctx, args[1:], out, errOut)
	case "resume":
		return replayTopicResume(ctx, args[1:], out, errOut)
	case "list":
		return replayTopicList(ctx, args[1:], out)
	case "describe":
		return replayTopicDescribe(ctx, args[1:], out)
	case "delete":
		return replayTopicDelete(ctx, args[1:], out)
	}
	return fmt.Errorf("replay-topic %q: want create, resume, list, describe or delete\n%s", args[0], replayTopicUsage)
}

// parseNamed parses flags given before or after the one NAME argument.
func parseNamed(fs *flag.FlagSet, args []string) (string, error) {
	if err := fs.Parse(args); err != nil {
		return "", err
	}
	if fs.NArg() == 0 {
		return "", fmt.Errorf("%s: NAME missing", fs.Name())
	}
	name := fs.Arg(0)
	if err := fs.Parse(fs.Args()[1:]); err != nil {
		return "", err
	}
	if fs.NArg() > 0 {
		return "", fmt.Errorf("%s: unexpected arguments %q", fs.Name(), fs.Args())
	}
	return name, replay.CheckName(name)
}

// runFlags are the flags of a command that runs the replayer.
type runFlags struct {
	rate     float64
	quiet    bool
	interval time.Duration
	nice     int
}

func (r *runFlags) register(fs *flag.FlagSet) {
	fs.Float64Var(&r.rate, "rate", replay.DefaultRate, "source records read per second, copied or not (0: no cap)")
	fs.BoolVar(&r.quiet, "quiet", false, "no progress lines")
	fs.DurationVar(&r.interval, "progress-interval", time.Second, "time between progress lines on stderr")
	fs.IntVar(&r.nice, "nice", 10, "the copy's scheduling nice value (0..19, Linux): a background copy yields the CPU to live services on the same machine; 0 leaves it as started")
}

func replayTopicCreate(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := flag.NewFlagSet("replay-topic create", flag.ContinueOnError)
	var o opsFlags
	o.register(fs)
	var rf runFlags
	rf.register(fs)
	fromOffset := fs.Int64("from-offset", -1, "first source offset of every partition (default: the log start)")
	toOffset := fs.Int64("to-offset", -1, "source offset to stop before, in every partition (default: the last stable offset now)")
	offsets := fs.String("offsets", "", "per-partition ranges P:FROM-TO[,P:FROM-TO...] (TO empty: the end); the partitions not named are left out")
	fromTime := fs.String("from-time", "", "first event time (RFC 3339 or Unix milliseconds): from the first record at or after it")
	toTime := fs.String("to-time", "", "event time to stop before: up to the first record at or after it")
	sessions := fs.String("sessions", "", "comma-separated session IDs: only their events")
	users := fs.String("users", "", "comma-separated user IDs: only the events they sent")
	retention := fs.String("retention", "168h", "the replay topic's retention.ms, counted from the copy: a Go duration, Nd for days, or forever")
	name, err := parseNamed(fs, args)
	if err != nil {
		return err
	}
	req := replay.NewRequest()
	req.FromOffset, req.ToOffset = *fromOffset, *toOffset
	if req.PartitionRanges, err = parsePartitionRanges(*offsets); err != nil {
		return err
	}
	if req.FromTsMs, err = parseTime(*fromTime); err != nil {
		return fmt.Errorf("-from-time: %w", err)
	}
	if req.ToTsMs, err = parseTime(*toTime); err != nil {
		return fmt.Errorf("-to-time: %w", err)
	}
	req.SessionIds, req.SenderUserIds = splitList(*sessions), splitList(*users)
	ret, err := parseRetention(*retention)
	if err != nil {
		return fmt.Errorf("-retention: %w", err)
	}
	brokers, defs, err := o.definitions()
	if err != nil {
		return err
	}
	def, err := defs.Create(ctx, replay.CreateSpec{Name: name, Source: eventlog.Names(o.prefix).Sequenced, Request: req, Retention: ret})
	defs.Close()
	if err != nil {
		return err
	}
	fmt.Fprintf(errOut, "replay %s: %s of %s into %s\n", name, replay.Describe(def.GetRequest()), def.GetSourceTopic(), def.GetReplayTopic())
	return runReplayer(ctx, brokers, o.prefix, name, rf, out, errOut)
}

func replayTopicResume(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := flag.NewFlagSet("replay-topic resume", flag.ContinueOnError)
	var o opsFlags
	o.register(fs)
	var rf runFlags
	rf.register(fs)
	name, err := parseNamed(fs, args)
	if err != nil {
		return err
	}
	brokers, err := o.brokerList()
	if err != nil {
		return err
	}
	return runReplayer(ctx, brokers, o.prefix, name, rf, out, errOut)
}

// runReplayer copies what is left of the replay, with progress lines on
// errOut and a summary on out.
func runReplayer(ctx context.Context, brokers []string, prefix, name string, rf runFlags, out, errOut io.Writer) error {
	if err := lowerPriority(rf.nice); err != nil {
		return fmt.Errorf("-nice: %w", err)
	}
	var last time.Time
	var lastP replay.Progress
	progress := func(p replay.Progress) {
		lastP = p
		if rf.quiet || time.Since(last) < rf.interval && p.Done < p.Partitions {
			return
		}
		last = time.Now()
		pct := 100.0
		if p.Total > 0 {
			pct = 100 * float64(p.Read) / float64(p.Total)
		}
		fmt.Fprintf(errOut, "replay %s: %5.1f%% of source offsets read (%d/%d), %d events in the topic (%d this run, %.0f events/s), %d/%d partitions done\n",
			name, pct, p.Read, p.Total, p.Events, p.RunEvents, p.Rate(), p.Done, p.Partitions)
	}
	r, err := replay.New(replay.Config{Brokers: brokers, Prefix: prefix, Name: name, Rate: rf.rate, Progress: progress,
		Log: slog.New(slog.NewTextHandler(errOut, nil))})
	if err != nil {
		return err
	}
	start := time.Now()
	st, err := r.Run(ctx)
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("stopped; `seqflow replay-topic resume %s` goes on after the last committed transaction", name)
	}
	if err != nil {
		return err
	}
	el := time.Since(start)
	fmt.Fprintf(out, "replay %s complete: %d events in %d partitions of %s, each ending with its marker; this run copied %d in %s (%.0f events/s)\n",
		name, st.Events(), len(st.Partitions), st.Def.GetReplayTopic(), lastP.RunEvents, el.Round(time.Millisecond), float64(lastP.RunEvents)/el.Seconds())
	return nil
}

// replayInfo is one replay in list and describe.
type replayInfo struct {
	Name         string                   `json:"name"`
	Topic        string                   `json:"topic"`
	Source       string                   `json:"source"`
	Range        string                   `json:"range"`
	Created      time.Time                `json:"created"`
	Retention    string                   `json:"retention,omitempty"`
	Done         bool                     `json:"done"`
	DoneCount    int                      `json:"done_partitions"`
	Partitions   int                      `json:"partitions"`
	Events       int64                    `json:"events"`
	Read         int64                    `json:"offsets_read"`
	Total        int64                    `json:"offsets_total"`
	Error        string                   `json:"error,omitempty"`
	PerPartition []replay.PartitionStatus `json:"per_partition,omitempty"`
}

func infoOf(ctx context.Context, brokers []string, def *imv1.ReplayDefinition) replayInfo {
	ri := replayInfo{Name: def.GetName(), Topic: def.GetReplayTopic(), Source: def.GetSourceTopic(),
		Range: replay.Describe(def.GetRequest()), Created: time.UnixMilli(def.GetCreatedTsMs()).UTC(), Partitions: len(def.GetRanges())}
	st, err := replay.ReadStatus(ctx, brokers, def)
	if err != nil {
		ri.Error = err.Error()
		return ri
	}
	ri.Done, ri.DoneCount, ri.Events, ri.PerPartition = st.Done(), st.DoneCount(), st.Events(), st.Partitions
	ri.Read, ri.Total = st.Offsets()
	return ri
}

func (ri replayInfo) state() string {
	switch {
	case ri.Error != "":
		return "error"
	case ri.Done:
		return "done"
	case ri.Total == 0:
		return "in progress"
	}
	return fmt.Sprintf("in progress %.1f%%", 100*float64(ri.Read)/float64(ri.Total))
}

func replayTopicList(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("replay-topic list", flag.ContinueOnError)
	var o opsFlags
	o.register(fs)
	asJSON := fs.Bool("json", false, "print one JSON object per replay")
	if err := fs.Parse(args); err != nil {
		return err
	}
	brokers, defs, err := o.definitions()
	if err != nil {
		return err
	}
	all, err := defs.All(ctx)
	defs.Close()
	if err != nil {
		return err
	}
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	sort.Strings(names)
	enc := json.NewEncoder(out)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	if !*asJSON {
		fmt.Fprintln(tw, "NAME\tSTATE\tPARTITIONS DONE\tEVENTS\tRANGE\tCREATED\tTOPIC")
	}
	for _, n := range names {
		ri := infoOf(ctx, brokers, all[n])
		ri.PerPartition = nil
		if *asJSON {
			if err := enc.Encode(ri); err != nil {
				return err
			}
			continue
		}
		state := ri.state()
		if ri.Error != "" {
			state = "error: " + ri.Error
		}
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%d\t%s\t%s\t%s\n", ri.Name, state, ri.DoneCount, ri.Partitions, ri.Events,
			ri.Range, ri.Created.Format(time.RFC3339), ri.Topic)
	}
	return tw.Flush()
}

func replayTopicDescribe(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("replay-topic describe", flag.ContinueOnError)
	var o opsFlags
	o.register(fs)
	asJSON := fs.Bool("json", false, "print one JSON object")
	name, err := parseNamed(fs, args)
	if err != nil {
		return err
	}
	brokers, defs, err := o.definitions()
	if err != nil {
		return err
	}
	defer defs.Close()
	def, err := defs.Get(ctx, name)
	if err != nil {
		return err
	}
	ri := infoOf(ctx, brokers, def)
	ri.Retention = topicRetention(ctx, defs.Admin(), def.GetReplayTopic())
	if *asJSON {
		return json.NewEncoder(out).Encode(ri)
	}
	fmt.Fprintf(out, "replay     %s\ntopic      %s\nsource     %s\nrange      %s\ncreated    %s\nretention  %s\nstate      %s\nevents     %d\nread       %d of %d source offsets\n",
		ri.Name, ri.Topic, ri.Source, ri.Range, ri.Created.Format(time.RFC3339), ri.Retention, ri.state(), ri.Events, ri.Read, ri.Total)
	if ri.Error != "" {
		fmt.Fprintf(out, "error      %s\n", ri.Error)
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tFROM\tTO\tNEXT\tEVENTS\tDONE")
	for _, p := range ri.PerPartition {
		done := "no"
		if p.Done {
			done = "yes"
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%s\n", p.Partition, p.From, p.To, p.Next, p.Events, done)
	}
	return tw.Flush()
}

// topicRetention describes a topic's retention.ms, or why it cannot.
func topicRetention(ctx context.Context, adm *kadm.Client, topic string) string {
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	rc, err := rcs.On(topic, nil)
	if err == nil {
		err = rc.Err
	}
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	for _, c := range rc.Configs {
		if c.Key == "retention.ms" {
			v := c.MaybeValue()
			ms, err := strconv.ParseInt(v, 10, 64)
			switch {
			case err != nil:
				return v
			case ms < 0:
				return "forever"
			}
			return (time.Duration(ms) * time.Millisecond).String() + " after the copy"
		}
	}
	return "unknown"
}

func replayTopicDelete(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("replay-topic delete", flag.ContinueOnError)
	var o opsFlags
	o.register(fs)
	name, err := parseNamed(fs, args)
	if err != nil {
		return err
	}
	_, defs, err := o.definitions()
	if err != nil {
		return err
	}
	defer defs.Close()
	if err := defs.DeleteReplay(ctx, name); err != nil {
		return err
	}
	fmt.Fprintf(out, "deleted replay %s and its topic %s\n", name, replay.TopicName(o.prefix, name))
	return nil
}

// parsePartitionRanges parses P:FROM-TO[,P:FROM-TO...]; an empty TO is
// the end (-1).
func parsePartitionRanges(s string) ([]*imv1.ReplayRange, error) {
	var out []*imv1.ReplayRange
	seen := map[int32]bool{}
	for _, item := range splitList(s) {
		p, rng, ok1 := strings.Cut(item, ":")
		from, to, ok2 := strings.Cut(rng, "-")
		part, err1 := strconv.ParseInt(p, 10, 32)
		f, err2 := strconv.ParseInt(from, 10, 64)
		t := int64(-1)
		var err3 error
		if to != "" {
			t, err3 = strconv.ParseInt(to, 10, 64)
		}
		if !ok1 || !ok2 || err1 != nil || err2 != nil || err3 != nil || part < 0 || f < 0 || (to != "" && t < f) {
			return nil, fmt.Errorf("-offsets %q: want P:FROM-TO (TO may be empty for the end), FROM <= TO", item)
		}
		if seen[int32(part)] {
			return nil, fmt.Errorf("-offsets: partition %d named twice", part)
		}
		seen[int32(part)] = true
		out = append(out, &imv1.ReplayRange{Partition: int32(part), FromOffset: f, ToOffset: t})
	}
	return out, nil
}

// parseTime reads RFC 3339 or Unix milliseconds; "" is 0 (unset).
func parseTime(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil && ms > 0 {
		return ms, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, fmt.Errorf("%q: want RFC 3339 (2006-01-02T15:04:05Z) or Unix milliseconds", s)
	}
	return t.UnixMilli(), nil
}

// parseRetention reads a Go duration, Nd (days) or forever (0).
func parseRetention(s string) (time.Duration, error) {
	switch s {
	case "forever", "-1", "0":
		return 0, nil
	}
	if d, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(d)
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("%q: want a positive number of days", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%q: want a positive duration (168h, 7d) or forever", s)
	}
	return d, nil
}

// definitions opens the replay definitions of the deployment o names,
// returning its brokers too.
func (o opsFlags) definitions() ([]string, *replay.Definitions, error) {
	brokers, err := o.brokerList()
	if err != nil {
		return nil, nil, err
	}
	defs, err := replay.OpenDefinitions(brokers, o.prefix)
	return brokers, defs, err
}
