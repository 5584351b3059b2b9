package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/deadletter"
	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// HeaderRedrivenFrom marks a record re-produced by `seqflow dlq redrive`:
// "<dead-letter topic>/<partition>/<offset>" of the dead letter it came
// from. A record redriven twice carries the header twice.
const HeaderRedrivenFrom = "seqflow-redriven-from"

// dlqLine is one dead letter in `seqflow dlq list`.
type dlqLine struct {
	Partition         int32             `json:"partition"`
	Offset            int64             `json:"offset"`
	DeadLetteredAt    time.Time         `json:"dead_lettered_at"`
	Code              string            `json:"code"`
	Reason            string            `json:"reason"`
	Service           string            `json:"service"`
	OriginalTopic     string            `json:"original_topic"`
	OriginalPartition int32             `json:"original_partition"`
	OriginalOffset    int64             `json:"original_offset"`
	Key               string            `json:"key"`
	ValueBytes        int               `json:"value_bytes"`
	Headers           map[string]string `json:"headers,omitempty"`
	// KeyBytes is the key when it is not valid UTF-8, which Key (a JSON
	// string, with U+FFFD for each invalid byte) cannot show as it is.
	KeyBytes []byte `json:"key_bytes,omitempty"`
	// BinaryHeaders are the headers whose key or value is not valid UTF-8,
	// as they are; Headers shows them with U+FFFD.
	BinaryHeaders []dlqHeader `json:"binary_headers,omitempty"`
}

// dlqHeader is one original header, byte for byte (base64 in JSON).
type dlqHeader struct {
	Key   []byte `json:"key"`
	Value []byte `json:"value"`
}

func runDLQ(ctx context.Context, args []string) error { return dlqCmd(ctx, args, os.Stdout) }

func dlqCmd(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: seqflow dlq list [-n N] [-from start|end] | seqflow dlq redrive -offset O [-partition P] [-dry-run]")
	}
	switch args[0] {
	case "list":
		return dlqList(ctx, args[1:], out)
	case "redrive":
		return dlqRedrive(ctx, args[1:], out)
	}
	return fmt.Errorf("dlq %q: want list or redrive", args[0])
}

func dlqList(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("dlq list", flag.ContinueOnError)
	var o opsFlags
	o.register(fs)
	n := fs.Int("n", 20, "how many dead letters to print per partition (the topic has one)")
	from := fs.String("from", "end", "start: the oldest n; end: the newest n")
	asJSON := fs.Bool("json", false, "print JSON lines instead of a table")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *from != "start" && *from != "end" {
		return fmt.Errorf("-from %q: want start or end", *from)
	}
	if *n <= 0 {
		return fmt.Errorf("-n %d: want a positive count", *n)
	}
	cl, err := o.client("seqflow-ops")
	if err != nil {
		return err
	}
	defer cl.Close()
	topic := eventlog.Names(o.prefix).DeadLetter
	start, stable, err := committedRange(ctx, kadm.NewClient(cl), topic)
	if err != nil {
		return err
	}
	lines, err := readDeadLetters(ctx, &o, topic, start, stable, *n, *from == "end")
	if err != nil {
		return err
	}
	return printDeadLetters(out, lines, *asJSON)
}

// committedRange returns each partition's first offset and last stable
// offset.
func committedRange(ctx context.Context, adm *kadm.Client, topic string) (start, stable map[int32]int64, err error) {
	ls, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return nil, nil, fmt.Errorf("list start offsets of %s: %w", topic, err)
	}
	if start, err = offsetsOf(ls, topic); err != nil {
		return nil, nil, err
	}
	lc, err := adm.ListCommittedOffsets(ctx, topic)
	if err != nil {
		return nil, nil, fmt.Errorf("list stable offsets of %s: %w", topic, err)
	}
	if stable, err = offsetsOf(lc, topic); err != nil {
		return nil, nil, err
	}
	return start, stable, nil
}

// readDeadLetters returns the oldest n dead letters of each partition, or
// the newest n when newest is set, in partition and offset order.
// Transaction markers take offsets too, so reading the newest widens the
// window from the end until it holds n dead letters or reaches the start.
func readDeadLetters(ctx context.Context, o *opsFlags, topic string, start, stable map[int32]int64, n int, newest bool) ([]dlqLine, error) {
	var all []dlqLine
	got := map[int32]int{}
	collect := func(from map[int32]int64, limit int) error {
		all, got = all[:0], map[int32]int{}
		return readCommitted(ctx, o, topic, from, stable, func(r *kgo.Record) bool {
			if limit > 0 && got[r.Partition] >= limit {
				return true
			}
			all = append(all, deadLetterLine(r))
			got[r.Partition]++
			full := limit > 0
			for p := range stable {
				full = full && got[p] >= limit
			}
			return !full
		})
	}
	if !newest {
		if err := collect(start, n); err != nil {
			return nil, err
		}
		sortLines(all)
		return all, nil
	}
	for window := int64(n); ; window *= 4 {
		from := map[int32]int64{}
		for p, end := range stable {
			from[p] = max(start[p], end-window)
		}
		if err := collect(from, 0); err != nil {
			return nil, err
		}
		enough := true
		for p := range stable {
			enough = enough && (got[p] >= n || from[p] == start[p])
		}
		if enough {
			break
		}
	}
	sortLines(all)
	var out []dlqLine
	for _, l := range all {
		// Keep the last n of each partition.
		if got[l.Partition] <= n {
			out = append(out, l)
		}
		got[l.Partition]--
	}
	return out, nil
}

func sortLines(ls []dlqLine) {
	sort.Slice(ls, func(i, j int) bool {
		if ls[i].Partition != ls[j].Partition {
			return ls[i].Partition < ls[j].Partition
		}
		return ls[i].Offset < ls[j].Offset
	})
}

func deadLetterLine(r *kgo.Record) dlqLine {
	l := dlqLine{Partition: r.Partition, Offset: r.Offset, DeadLetteredAt: r.Timestamp.UTC(), Key: string(r.Key)}
	dl := &imv1.DeadLetter{}
	if err := proto.Unmarshal(r.Value, dl); err != nil {
		l.Code, l.Reason = "UNDECODABLE", fmt.Sprintf("not a seqflow.im.v1.DeadLetter: %v", err)
		return l
	}
	l.Code, l.Reason, l.Service = dl.Code.String(), dl.Reason, dl.Service
	l.OriginalTopic, l.OriginalPartition, l.OriginalOffset = dl.OriginalTopic, dl.OriginalPartition, dl.OriginalOffset
	l.Key, l.ValueBytes = string(dl.OriginalKey), len(dl.OriginalValue)
	if !utf8.Valid(dl.OriginalKey) {
		l.KeyBytes = dl.OriginalKey
	}
	if dl.DeadLetteredTsMs > 0 {
		l.DeadLetteredAt = time.UnixMilli(dl.DeadLetteredTsMs).UTC()
	}
	for _, h := range dl.OriginalHeaders {
		if l.Headers == nil {
			l.Headers = map[string]string{}
		}
		l.Headers[string(h.Key)] = string(h.Value)
		if !utf8.Valid(h.Key) || !utf8.Valid(h.Value) {
			l.BinaryHeaders = append(l.BinaryHeaders, dlqHeader{Key: h.Key, Value: h.Value})
		}
	}
	return l
}

func printDeadLetters(out io.Writer, lines []dlqLine, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(out)
		for _, l := range lines {
			if err := enc.Encode(l); err != nil {
				return err
			}
		}
		return nil
	}
	if len(lines) == 0 {
		_, err := fmt.Fprintln(out, "no dead letters")
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tOFFSET\tDEAD-LETTERED\tCODE\tSERVICE\tORIGINAL\tKEY\tREASON")
	for _, l := range lines {
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s/%d/%d\t%s\t%s\n", l.Partition, l.Offset, l.DeadLetteredAt.Format(time.RFC3339),
			l.Code, l.Service, l.OriginalTopic, l.OriginalPartition, l.OriginalOffset, strconv.Quote(l.Key), l.Reason)
	}
	return tw.Flush()
}

func dlqRedrive(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("dlq redrive", flag.ContinueOnError)
	var o opsFlags
	o.register(fs)
	offset := fs.Int64("offset", -1, "offset of the dead letter (required; see `seqflow dlq list`)")
	partition := fs.Int("partition", 0, "partition of the dead-letter topic")
	dry := fs.Bool("dry-run", false, "print what would be produced, produce nothing")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *offset < 0 {
		return errors.New("-offset is required (see `seqflow dlq list`)")
	}
	t := eventlog.Names(o.prefix)
	cl, err := o.client("seqflow-ops", eventlog.ProducerOpts()...)
	if err != nil {
		return err
	}
	defer cl.Close()
	p := int32(*partition)
	start, stable, err := committedRange(ctx, kadm.NewClient(cl), t.DeadLetter)
	if err != nil {
		return err
	}
	if _, ok := stable[p]; !ok {
		return fmt.Errorf("%s has no partition %d", t.DeadLetter, p)
	}
	missing := &NoDeadLetterError{Topic: t.DeadLetter, Partition: p, Offset: *offset, Start: start[p], End: stable[p]}
	if *offset < start[p] || *offset >= stable[p] {
		return missing
	}
	var found *kgo.Record
	err = readCommitted(ctx, &o, t.DeadLetter, map[int32]int64{p: *offset}, map[int32]int64{p: *offset + 1}, func(r *kgo.Record) bool {
		found = r
		return false
	})
	if err != nil {
		return err
	}
	if found == nil || found.Offset != *offset {
		return missing
	}
	dl := &imv1.DeadLetter{}
	if err := proto.Unmarshal(found.Value, dl); err != nil {
		return fmt.Errorf("decode dead letter %s/%d/%d: %w", t.DeadLetter, p, *offset, err)
	}
	from := fmt.Sprintf("%s/%d/%d", t.DeadLetter, p, *offset)
	if err := redrivable(dl, o.prefix, from); err != nil {
		return err
	}
	rec := deadletter.Original(dl)
	rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: HeaderRedrivenFrom, Value: []byte(from)})
	if *dry {
		_, err := fmt.Fprintf(out, "dry run: would produce to %s key=%q value_bytes=%d headers=%d (%s %s: %s)\n",
			rec.Topic, rec.Key, len(rec.Value), len(rec.Headers), dl.Service, dl.Code, dl.Reason)
		return err
	}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return fmt.Errorf("produce redriven record to %s: %w", rec.Topic, err)
	}
	_, err = fmt.Fprintf(out, "redriven %s to %s/%d/%d (originally %s/%d/%d)\n", from, rec.Topic, rec.Partition, rec.Offset,
		dl.OriginalTopic, dl.OriginalPartition, dl.OriginalOffset)
	return err
}

// redrivable refuses a dead letter that must not go back where it came
// from.
func redrivable(dl *imv1.DeadLetter, prefix, from string) error {
	t := eventlog.Names(prefix)
	switch dl.OriginalTopic {
	case t.Sequenced:
		return &RedriveRefusedError{OriginalTopic: dl.OriginalTopic, Why: fmt.Sprintf(
			"only the sequencer may write %s: it decides each seq once, inside a Kafka transaction, and a copy produced here "+
				"would be a second event with the same seq in the source of truth. The event is still in the log at %s/%d/%d; "+
				"fix what made %s refuse it (%s: %s), then make %s read it again (restart it if the cause was transient, "+
				"or rebuild the store with `seqflow replay`)",
			t.Sequenced, dl.OriginalTopic, dl.OriginalPartition, dl.OriginalOffset, dl.Service, dl.Code, dl.Reason, dl.Service)}
	case t.DeadLetter:
		return &RedriveRefusedError{OriginalTopic: dl.OriginalTopic, Why: "it is the dead-letter topic itself"}
	case t.Uplink, t.Duplicates, t.Receipts, t.Offline:
		return nil
	}
	if strings.HasSuffix(dl.OriginalTopic, eventlog.TopicSequenced) {
		return &RedriveRefusedError{OriginalTopic: dl.OriginalTopic, Why: "only the sequencer may write a sequenced topic (and this one is not even under this deployment's prefix)"}
	}
	return &RedriveRefusedError{OriginalTopic: dl.OriginalTopic, Why: fmt.Sprintf("not a topic of this deployment (prefix %q); %s came from elsewhere", prefix, from)}
}
