package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seqflow/seqflow/internal/config"
	"github.com/seqflow/seqflow/internal/eventlog"
)

// opsFlags are the connection flags every operator command shares.
type opsFlags struct {
	brokers, prefix string
}

func (o *opsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&o.brokers, "brokers", "", "Kafka brokers (default SEQFLOW_KAFKA_BROKERS, then .data/local.env)")
	fs.StringVar(&o.prefix, "topic-prefix", os.Getenv("SEQFLOW_TOPIC_PREFIX"), "topic name prefix (default SEQFLOW_TOPIC_PREFIX)")
}

func (o *opsFlags) brokerList() ([]string, error) {
	bs := config.LoadLocal().KafkaBrokers
	if o.brokers != "" {
		bs = eventlog.SplitBrokers(o.brokers)
	}
	if len(bs) == 0 {
		return nil, fmt.Errorf("no Kafka brokers: set SEQFLOW_KAFKA_BROKERS or -brokers, or run `go tool task up`")
	}
	return bs, nil
}

// client opens a Kafka client with extra options; the caller closes it.
func (o *opsFlags) client(clientID string, opts ...kgo.Opt) (*kgo.Client, error) {
	bs, err := o.brokerList()
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append(eventlog.ClientOpts(bs, clientID), opts...)...)
	if err != nil {
		return nil, fmt.Errorf("create Kafka client: %w", err)
	}
	return cl, nil
}

// readCommitted calls fn for every committed data record of topic from the
// offsets in from (partition → first offset) up to, not including, the
// offsets in until. It reads read_committed and keeps control records so
// that it sees the last offset before a last stable offset even when that
// offset is a transaction marker; fn returning false stops the read.
func readCommitted(ctx context.Context, o *opsFlags, topic string, from, until map[int32]int64, fn func(*kgo.Record) bool) error {
	parts := map[int32]kgo.Offset{}
	want := map[int32]int64{}
	for p, start := range from {
		if end := until[p]; start < end {
			parts[p] = kgo.NewOffset().At(start)
			want[p] = end
		}
	}
	if len(parts) == 0 {
		return nil
	}
	cl, err := o.client("seqflow-ops",
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords(),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: parts}))
	if err != nil {
		return err
	}
	defer cl.Close()
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fs.Err0(); err != nil {
			return fmt.Errorf("read %s: %w", topic, err)
		}
		stop := false
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := want[r.Partition]
			switch {
			case !ok:
				return
			case r.Offset >= end: // an aborted record or a marker at end-1 was skipped
				delete(want, r.Partition)
				return
			}
			if !stop && !r.Attrs.IsControl() && !fn(r) {
				stop = true
			}
			if r.Offset >= end-1 {
				delete(want, r.Partition)
			}
		})
		if stop {
			return nil
		}
	}
	return nil
}

// offsetsOf returns partition → offset of one topic in listed, failing on
// the first per-partition error.
func offsetsOf(listed kadm.ListedOffsets, topic string) (map[int32]int64, error) {
	out := map[int32]int64{}
	for p, o := range listed[topic] {
		if o.Err != nil {
			return nil, fmt.Errorf("list offsets of %s/%d: %w", topic, p, o.Err)
		}
		out[p] = o.Offset
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("list offsets of %s: topic not found", topic)
	}
	return out, nil
}
