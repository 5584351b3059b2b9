package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seqflow/seqflow/internal/eventlog"
)

// lagRow is one partition of one group in `seqflow lag`.
type lagRow struct {
	Group     string `json:"group"`
	State     string `json:"state"`
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Committed is the group's committed offset, -1 when it has none.
	Committed int64 `json:"committed"`
	// End is the last stable offset: the end a read_committed consumer
	// can reach. HighWatermark is past it by any open transaction.
	End           int64 `json:"end"`
	HighWatermark int64 `json:"high_watermark"`
	// OffsetLag is End minus the committed offset (or minus the start when
	// nothing is committed). Lag counts only the records in that range: a
	// transactional topic has a commit marker after each transaction, so a
	// caught-up consumer of im.sequenced.v1 can be one offset behind with
	// nothing left to read. Lag equals OffsetLag when the range was too
	// long to count (above -count-below).
	OffsetLag int64  `json:"offset_lag"`
	Lag       int64  `json:"lag"`
	Counted   bool   `json:"counted"`
	Member    string `json:"member,omitempty"`
	Err       string `json:"error,omitempty"`
}

// countRecords replaces the offset lag of rows whose offset lag is in
// (0, below] by the number of committed records in the range.
func countRecords(ctx context.Context, o *opsFlags, rows []lagRow, below int64) error {
	byTopic := map[string][]int{}
	for i, r := range rows {
		if r.Err == "" && r.OffsetLag > 0 && r.OffsetLag <= below {
			byTopic[r.Topic] = append(byTopic[r.Topic], i)
		}
	}
	for topic, idx := range byTopic {
		// Two groups may lag on the same partition from different offsets:
		// read from the lowest and count each row's range.
		from, until := map[int32]int64{}, map[int32]int64{}
		for _, i := range idx {
			r := rows[i]
			lo := r.End - r.OffsetLag
			if f, ok := from[r.Partition]; !ok || lo < f {
				from[r.Partition] = lo
			}
			until[r.Partition] = max(until[r.Partition], r.End)
		}
		var offsets []*kgo.Record
		if err := readCommitted(ctx, o, topic, from, until, func(r *kgo.Record) bool {
			offsets = append(offsets, &kgo.Record{Partition: r.Partition, Offset: r.Offset})
			return true
		}); err != nil {
			return err
		}
		for _, i := range idx {
			r := &rows[i]
			r.Lag, r.Counted = 0, true
			for _, rec := range offsets {
				if rec.Partition == r.Partition && rec.Offset >= r.End-r.OffsetLag && rec.Offset < r.End {
					r.Lag++
				}
			}
		}
	}
	return nil
}

func runLag(ctx context.Context, args []string) error { return lagCmd(ctx, args, os.Stdout) }

// lagCmd prints, per consumer group, topic and partition, the committed
// offset, the end offset and the lag. Without -group it shows every group
// that consumes (or committed offsets on) a topic of the deployment.
func lagCmd(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("lag", flag.ContinueOnError)
	var o opsFlags
	o.register(fs)
	var groups stringList
	fs.Var(&groups, "group", "consumer group (repeatable; default: every group reading a topic of this prefix)")
	asJSON := fs.Bool("json", false, "print JSON lines instead of a table")
	maxLag := fs.Int64("max-lag", -1, "exit with status 1 when any partition's lag is above this (-1 = never); `-max-lag 0` checks a drain")
	countBelow := fs.Int64("count-below", 10000, "count the records of offset ranges up to this long (transaction markers take offsets but are no lag)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cl, err := o.client("seqflow-ops")
	if err != nil {
		return err
	}
	defer cl.Close()
	rows, err := groupLag(ctx, kadm.NewClient(cl), eventlog.Names(o.prefix), groups)
	if err != nil {
		return err
	}
	if err := countRecords(ctx, &o, rows, *countBelow); err != nil {
		return err
	}
	if err := printLag(out, rows, *asJSON); err != nil {
		return err
	}
	var over []string
	for _, r := range rows {
		if r.Err != "" {
			over = append(over, fmt.Sprintf("%s %s/%d: %s", r.Group, r.Topic, r.Partition, r.Err))
		} else if *maxLag >= 0 && r.Lag > *maxLag {
			over = append(over, fmt.Sprintf("%s %s/%d: lag %d", r.Group, r.Topic, r.Partition, r.Lag))
		}
	}
	if len(over) > 0 {
		return &LagError{MaxLag: *maxLag, Partitions: over}
	}
	return nil
}

// groupLag computes the rows for groups, or for every group that touches
// a topic of t when groups is empty.
func groupLag(ctx context.Context, adm *kadm.Client, t eventlog.Topics, groups []string) ([]lagRow, error) {
	ours := map[string]bool{t.Uplink: true, t.Sequenced: true, t.Duplicates: true, t.Receipts: true, t.Offline: true, t.DeadLetter: true}
	explicit := len(groups) > 0
	if !explicit {
		listed, err := adm.ListGroups(ctx)
		if err != nil {
			return nil, fmt.Errorf("list groups: %w", err)
		}
		groups = listed.Groups()
	}
	if len(groups) == 0 {
		return nil, nil
	}
	described, err := adm.DescribeGroups(ctx, groups...)
	if err != nil {
		return nil, fmt.Errorf("describe groups: %w", err)
	}
	fetched := adm.FetchManyOffsets(ctx, groups...)
	var rows []lagRow
	topics := kadm.TopicsSet{}
	keep := map[string]bool{}
	for _, g := range groups {
		d, ok := described[g]
		switch {
		case !ok || d.Err != nil:
			if explicit {
				rows = append(rows, lagRow{Group: g, Committed: -1, Partition: -1, Err: fmt.Sprint("describe: ", d.Err)})
			}
			continue
		case fetched[g].Err != nil:
			if explicit {
				rows = append(rows, lagRow{Group: g, State: d.State, Committed: -1, Partition: -1, Err: fmt.Sprint("fetch offsets: ", fetched[g].Err)})
			}
			continue
		}
		touched := d.AssignedPartitions()
		touched.Merge(fetched[g].CommittedPartitions())
		if explicit && len(touched) == 0 {
			rows = append(rows, lagRow{Group: g, State: d.State, Committed: -1, Partition: -1, Err: "no members and no committed offsets"})
			continue
		}
		for _, tp := range touched.Topics() {
			if explicit || ours[tp] {
				keep[g] = true
			}
		}
		if keep[g] {
			topics.Merge(touched)
		}
	}
	if len(keep) == 0 {
		return rows, nil
	}
	names := topics.Topics()
	start, err := adm.ListStartOffsets(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("list start offsets: %w", err)
	}
	stable, err := adm.ListCommittedOffsets(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("list stable offsets: %w", err)
	}
	hwm, err := adm.ListEndOffsets(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("list end offsets: %w", err)
	}
	for g := range keep {
		d := described[g]
		lag := kadm.CalculateGroupLagWithStartOffsets(d, fetched[g].Fetched, start, stable)
		for topic, ps := range lag {
			if !explicit && !ours[topic] {
				continue
			}
			for p, l := range ps {
				r := lagRow{Group: g, State: d.State, Topic: topic, Partition: p,
					Committed: l.Commit.At, End: l.End.Offset, OffsetLag: l.Lag, Lag: l.Lag}
				if h, ok := hwm.Lookup(topic, p); ok {
					r.HighWatermark = h.Offset
				}
				if l.Member != nil {
					r.Member = l.Member.ClientID + "@" + l.Member.ClientHost
				}
				if l.Err != nil {
					r.Err = l.Err.Error()
				}
				rows = append(rows, r)
			}
		}
	}
	sort.Slice(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		if a.Group != b.Group {
			return a.Group < b.Group
		}
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		return a.Partition < b.Partition
	})
	return rows, nil
}

func printLag(out io.Writer, rows []lagRow, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(out)
		for _, r := range rows {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	}
	if len(rows) == 0 {
		_, err := fmt.Fprintln(out, "no consumer groups on these topics")
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tSTATE\tTOPIC\tPARTITION\tCOMMITTED\tEND\tLAG\tOFFSET-LAG\tMEMBER")
	total := map[string]int64{}
	for _, r := range rows {
		lag := fmt.Sprint(r.Lag)
		if r.Err != "" {
			lag = "error: " + r.Err
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\t%d\t%s\n", r.Group, r.State, r.Topic, r.Partition, r.Committed, r.End, lag, r.OffsetLag, r.Member)
		if r.Lag > 0 {
			total[r.Group] += r.Lag
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	gs := make([]string, 0, len(total))
	for g := range total {
		gs = append(gs, g)
	}
	sort.Strings(gs)
	for _, g := range gs {
		fmt.Fprintf(out, "total lag %s: %d\n", g, total[g])
	}
	return nil
}

// stringList is a repeatable, comma-separable string flag.
type stringList []string

func (s *stringList) String() string { return strings.Join(*s, ",") }

func (s *stringList) Set(v string) error {
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*s = append(*s, p)
		}
	}
	return nil
}
