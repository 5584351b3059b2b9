// Package deadletter turns a record a consumer can never process into its
// dead letter on im.deadletter.v1, and a dead letter back into the record:
// the DeadLetter carries the original key, value and headers byte for
// byte, so it always parses and a redrive reproduces the record.
package deadletter

import (
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/schemas"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// Record returns the dead letter of r, which service refused because of
// why at time at: a record for topic (the deployment's dead-letter topic),
// partition 0, keyed by r's key, with r's traceparent.
//
// Every byte of r goes into a bytes field, and the strings (reason,
// service, the topic's name) are made valid UTF-8, invalid bytes becoming
// U+FFFD: a string that is not UTF-8 is the one thing proto.Marshal refuses
// in a message like this one, so it cannot fail. A caller still returns the
// error, and commits nothing past r.
func Record(topic, service string, r *kgo.Record, why *Error, at time.Time) (*kgo.Record, error) {
	dl := &imv1.DeadLetter{
		Code: why.Code, Reason: text(why.Reason), Service: text(service),
		OriginalTopic: text(r.Topic), OriginalPartition: r.Partition, OriginalOffset: r.Offset,
		OriginalKey: r.Key, OriginalValue: r.Value, OriginalTsMs: r.Timestamp.UnixMilli(), DeadLetteredTsMs: at.UnixMilli(),
	}
	if len(r.Headers) > 0 {
		dl.OriginalHeaders = make([]*imv1.Header, len(r.Headers))
		for i, h := range r.Headers {
			dl.OriginalHeaders[i] = &imv1.Header{Key: []byte(h.Key), Value: h.Value}
		}
	}
	v, err := proto.Marshal(dl)
	if err != nil {
		return nil, fmt.Errorf("marshal dead letter of %s/%d/%d: %w", r.Topic, r.Partition, r.Offset, err)
	}
	return &kgo.Record{
		Topic: topic, Partition: 0, Key: r.Key, Value: v, Timestamp: at,
		Headers: eventlog.Headers("dead_letter", "seqflow.im.v1.DeadLetter", service, eventlog.Header(r, schemas.HeaderTraceparent)),
	}, nil
}

// text is s as valid UTF-8; it does not copy a valid s.
func text(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

// Original returns the record dl was made from, as a producer sends it
// again: its topic, key, value and headers, byte for byte. The partition
// and timestamp are left to the producer (the key partitioner puts it on
// its original partition when the partition count is unchanged).
func Original(dl *imv1.DeadLetter) *kgo.Record {
	r := &kgo.Record{Topic: dl.OriginalTopic, Key: dl.OriginalKey, Value: dl.OriginalValue}
	if len(dl.OriginalHeaders) > 0 {
		r.Headers = make([]kgo.RecordHeader, len(dl.OriginalHeaders))
		for i, h := range dl.OriginalHeaders {
			r.Headers[i] = kgo.RecordHeader{Key: string(h.Key), Value: h.Value}
		}
	}
	return r
}
