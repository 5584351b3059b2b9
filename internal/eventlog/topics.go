// Package eventlog is seqflow's view of Kafka: the one definition of every
// topic, creating them idempotently, and the record conventions (key,
// partition, headers) shared by every producer and consumer.
package eventlog

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Topic names. The ".v1" suffix is the schema major version of the values.
const (
	TopicUplink     = "im.uplink.v1"
	TopicSequenced  = "im.sequenced.v1"
	TopicDuplicates = "im.duplicates.v1"
	TopicReceipts   = "im.receipts.v1"
	TopicOffline    = "im.offline.v1"
	TopicDeadLetter = "im.deadletter.v1"
)

// Topics is the set of topic names one deployment uses. A prefix
// (SEQFLOW_TOPIC_PREFIX) lets several deployments, or several integration
// tests, share one Kafka cluster without seeing each other's records.
type Topics struct {
	Uplink, Sequenced, Duplicates, Receipts, Offline, DeadLetter string
}

// Names returns the topic names under prefix ("" for the plain names).
func Names(prefix string) Topics {
	return Topics{
		Uplink: prefix + TopicUplink, Sequenced: prefix + TopicSequenced, Duplicates: prefix + TopicDuplicates,
		Receipts: prefix + TopicReceipts, Offline: prefix + TopicOffline, DeadLetter: prefix + TopicDeadLetter,
	}
}

// DefaultPartitions is the partition count of the keyed topics. It bounds
// sequencer (and persister, pusher) parallelism: one partition is served by
// one consumer at a time. im.uplink.v1 and im.sequenced.v1 must have the same
// count, because the sequencer writes each sequenced event to the partition
// number its uplink came from; the sequencer refuses to start otherwise.
//
// Changing the count later moves sessions between partitions (the key hash
// maps to a different partition). seqflow's seqs stay unique and increasing
// across such a move only if no uplink of a moved session is in flight: see
// docs/operations.md for the drain procedure.
const DefaultPartitions = 12

// Spec is one topic's definition.
type Spec struct {
	Name       string
	Partitions int32
	Configs    map[string]string
}

// Specs returns every topic of t. partitions <= 0 means DefaultPartitions.
//
// Retention: im.sequenced.v1 is the source of truth and keeps everything
// (retention.ms=-1); the uplink topic only needs to outlive the longest
// sequencer outage (7 days); duplicates and offline notifications are
// transient (2 days); dead letters are kept 30 days for inspection and
// re-drive.
func Specs(t Topics, partitions int32) []Spec {
	if partitions <= 0 {
		partitions = DefaultPartitions
	}
	const day = 24 * 3600 * 1000
	ms := func(n int64) string { return strconv.FormatInt(n, 10) }
	return []Spec{
		{t.Uplink, partitions, map[string]string{"retention.ms": ms(7 * day)}},
		{t.Sequenced, partitions, map[string]string{"retention.ms": "-1", "retention.bytes": "-1"}},
		{t.Duplicates, partitions, map[string]string{"retention.ms": ms(2 * day)}},
		{t.Receipts, partitions, map[string]string{"retention.ms": ms(7 * day)}},
		{t.Offline, partitions, map[string]string{"retention.ms": ms(2 * day)}},
		{t.DeadLetter, 1, map[string]string{"retention.ms": ms(30 * day)}},
	}
}

// EnsureTopics creates every topic of specs that does not exist yet and
// checks that existing ones have the expected partition count. It is safe to
// run concurrently and repeatedly.
func EnsureTopics(ctx context.Context, adm *kadm.Client, specs []Spec, rf int16) error {
	if rf <= 0 {
		rf = -1 // broker default
	}
	for _, s := range specs {
		cfg := make(map[string]*string, len(s.Configs))
		for k, v := range s.Configs {
			cfg[k] = kadm.StringPtr(v)
		}
		resp, err := adm.CreateTopic(ctx, s.Partitions, rf, cfg, s.Name)
		if err == nil {
			err = resp.Err
		}
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("create topic %s: %w", s.Name, err)
		}
	}
	// A new topic takes a moment to reach every broker's metadata.
	for _, s := range specs {
		var got int32
		var err error
		for deadline := time.Now().Add(30 * time.Second); ; {
			if got, err = Partitions(ctx, adm, s.Name); err == nil || time.Now().After(deadline) {
				break
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
		if err != nil {
			return err
		}
		if got != s.Partitions {
			return &PartitionMismatchError{Topic: s.Name, Want: s.Partitions, Got: got}
		}
	}
	return nil
}

// PartitionMismatchError says an existing topic has another partition count
// than its definition.
type PartitionMismatchError struct {
	Topic     string
	Want, Got int32
}

func (e *PartitionMismatchError) Error() string {
	return fmt.Sprintf("topic %s has %d partitions, want %d", e.Topic, e.Got, e.Want)
}

// Partitions returns the partition count of topic.
func Partitions(ctx context.Context, adm *kadm.Client, topic string) (int32, error) {
	details, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("describe topic %s: %w", topic, err)
	}
	d, ok := details[topic]
	if !ok || d.Err != nil {
		return 0, fmt.Errorf("describe topic %s: %v", topic, d.Err)
	}
	return int32(len(d.Partitions)), nil
}
