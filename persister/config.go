package main

import (
	"fmt"
	"os"
	"regexp"
	"time"

	"github.com/seqflow/seqflow/internal/admin"
	"github.com/seqflow/seqflow/internal/config"
	"github.com/seqflow/seqflow/internal/eventlog"
)

// Config is the persister's configuration, read from the environment.
type Config struct {
	// Brokers: SEQFLOW_KAFKA_BROKERS, comma-separated (required).
	Brokers []string
	// PGURL: SEQFLOW_PG_URL (required).
	PGURL string
	// Topics: names under SEQFLOW_TOPIC_PREFIX, default no prefix.
	Topics eventlog.Topics
	// Group: PERSISTER_GROUP, the consumer group, default "seqflow-persister".
	Group string
	// InstanceID: PERSISTER_INSTANCE_ID, in the Kafka client ID and logs,
	// default "<hostname>-<pid>".
	InstanceID string
	// StaticMembership: PERSISTER_STATIC_MEMBERSHIP, default true: join
	// the group as a static member (KIP-345) under InstanceID, so a
	// persister that crashed and came back under its ID resumes its
	// partitions at once instead of after the session timeout; an orderly
	// stop still leaves the group (see internal/eventlog/static.go).
	StaticMembership bool
	// Schema: PERSISTER_SCHEMA, the home schema of the store, default
	// "public". Its store_pointer row, when set (seqflow replay -switch),
	// names the schema actually written; see README.md.
	Schema string
	// Migrate: PERSISTER_MIGRATE, apply the embedded migrations to the home
	// schema at start, default true.
	Migrate bool
	// BatchMax: PERSISTER_BATCH_MAX, records per write, default 5000.
	BatchMax int
	// BatchWait: PERSISTER_BATCH_WAIT, how long a batch waits to fill after
	// its first record, default 20ms.
	BatchWait time.Duration
	// FetchWait: PERSISTER_FETCH_WAIT, how long the broker may hold a fetch
	// of the persister until it has FetchMinBytes to return, default 100ms;
	// 0 returns each fetch as soon as anything is there. The persister is
	// off the path of the ACK and of delivery: reading the log in bites of
	// up to this age, instead of one fetch and one database transaction per
	// sequencer transaction, takes most of its and PostgreSQL's CPU off a
	// busy machine (docs/benchmarks.md), and the store trails the log by up
	// to this much more.
	FetchWait time.Duration
	// Writers: PERSISTER_WRITERS, database transactions run in parallel per
	// batch (records shared out by a hash of the key, the session), default 2.
	Writers int
	// WriteTimeout: PERSISTER_WRITE_TIMEOUT, bound of one write attempt,
	// default 30s.
	WriteTimeout time.Duration
	// RetryMin, RetryMax: PERSISTER_RETRY_MIN / PERSISTER_RETRY_MAX, the
	// backoff between write or dead-letter attempts, default 100ms and 5s.
	RetryMin, RetryMax time.Duration
	// SessionTimeout: PERSISTER_SESSION_TIMEOUT, default 10s.
	SessionTimeout time.Duration
	// RebalanceTimeout: PERSISTER_REBALANCE_TIMEOUT, default 60s; a batch
	// stuck retrying longer than this loses its partitions to another member.
	RebalanceTimeout time.Duration
	// AdminAddr: PERSISTER_ADMIN_ADDR for /metrics, /healthz, /readyz,
	// default 127.0.0.1:9102; empty disables.
	AdminAddr string
	// Admin: the admin port's operator tokens (SEQFLOW_ADMIN_TOKENS_FILE)
	// and pprof (SEQFLOW_ADMIN_PPROF), as in every service: internal/admin.
	Admin admin.Config
	// OTLPEndpoint: SEQFLOW_OTLP_ENDPOINT, an OTLP/HTTP trace collector
	// ("host:port" or URL), default empty: tracing off.
	OTLPEndpoint string
	// KafkaDebug: PERSISTER_KAFKA_DEBUG, franz-go's debug log on stderr,
	// default false.
	KafkaDebug bool
	// CommitDelay: PERSISTER_DEBUG_COMMIT_DELAY, a pause between the database
	// commit and the offset commit, default 0. Only for fault tests.
	CommitDelay time.Duration
}

var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// LoadConfig reads Config from e.
func LoadConfig(e *config.Env) (Config, error) {
	host, _ := os.Hostname()
	c := Config{
		Brokers:          e.List("SEQFLOW_KAFKA_BROKERS", nil),
		PGURL:            e.Required("SEQFLOW_PG_URL"),
		Topics:           eventlog.Names(e.String("SEQFLOW_TOPIC_PREFIX", "")),
		Group:            e.String("PERSISTER_GROUP", "seqflow-persister"),
		InstanceID:       e.String("PERSISTER_INSTANCE_ID", fmt.Sprintf("%s-%d", host, os.Getpid())),
		StaticMembership: e.Bool("PERSISTER_STATIC_MEMBERSHIP", true),
		Schema:           e.String("PERSISTER_SCHEMA", "public"),
		Migrate:          e.Bool("PERSISTER_MIGRATE", true),
		BatchMax:         e.Int("PERSISTER_BATCH_MAX", 5000, 1, 100_000),
		BatchWait:        e.Duration("PERSISTER_BATCH_WAIT", 20*time.Millisecond, 0, 10*time.Second),
		FetchWait:        e.Duration("PERSISTER_FETCH_WAIT", 100*time.Millisecond, 0, 10*time.Second),
		Writers:          e.Int("PERSISTER_WRITERS", 2, 1, 64),
		WriteTimeout:     e.Duration("PERSISTER_WRITE_TIMEOUT", 30*time.Second, time.Second, 10*time.Minute),
		RetryMin:         e.Duration("PERSISTER_RETRY_MIN", 100*time.Millisecond, time.Millisecond, time.Minute),
		RetryMax:         e.Duration("PERSISTER_RETRY_MAX", 5*time.Second, time.Millisecond, 10*time.Minute),
		SessionTimeout:   e.Duration("PERSISTER_SESSION_TIMEOUT", 10*time.Second, time.Second, 5*time.Minute),
		RebalanceTimeout: e.Duration("PERSISTER_REBALANCE_TIMEOUT", 60*time.Second, time.Second, 30*time.Minute),
		AdminAddr:        e.Optional("PERSISTER_ADMIN_ADDR", "127.0.0.1:9102"),
		Admin:            admin.LoadConfig(e),
		OTLPEndpoint:     e.Optional("SEQFLOW_OTLP_ENDPOINT", ""),
		KafkaDebug:       e.Bool("PERSISTER_KAFKA_DEBUG", false),
		CommitDelay:      e.Duration("PERSISTER_DEBUG_COMMIT_DELAY", 0, 0, time.Minute),
	}
	if len(c.Brokers) == 0 {
		e.Required("SEQFLOW_KAFKA_BROKERS")
	}
	eventlog.CheckCompression(e)
	err := e.Err()
	if !schemaName.MatchString(c.Schema) {
		err = joinErr(err, fmt.Errorf("PERSISTER_SCHEMA=%q: want a lower-case SQL identifier", c.Schema))
	}
	if c.RetryMin > c.RetryMax {
		err = joinErr(err, fmt.Errorf("PERSISTER_RETRY_MIN %s is above PERSISTER_RETRY_MAX %s", c.RetryMin, c.RetryMax))
	}
	if err != nil {
		return c, fmt.Errorf("persister config: %w", err)
	}
	return c, nil
}

func joinErr(a, b error) error {
	if a == nil {
		return b
	}
	return fmt.Errorf("%w\n%w", a, b)
}

// fetchMinBytes is what a fetch of the persister waits for at the broker,
// up to fetchMaxWait: 1 MiB while FetchWait holds fetches back, else
// anything.
func (c Config) fetchMinBytes() int32 {
	if c.FetchWait > 0 {
		return 1 << 20
	}
	return 1
}

// fetchMaxWait bounds how long the broker holds a fetch: FetchWait, or
// 100ms (franz-go's default is 5s) when FetchWait is 0 and a fetch returns
// as soon as anything is there anyway.
func (c Config) fetchMaxWait() time.Duration {
	if c.FetchWait > 0 {
		return c.FetchWait
	}
	return 100 * time.Millisecond
}
