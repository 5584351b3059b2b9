package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seqflow/seqflow/internal/config"
	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/schemas"
)

func runTap(ctx context.Context, args []string) error { return tap(ctx, os.Stdout, args) }

// tapCommitTimeout bounds the offset commit after a batch is written; it
// runs even when ctx was cancelled meanwhile, so an interrupt does not
// throw away the commit of what was already printed.
const tapCommitTimeout = 10 * time.Second

// tapSessionTimeout is the group session timeout of `tap -group`: a tap
// killed without leaving its group holds its partitions this long before
// a restarted one gets them back.
const tapSessionTimeout = 10 * time.Second

// tapFetchMaxWait is how long the broker may hold a fetch that finds
// nothing (franz-go's default: 5s). A read_committed fetch starting
// inside a transaction's batch, where a group resumes after a commit,
// came back empty only after the whole wait, and the next fetch brought
// the records (TestTapGroup against the local stack: every resumed run
// started 5s late, past a 5s -idle-exit). A tap is one reader, so
// asking the broker more often costs nothing that matters.
const tapFetchMaxWait = time.Second

// tap prints the committed records of one topic, each decoded by its
// schema (tap_schema.go), in one of the formats of tap_format.go. It reads
// with isolation level read_committed: records of aborted transactions
// never show.
//
// Without -group it reads from -from and remembers nothing. With -group
// NAME it consumes as a member of consumer group NAME: partitions are
// shared with the group's other members, -from applies only to partitions
// the group has no committed offset for, and it commits offsets itself,
// synchronously, after each batch of records has been written to out and
// flushed, never before (records skipped by -session or -type count as
// handled). So a tap stopped in any way resumes, in the same group, after
// the last record it committed: after a clean stop (interrupt, -n,
// -idle-exit) that is the last record it printed; after a crash (kill -9,
// a write error) the records printed since the last commit come again.
// The output is at least once, never with a gap. Rebalances wait while a
// batch is written and committed (kgo.BlockRebalanceOnPoll), so a commit
// never lands for a partition that moved to another member.
func tap(ctx context.Context, out io.Writer, args []string) error {
	fs := flag.NewFlagSet("tap", flag.ContinueOnError)
	topic := fs.String("topic", eventlog.TopicSequenced, "topic to read (without prefix): a seqflow topic (im.sequenced.v1, im.receipts.v1, ...) or any topic whose records carry a seqflow-schema header")
	prefix := fs.String("topic-prefix", os.Getenv("SEQFLOW_TOPIC_PREFIX"), "topic name prefix")
	from := fs.String("from", "end", "where to start: start, end, an RFC 3339 time, offset:N (every partition) or offset:P=N,P=N (only those partitions; not with -group); with -group only where the group has no committed offset")
	group := fs.String("group", "", "consume in this consumer group, committing offsets after the output is written, and resume where it stopped (default: no group, nothing remembered)")
	format := fs.String("format", formatJSON, "output: json (JSON lines, bodies as text when they are text), protojson (protobuf's JSON of each message, as a google.protobuf.Any) or raw (each value preceded by its varint length)")
	session := fs.String("session", "", "only this session")
	typ := fs.String("type", "", "only this event type (message, membership, read_receipt, ...)")
	limit := fs.Int("n", 0, "stop after n events (0 = run until interrupted)")
	idle := fs.Duration("idle-exit", 0, "exit after this long without events (0 = never); with -group counted from the group join")
	keys := fs.Bool("keys", false, "open sealed bodies with the key store (SEQFLOW_PG_URL, SEQFLOW_KEK): plaintext, or [erased] once the key was destroyed (docs/erasure.md)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var opener *tapKeys
	if *keys {
		var err error
		if opener, err = openTapKeys(ctx); err != nil {
			return err
		}
		defer opener.Close()
	}
	encode, ok := tapFormats[*format]
	if !ok {
		return fmt.Errorf("-format %q: want json, protojson or raw", *format)
	}
	offset, parts, err := tapStart(*from)
	if err != nil {
		return err
	}
	if *group != "" && parts != nil {
		return fmt.Errorf("-from %s names partitions, which a consumer group assigns itself: use offset:N, a time, start or end with -group", *from)
	}
	st := config.LoadLocal()
	if len(st.KafkaBrokers) == 0 {
		return fmt.Errorf("no Kafka brokers: set SEQFLOW_KAFKA_BROKERS or run `go tool task up`")
	}
	consume := kgo.ConsumeTopics(*prefix + *topic)
	if parts != nil {
		consume = kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{*prefix + *topic: parts})
	}
	opts := append(eventlog.ClientOpts(st.KafkaBrokers, "seqflow-tap"),
		consume, kgo.ConsumeResetOffset(offset), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(tapFetchMaxWait))
	// joined is when the tap first had its partitions: at once without a
	// group, after the join with one. -idle-exit counts from then, so the
	// time a join takes is never taken for a quiet topic.
	var joined atomic.Int64
	if *group != "" {
		opts = append(opts, kgo.ConsumerGroup(*group), kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(),
			kgo.SessionTimeout(tapSessionTimeout), kgo.HeartbeatInterval(eventlog.HeartbeatInterval(tapSessionTimeout)),
			kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) {
				joined.CompareAndSwap(0, time.Now().UnixNano())
			}))
	} else {
		joined.Store(time.Now().UnixNano())
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	// Closing leaves the group, a rebalance that BlockRebalanceOnPoll
	// would hold up after a poll that returned early (interrupt, -idle-exit).
	defer cl.CloseAllowingRebalance()

	w := bufio.NewWriter(out)
	var buf []byte
	n := 0
	last := time.Now() // of the last record
	for {
		pctx, cancel := ctx, context.CancelFunc(func() {})
		if *idle > 0 {
			wait := *idle
			if j := joined.Load(); j != 0 {
				from := time.Unix(0, j)
				if last.After(from) {
					from = last
				}
				if wait -= time.Since(from); wait <= 0 {
					return nil
				}
			}
			pctx, cancel = context.WithTimeout(ctx, wait)
		}
		fetches := cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if fetches.NumRecords() > 0 {
			last = time.Now()
		}
		for _, fe := range fetches.Errors() {
			if !errors.Is(fe.Err, context.DeadlineExceeded) {
				return fmt.Errorf("fetch %s/%d: %w", fe.Topic, fe.Partition, fe.Err)
			}
		}
		var handled []*kgo.Record
		done := false
		for it := fetches.RecordIter(); !it.Done() && !done; {
			r := it.Next()
			handled = append(handled, r)
			if *session != "" && string(r.Key) != *session {
				continue
			}
			if *typ != "" && eventlog.Header(r, schemas.HeaderEventType) != *typ {
				continue
			}
			mt, schemaErr := recordSchema(*topic, r)
			if opener != nil {
				if r, err = opener.open(ctx, r, mt); err != nil {
					return err
				}
			}
			buf, err = encode(buf[:0], r, mt, schemaErr)
			if skip := (*skipError)(nil); errors.As(err, &skip) {
				fmt.Fprintf(os.Stderr, "skip %s/%d@%d: %v\n", r.Topic, r.Partition, r.Offset, skip.why)
				continue
			}
			if _, err := w.Write(buf); err != nil {
				return fmt.Errorf("write output: %w", err)
			}
			n++
			done = *limit > 0 && n >= *limit
		}
		if err := w.Flush(); err != nil {
			return fmt.Errorf("write output: %w", err)
		}
		if *group != "" {
			if err := commitTapped(ctx, cl, handled); err != nil {
				return err
			}
			cl.AllowRebalance()
		}
		if done {
			return nil
		}
	}
}

// commitTapped commits the offsets past records, which are written.
func commitTapped(ctx context.Context, cl *kgo.Client, records []*kgo.Record) error {
	if len(records) == 0 {
		return nil
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tapCommitTimeout)
	defer cancel()
	if err := cl.CommitRecords(cctx, slices.Clip(records)...); err != nil {
		return fmt.Errorf("commit offsets: %w", err)
	}
	return nil
}

// tapStart parses -from: the reset offset for every partition, or (for
// offset:P=N,...) the exact start of each listed partition.
func tapStart(from string) (kgo.Offset, map[int32]kgo.Offset, error) {
	switch from {
	case "start":
		return kgo.NewOffset().AtStart(), nil, nil
	case "end":
		return kgo.NewOffset().AtEnd(), nil, nil
	}
	if spec, ok := strings.CutPrefix(from, "offset:"); ok {
		if n, err := strconv.ParseInt(spec, 10, 64); err == nil && n >= 0 {
			return kgo.NewOffset().At(n), nil, nil
		}
		parts := map[int32]kgo.Offset{}
		for _, kv := range strings.Split(spec, ",") {
			p, n, ok := strings.Cut(kv, "=")
			pi, perr := strconv.ParseInt(p, 10, 32)
			ni, nerr := strconv.ParseInt(n, 10, 64)
			if !ok || perr != nil || nerr != nil || pi < 0 || ni < 0 {
				return kgo.Offset{}, nil, fmt.Errorf("-from %q: want offset:N or offset:P=N,P=N with non-negative numbers", from)
			}
			parts[int32(pi)] = kgo.NewOffset().At(ni)
		}
		return kgo.NewOffset().AtStart(), parts, nil
	}
	t, err := time.Parse(time.RFC3339, from)
	if err != nil {
		return kgo.Offset{}, nil, fmt.Errorf("-from %q: want start, end, an RFC 3339 time, offset:N or offset:P=N,...", from)
	}
	return kgo.NewOffset().AfterMilli(t.UnixMilli()), nil, nil
}
