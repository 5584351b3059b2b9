package eventlog

import (
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ClientOpts returns the options every seqflow Kafka client starts from:
// seed brokers and a client ID. Producers add their own durability options;
// see ProducerOpts.
func ClientOpts(brokers []string, clientID string) []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.ClientID(clientID),
	}
}

// ProducerOpts are the durability settings of every seqflow producer:
// acks=all with the idempotent producer (franz-go's default, stated here so
// nobody weakens it by accident), and murmur2 key hashing so that any Kafka
// client (Java, librdkafka, segmentio) maps a session to the same partition.
func ProducerOpts() []kgo.Opt {
	return []kgo.Opt{
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
		kgo.ProducerBatchCompression(kgo.Lz4Compression(), kgo.NoCompression()),
	}
}

// SplitBrokers parses a comma-separated broker list.
func SplitBrokers(s string) []string {
	var out []string
	for _, b := range strings.Split(s, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}
