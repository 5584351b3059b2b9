package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/seqflow/seqflow/internal/eventlog"
)

// shownConfigs are printed for every topic besides those its Spec sets.
var shownConfigs = []string{"cleanup.policy", "retention.ms", "retention.bytes", "min.insync.replicas", "max.message.bytes"}

// topicInfo is one topic in `seqflow topics`.
type topicInfo struct {
	Name    string `json:"name"`
	Exists  bool   `json:"exists"`
	Replica int    `json:"replication"`
	// MinISR is the smallest in-sync replica set of any partition.
	MinISR          int               `json:"min_isr"`
	UnderReplicated int               `json:"under_replicated"`
	Leaderless      int               `json:"leaderless"`
	Configs         map[string]string `json:"configs"`
	Want            map[string]string `json:"want"`
	// Per partition, by index: first offset, last stable offset, high
	// watermark.
	Start  []int64  `json:"start_offsets"`
	Stable []int64  `json:"stable_offsets"`
	End    []int64  `json:"end_offsets"`
	Issues []string `json:"problems,omitempty"`
}

func (t *topicInfo) partitions() int { return len(t.End) }

func runTopics(ctx context.Context, args []string) error { return topicsCmd(ctx, args, os.Stdout) }

// topicsCmd describes every topic of eventlog.Specs and reports where the
// cluster differs from the definitions.
func topicsCmd(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("topics", flag.ContinueOnError)
	var o opsFlags
	o.register(fs)
	asJSON := fs.Bool("json", false, "print one JSON object per topic instead of text")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cl, err := o.client("seqflow-ops")
	if err != nil {
		return err
	}
	defer cl.Close()
	t := eventlog.Names(o.prefix)
	infos, err := describeTopics(ctx, kadm.NewClient(cl), eventlog.Specs(t, 0))
	if err != nil {
		return err
	}
	cross := keyedCountProblems(infos, t)
	problems := append([]string{}, cross...)
	for _, ti := range infos {
		for _, p := range ti.Issues {
			problems = append(problems, ti.Name+": "+p)
		}
	}
	if *asJSON {
		enc := json.NewEncoder(out)
		for _, ti := range infos {
			if err := enc.Encode(ti); err != nil {
				return err
			}
		}
	} else {
		printTopics(out, infos, cross)
	}
	if len(problems) > 0 {
		return &TopicProblemsError{Problems: problems}
	}
	return nil
}

func describeTopics(ctx context.Context, adm *kadm.Client, specs []eventlog.Spec) ([]*topicInfo, error) {
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Name
	}
	details, err := adm.ListTopics(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("describe topics: %w", err)
	}
	var existing []string
	infos := make([]*topicInfo, len(specs))
	for i, s := range specs {
		ti := &topicInfo{Name: s.Name, Configs: map[string]string{}, Want: s.Configs}
		infos[i] = ti
		d, ok := details[s.Name]
		if !ok || d.Err != nil {
			ti.Issues = append(ti.Issues, "missing (run `seqflow setup`)")
			continue
		}
		ti.Exists = true
		existing = append(existing, s.Name)
		n := len(d.Partitions)
		ti.Start, ti.Stable, ti.End = make([]int64, n), make([]int64, n), make([]int64, n)
		ti.MinISR = -1
		for _, p := range d.Partitions.Sorted() {
			ti.Replica = max(ti.Replica, len(p.Replicas))
			if ti.MinISR < 0 || len(p.ISR) < ti.MinISR {
				ti.MinISR = len(p.ISR)
			}
			if len(p.ISR) < len(p.Replicas) {
				ti.UnderReplicated++
			}
			if p.Leader < 0 {
				ti.Leaderless++
			}
		}
		if ti.UnderReplicated > 0 {
			ti.Issues = append(ti.Issues, fmt.Sprintf("%d under-replicated partitions", ti.UnderReplicated))
		}
		if ti.Leaderless > 0 {
			ti.Issues = append(ti.Issues, fmt.Sprintf("%d partitions without a leader", ti.Leaderless))
		}
	}
	if len(existing) == 0 {
		return infos, nil
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, existing...)
	if err != nil {
		return nil, fmt.Errorf("describe topic configs: %w", err)
	}
	byName := map[string]*topicInfo{}
	for _, ti := range infos {
		byName[ti.Name] = ti
	}
	for _, rc := range rcs {
		ti := byName[rc.Name]
		if ti == nil {
			continue
		}
		if rc.Err != nil {
			ti.Issues = append(ti.Issues, fmt.Sprintf("describe configs: %v", rc.Err))
			continue
		}
		for _, c := range rc.Configs {
			ti.Configs[c.Key] = c.MaybeValue()
		}
		for k, want := range ti.Want {
			if got := ti.Configs[k]; got != want {
				ti.Issues = append(ti.Issues, fmt.Sprintf("%s=%s, want %s", k, got, want))
			}
		}
		sort.Strings(ti.Issues)
	}
	for _, l := range []struct {
		fn  func(context.Context, ...string) (kadm.ListedOffsets, error)
		dst func(*topicInfo) []int64
	}{
		{adm.ListStartOffsets, func(t *topicInfo) []int64 { return t.Start }},
		{adm.ListCommittedOffsets, func(t *topicInfo) []int64 { return t.Stable }},
		{adm.ListEndOffsets, func(t *topicInfo) []int64 { return t.End }},
	} {
		listed, err := l.fn(ctx, existing...)
		if err != nil {
			return nil, fmt.Errorf("list offsets: %w", err)
		}
		listed.Each(func(o kadm.ListedOffset) {
			ti := byName[o.Topic]
			if ti == nil || o.Partition < 0 || int(o.Partition) >= ti.partitions() {
				return
			}
			if o.Err != nil {
				ti.Issues = append(ti.Issues, fmt.Sprintf("list offsets of partition %d: %v", o.Partition, o.Err))
				return
			}
			l.dst(ti)[o.Partition] = o.Offset
		})
	}
	return infos, nil
}

// keyedCountProblems checks the one cross-topic rule: the sequencer writes
// each event to its uplink's partition number, so uplink, sequenced and
// duplicates must have the same partition count.
func keyedCountProblems(infos []*topicInfo, t eventlog.Topics) []string {
	counts := map[string]int{}
	for _, ti := range infos {
		if ti.Exists {
			counts[ti.Name] = ti.partitions()
		}
	}
	up, ok := counts[t.Uplink]
	if !ok {
		return nil
	}
	var out []string
	for _, name := range []string{t.Sequenced, t.Duplicates} {
		if n, ok := counts[name]; ok && n != up {
			out = append(out, fmt.Sprintf("%s has %d partitions but %s has %d: the sequencer refuses to start", name, n, t.Uplink, up))
		}
	}
	return out
}

func printTopics(out io.Writer, infos []*topicInfo, cross []string) {
	for _, p := range cross {
		fmt.Fprintf(out, "PROBLEM: %s\n\n", p)
	}
	for _, ti := range infos {
		if !ti.Exists {
			fmt.Fprintf(out, "%s  MISSING\n\n", ti.Name)
			continue
		}
		var records int64
		for i := range ti.End {
			records += ti.End[i] - ti.Start[i]
		}
		fmt.Fprintf(out, "%s  partitions=%d replication=%d min_isr=%d under_replicated=%d leaderless=%d offsets_in_log=%d\n",
			ti.Name, ti.partitions(), ti.Replica, ti.MinISR, ti.UnderReplicated, ti.Leaderless, records)
		keys := append([]string{}, shownConfigs...)
		for k := range ti.Want {
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		var cfg []string
		for _, k := range keys {
			s := k + "=" + ti.Configs[k]
			if w, ok := ti.Want[k]; ok && w != ti.Configs[k] {
				s += " (want " + w + ")"
			}
			cfg = append(cfg, s)
		}
		fmt.Fprintf(out, "  configs: %s\n", strings.Join(cfg, " "))
		var ends []string
		for p := range ti.End {
			s := fmt.Sprintf("%d:%d", p, ti.End[p])
			if ti.Stable[p] != ti.End[p] {
				s += fmt.Sprintf("(stable %d)", ti.Stable[p])
			}
			ends = append(ends, s)
		}
		fmt.Fprintf(out, "  end offsets: %s\n", strings.Join(ends, " "))
		for _, p := range ti.Issues {
			fmt.Fprintf(out, "  PROBLEM: %s\n", p)
		}
		fmt.Fprintln(out)
	}
}
