package eventlog

import (
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seqflow/seqflow/internal/config"
)

// ClientOpts returns the options every seqflow Kafka client starts from:
// seed brokers, a client ID and the failover timing below. Producers add
// their own durability options; see ProducerOpts.
//
// Failover timing: when a broker dies, its partitions and the group and
// transaction coordinators it held move once the controller fences it
// (broker.session.timeout.ms). franz-go's defaults then find the new homes
// late: metadata is refreshed at most every 5s, and a request to a dead
// coordinator backs off up to 5s between retries, so a transaction commit
// could reach the new coordinator seconds after it was ready (chaos runs:
// kafka_txn_coordinator recovery 15-65s). seqflow refreshes metadata at most
// every MetadataMinAge and caps the retry backoff at MaxRetryBackoff, and
// allows more tries so a request still retries about as long as before.
func ClientOpts(brokers []string, clientID string) []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.ClientID(clientID),
		kgo.MetadataMinAge(MetadataMinAge),
		kgo.RetryBackoffFn(RetryBackoff),
		kgo.RequestRetries(60),
	}
}

// MetadataMinAge is the shortest time between two metadata refreshes of a
// seqflow client (franz-go's default: 5s).
const MetadataMinAge = 500 * time.Millisecond

// MaxRetryBackoff caps the wait between two tries of a failed request
// (franz-go's default: 5s).
const MaxRetryBackoff = time.Second

// RetryBackoff is the wait before retry number fails (1-based): 20ms
// doubling up to MaxRetryBackoff, with up to 20% jitter taken off.
//
// The first step is short for transactions: on Kafka 4 (transaction
// version 2) a transactional produce sent right after the previous
// transaction's EndTxn is answered CONCURRENT_TRANSACTIONS until the
// coordinator has written that transaction's markers, a few ms later, and
// franz-go retries such a produce after this backoff. A sequencer starts
// its next transaction at once, so most of them met it: with a first step
// of 100ms the sequencers' produce stage averaged 145 ms at 250 msg/s on
// the three-broker cluster, and every ACK waited for it. 20ms is the
// backoff franz-go and the Java client use for CONCURRENT_TRANSACTIONS on
// their own transaction requests.
func RetryBackoff(fails int) time.Duration {
	d := MaxRetryBackoff
	if fails < 8 {
		d = min(20*time.Millisecond<<max(fails-1, 0), MaxRetryBackoff)
	}
	return d - time.Duration(rand.Int64N(int64(d)/5+1))
}

// ProducerOpts are the durability settings of every seqflow producer:
// acks=all with the idempotent producer (franz-go's default, stated here so
// nobody weakens it by accident), and murmur2 key hashing so that any Kafka
// client (Java, librdkafka, segmentio) maps a session to the same partition.
func ProducerOpts() []kgo.Opt {
	return []kgo.Opt{
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
		Compression(),
	}
}

// Compression is the batch codec of every seqflow producer: snappy. Not
// lz4: franz-go's lz4 reader takes a 4 MiB block buffer for every batch it
// decompresses, and the sequencer writes many small transactional batches,
// so a reader of im.sequenced.v1 spent most of its time on those buffers.
// Under the race detector (the test task) a log audit read 6,962 lz4 events
// in 26.8 s; with snappy sequencer TestChaos reads 22,146 events in 1.9 s
// (its "read log" lines), and the sequencer's dedup-window rebuild on an
// assignment shrank the same way.
//
// SEQFLOW_KAFKA_COMPRESSION (snappy, lz4, zstd or none) overrides it for
// every producer of the process, for experiments. Every service checks the
// value at start (CheckCompression) and refuses any other.
func Compression() kgo.Opt {
	c, ok := codecs[os.Getenv("SEQFLOW_KAFKA_COMPRESSION")]
	if !ok {
		c = codecs[defaultCodec]
	}
	// NoCompression last: the fallback for a broker that refuses the codec.
	return kgo.ProducerBatchCompression(c, kgo.NoCompression())
}

// codecs are the values SEQFLOW_KAFKA_COMPRESSION may take, in the order
// CheckCompression names them.
var (
	defaultCodec = "snappy"
	codecNames   = []string{"snappy", "lz4", "zstd", "none"}
	codecs       = map[string]kgo.CompressionCodec{
		"snappy": kgo.SnappyCompression(), "lz4": kgo.Lz4Compression(),
		"zstd": kgo.ZstdCompression(), "none": kgo.NoCompression(),
	}
)

// CheckCompression records in e an error for a SEQFLOW_KAFKA_COMPRESSION
// that Compression does not know, so a typo in an experiment stops the
// service instead of running it on snappy unnoticed.
func CheckCompression(e *config.Env) {
	e.OneOf("SEQFLOW_KAFKA_COMPRESSION", defaultCodec, codecNames...)
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

// DebugLogPrefix starts each line of a franz-go debug log (the services'
// *_KAFKA_DEBUG settings) with the time, so the log lines up with the
// services' own JSON logs.
func DebugLogPrefix() string {
	return time.Now().UTC().Format("2006-01-02T15:04:05.000000Z ")
}

// HeartbeatInterval is how often a seqflow group member heartbeats, for a
// group session timeout of session: a tenth of it, between 100ms and 1s
// (franz-go's default is 3s). A rebalance completes only once every
// member has rejoined, and a member learns of one from its next
// heartbeat's answer: with 3s, each rebalance after a crash waited up to
// 3s for the survivors to notice. A heartbeat is one small request to the
// group coordinator.
func HeartbeatInterval(session time.Duration) time.Duration {
	return min(max(session/10, 100*time.Millisecond), time.Second)
}
