package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/config"
	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/schemas"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// tapLine is one JSON line of `seqflow tap`.
type tapLine struct {
	Topic     string          `json:"topic"`
	Partition int32           `json:"partition"`
	Offset    int64           `json:"offset"`
	Type      string          `json:"type"`
	Event     json.RawMessage `json:"event"`
}

func runTap(ctx context.Context, args []string) error { return tap(ctx, os.Stdout, args) }

func tap(ctx context.Context, out io.Writer, args []string) error {
	fs := flag.NewFlagSet("tap", flag.ContinueOnError)
	topic := fs.String("topic", eventlog.TopicSequenced, "topic to read (without prefix)")
	prefix := fs.String("topic-prefix", os.Getenv("SEQFLOW_TOPIC_PREFIX"), "topic name prefix")
	from := fs.String("from", "end", "where to start: start, end, an RFC 3339 time, offset:N (every partition) or offset:P=N,P=N (only those partitions)")
	session := fs.String("session", "", "only this session")
	typ := fs.String("type", "", "only this event type (message, membership, ...)")
	limit := fs.Int("n", 0, "stop after n events (0 = run until interrupted)")
	idle := fs.Duration("idle-exit", 0, "exit after this long without events (0 = never)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	newValue, ok := map[string]func() proto.Message{
		eventlog.TopicSequenced:  func() proto.Message { return &imv1.SequencedEvent{} },
		eventlog.TopicUplink:     func() proto.Message { return &imv1.Uplink{} },
		eventlog.TopicDuplicates: func() proto.Message { return &imv1.DuplicateAck{} },
		eventlog.TopicDeadLetter: func() proto.Message { return &imv1.DeadLetter{} },
		eventlog.TopicReceipts:   func() proto.Message { return &imv1.ReadReceipt{} },
		eventlog.TopicOffline:    func() proto.Message { return &imv1.OfflineNotification{} },
	}[*topic]
	if !ok {
		return fmt.Errorf("unknown topic %q", *topic)
	}
	offset, parts, err := tapStart(*from)
	if err != nil {
		return err
	}
	st := config.LoadLocal()
	if len(st.KafkaBrokers) == 0 {
		return fmt.Errorf("no Kafka brokers: set SEQFLOW_KAFKA_BROKERS or run `go tool task up`")
	}
	consume := kgo.ConsumeTopics(*prefix + *topic)
	if parts != nil {
		consume = kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{*prefix + *topic: parts})
	}
	cl, err := kgo.NewClient(append(eventlog.ClientOpts(st.KafkaBrokers, "seqflow-tap"),
		consume, kgo.ConsumeResetOffset(offset),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	enc := json.NewEncoder(out)
	n := 0
	for {
		pctx, cancel := ctx, context.CancelFunc(func() {})
		if *idle > 0 {
			pctx, cancel = context.WithTimeout(ctx, *idle)
		}
		fetches := cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if *idle > 0 && pctx.Err() != nil && fetches.NumRecords() == 0 {
			return nil
		}
		for _, fe := range fetches.Errors() {
			if !errors.Is(fe.Err, context.DeadlineExceeded) {
				return fmt.Errorf("fetch %s/%d: %w", fe.Topic, fe.Partition, fe.Err)
			}
		}
		for it := fetches.RecordIter(); !it.Done(); {
			r := it.Next()
			if *session != "" && string(r.Key) != *session {
				continue
			}
			et := eventlog.Header(r, schemas.HeaderEventType)
			if *typ != "" && et != *typ {
				continue
			}
			v := newValue()
			if err := proto.Unmarshal(r.Value, v); err != nil {
				fmt.Fprintf(os.Stderr, "skip %s/%d@%d: undecodable: %v\n", r.Topic, r.Partition, r.Offset, err)
				continue
			}
			js, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(v)
			if err != nil {
				fmt.Fprintf(os.Stderr, "skip %s/%d@%d: %v\n", r.Topic, r.Partition, r.Offset, err)
				continue
			}
			if err := enc.Encode(tapLine{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Type: et, Event: js}); err != nil {
				return err
			}
			if n++; *limit > 0 && n >= *limit {
				return nil
			}
		}
	}
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
