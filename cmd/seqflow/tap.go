package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/stack"
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

func runTap(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("tap", flag.ContinueOnError)
	topic := fs.String("topic", eventlog.TopicSequenced, "topic to read (without prefix)")
	prefix := fs.String("topic-prefix", os.Getenv("SEQFLOW_TOPIC_PREFIX"), "topic name prefix")
	from := fs.String("from", "end", "where to start: start, end, or an RFC 3339 time")
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
	offset := kgo.NewOffset().AtEnd()
	switch *from {
	case "start":
		offset = kgo.NewOffset().AtStart()
	case "end":
	default:
		t, err := time.Parse(time.RFC3339, *from)
		if err != nil {
			return fmt.Errorf("-from %q: want start, end or an RFC 3339 time", *from)
		}
		offset = kgo.NewOffset().AfterMilli(t.UnixMilli())
	}
	st := stack.Load()
	if len(st.KafkaBrokers) == 0 {
		return fmt.Errorf("no Kafka brokers: set SEQFLOW_KAFKA_BROKERS or run `go tool task up`")
	}
	cl, err := kgo.NewClient(append(eventlog.ClientOpts(st.KafkaBrokers, "seqflow-tap"),
		kgo.ConsumeTopics(*prefix+*topic), kgo.ConsumeResetOffset(offset),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	enc := json.NewEncoder(os.Stdout)
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
			js, _ := protojson.MarshalOptions{UseProtoNames: true}.Marshal(v)
			if err := enc.Encode(tapLine{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Type: et, Event: js}); err != nil {
				return err
			}
			if n++; *limit > 0 && n >= *limit {
				return nil
			}
		}
	}
}
