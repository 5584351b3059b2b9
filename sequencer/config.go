package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/seqflow/seqflow/internal/admin"
	"github.com/seqflow/seqflow/internal/config"
	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/groups"
	"github.com/seqflow/seqflow/internal/peerauth"
)

// Config is the sequencer's configuration, read from the environment.
type Config struct {
	// Brokers: SEQFLOW_KAFKA_BROKERS, comma-separated (required).
	Brokers []string
	// PGURL: SEQFLOW_PG_URL (required).
	PGURL string
	// InstanceID: SEQUENCER_INSTANCE_ID, default "<hostname>-<pid>". The
	// transactional ID is "seqflow-sequencer-<InstanceID>": give a restarted
	// instance the same ID so it fences its previous incarnation at once
	// instead of waiting for the transaction timeout.
	InstanceID string
	// StaticMembership: SEQUENCER_STATIC_MEMBERSHIP, default true: join
	// the uplink group as a static member (KIP-345) under InstanceID, so a
	// sequencer that crashed and came back under its ID, or rebuilt its
	// transact session, gets its partitions back at once instead of after
	// the session timeout and a rebalance; an orderly stop still leaves the
	// group (see internal/eventlog/static.go).
	StaticMembership bool
	// Topics: names under SEQFLOW_TOPIC_PREFIX, default no prefix.
	Topics eventlog.Topics
	// Group: SEQUENCER_GROUP, default "seqflow-sequencer".
	Group string
	// Step: SEQUENCER_STEP, seqs reserved per renewal, default 5000 (see
	// README "Gaps": the largest gap a crash leaves in a session).
	Step int
	// DedupWindow: SEQUENCER_DEDUP_WINDOW, default 24h.
	DedupWindow time.Duration
	// DedupMaxEntries: SEQUENCER_DEDUP_MAX_ENTRIES per partition, default
	// 2,000,000 (about 200 MB at most); past it the oldest entries go first.
	DedupMaxEntries int
	// MaxGroupMembers: SEQUENCER_MAX_GROUP_MEMBERS, default 200000: an add
	// or join past it is refused with group_full (internal/groups).
	MaxGroupMembers int
	// GroupSnapshotInterval: SEQUENCER_GROUP_SNAPSHOT_INTERVAL, default 30s;
	// 0 turns snapshots off. At most this often a partition's changed group
	// states are saved to PostgreSQL with the offset they hold for, so a
	// new owner reads only the log after it (README, "Group rules").
	GroupSnapshotInterval time.Duration
	// MaxPollRecords: SEQUENCER_MAX_POLL_RECORDS per transaction, default
	// 5000, at most Step: a transaction then never carries more than a step
	// of one session's messages, so a crash mid-transaction loses at most one
	// step of seqs for any session.
	MaxPollRecords int
	// MergeWait: SEQUENCER_POLL_MERGE_WAIT, default 5ms, at most 1s; 0
	// turns it off. When a poll hands over a fetch that was already
	// buffered (it arrived while the previous transaction ran), the fetch
	// that taking it sends is awaited this long and joined to the batch,
	// so records that arrived during the previous transaction are not held
	// back for one more (see Sequencer.poll).
	MergeWait time.Duration
	// TxnFloor: SEQUENCER_TXN_FLOOR, default 12ms, at most 1s; 0 is off: the
	// least time from one transaction's poll to the next's. Records that
	// come sooner are gathered into the next transaction until then. Each
	// transaction costs the broker about a dozen requests whatever it
	// carries, and the sequencer otherwise commits as often as its loop
	// allows; a floor trades up to its length of ACK latency for fewer,
	// larger transactions at moderate rates (docs/benchmarks.md).
	TxnFloor time.Duration
	// MaxUplinkBytes: SEQUENCER_MAX_UPLINK_BYTES, default 65536; larger uplinks
	// are dead-lettered.
	MaxUplinkBytes int
	// SessionTimeout: SEQUENCER_SESSION_TIMEOUT, default 10s.
	SessionTimeout time.Duration
	// RebalanceTimeout: SEQUENCER_REBALANCE_TIMEOUT, default 30s.
	RebalanceTimeout time.Duration
	// TxnTimeout: SEQUENCER_TXN_TIMEOUT, default 10s; also bounds how long a
	// new owner waits for a dead owner's open transaction.
	TxnTimeout time.Duration
	// LeaseTTL: SEQUENCER_NODE_LEASE_TTL, the snowflake node lease, default 15s.
	LeaseTTL time.Duration
	// MaxClockBackwards: SEQUENCER_MAX_CLOCK_BACKWARDS waited out, default 1s.
	MaxClockBackwards time.Duration
	// AdminAddr: SEQUENCER_ADMIN_ADDR for /metrics, /healthz, /readyz,
	// default 127.0.0.1:9101; empty disables.
	AdminAddr string
	// Admin: the admin port's operator tokens (SEQFLOW_ADMIN_TOKENS_FILE)
	// and pprof (SEQFLOW_ADMIN_PPROF), as in every service: internal/admin.
	Admin admin.Config
	// KafkaDebug: SEQUENCER_KAFKA_DEBUG, franz-go's debug log on stderr,
	// default false.
	KafkaDebug bool
	// OTLPEndpoint: SEQFLOW_OTLP_ENDPOINT, an OTLP/HTTP trace collector
	// ("host:port" or URL), default empty: tracing off.
	OTLPEndpoint string
	// RedisAddrs: SEQFLOW_REDIS_ADDR, comma-separated, default none: where
	// the gateways register their push stream's address. With it (and
	// DirectAck) the sequencer sends each committed seq straight to the
	// sender's gateway; without it ACKs come only through the pusher.
	RedisAddrs []string
	// DirectAck: SEQUENCER_DIRECT_ACK, default true: send direct ACKs
	// when RedisAddrs is set (README, "Direct ACKs").
	DirectAck bool
	// PeerKeys: the key ring direct ACKs are authenticated with, from
	// SEQFLOW_PEER_KEYS_FILE or SEQFLOW_PEER_KEYS (internal/peerauth).
	// Required when direct ACKs are on (RedisAddrs set and DirectAck):
	// without it the sequencer refuses to start, unless
	// SEQFLOW_PEER_AUTH=insecure-none.
	PeerKeys *peerauth.Keyring
	// CommitDelay: SEQUENCER_DEBUG_COMMIT_DELAY, a pause between producing a
	// batch and committing it, default 0. Only for fault tests, which need
	// an instance caught mid-transaction.
	CommitDelay time.Duration
}

// LoadConfig reads Config from env.
func LoadConfig(e *config.Env) (Config, error) {
	host, _ := os.Hostname()
	c := Config{
		Brokers:               e.List("SEQFLOW_KAFKA_BROKERS", nil),
		PGURL:                 e.Required("SEQFLOW_PG_URL"),
		InstanceID:            e.String("SEQUENCER_INSTANCE_ID", fmt.Sprintf("%s-%d", host, os.Getpid())),
		StaticMembership:      e.Bool("SEQUENCER_STATIC_MEMBERSHIP", true),
		Topics:                eventlog.Names(e.String("SEQFLOW_TOPIC_PREFIX", "")),
		Group:                 e.String("SEQUENCER_GROUP", "seqflow-sequencer"),
		Step:                  e.Int("SEQUENCER_STEP", 5000, 1, 1_000_000),
		DedupWindow:           e.Duration("SEQUENCER_DEDUP_WINDOW", 24*time.Hour, time.Second, 30*24*time.Hour),
		DedupMaxEntries:       e.Int("SEQUENCER_DEDUP_MAX_ENTRIES", 2_000_000, 1000, 1<<30),
		MaxGroupMembers:       e.Int("SEQUENCER_MAX_GROUP_MEMBERS", groups.DefaultMaxMembers, 2, 10_000_000),
		GroupSnapshotInterval: e.Duration("SEQUENCER_GROUP_SNAPSHOT_INTERVAL", 30*time.Second, 0, time.Hour),
		MaxPollRecords:        e.Int("SEQUENCER_MAX_POLL_RECORDS", 5000, 1, 1_000_000),
		MergeWait:             e.Duration("SEQUENCER_POLL_MERGE_WAIT", 5*time.Millisecond, 0, time.Second),
		TxnFloor:              e.Duration("SEQUENCER_TXN_FLOOR", 12*time.Millisecond, 0, time.Second),
		MaxUplinkBytes:        e.Int("SEQUENCER_MAX_UPLINK_BYTES", 64<<10, 256, 900<<10),
		SessionTimeout:        e.Duration("SEQUENCER_SESSION_TIMEOUT", 10*time.Second, time.Second, 5*time.Minute),
		RebalanceTimeout:      e.Duration("SEQUENCER_REBALANCE_TIMEOUT", 30*time.Second, time.Second, 10*time.Minute),
		TxnTimeout:            e.Duration("SEQUENCER_TXN_TIMEOUT", 10*time.Second, time.Second, 15*time.Minute),
		LeaseTTL:              e.Duration("SEQUENCER_NODE_LEASE_TTL", 15*time.Second, 3*time.Second, time.Hour),
		MaxClockBackwards:     e.Duration("SEQUENCER_MAX_CLOCK_BACKWARDS", time.Second, 0, time.Minute),
		AdminAddr:             e.Optional("SEQUENCER_ADMIN_ADDR", "127.0.0.1:9101"),
		Admin:                 admin.LoadConfig(e),
		KafkaDebug:            e.Bool("SEQUENCER_KAFKA_DEBUG", false),
		OTLPEndpoint:          e.Optional("SEQFLOW_OTLP_ENDPOINT", ""),
		CommitDelay:           e.Duration("SEQUENCER_DEBUG_COMMIT_DELAY", 0, 0, time.Minute),
		RedisAddrs:            e.List("SEQFLOW_REDIS_ADDR", nil),
		DirectAck:             e.Bool("SEQUENCER_DIRECT_ACK", true),
	}
	if len(c.Brokers) == 0 {
		e.Required("SEQFLOW_KAFKA_BROKERS")
	}
	eventlog.CheckCompression(e)
	peer := peerauth.Settings{
		Auth:     e.Optional("SEQFLOW_PEER_AUTH", ""),
		KeysFile: e.Optional("SEQFLOW_PEER_KEYS_FILE", ""),
		Keys:     e.Optional("SEQFLOW_PEER_KEYS", ""),
	}
	if c.DirectAck && len(c.RedisAddrs) > 0 {
		k, err := peer.Ring()
		if err != nil {
			return c, fmt.Errorf("sequencer config: %w", errors.Join(e.Err(), fmt.Errorf("direct ACKs (SEQFLOW_REDIS_ADDR set, SEQUENCER_DIRECT_ACK=true): %w", err)))
		}
		c.PeerKeys = k
	}
	if c.MaxPollRecords > c.Step {
		err := fmt.Errorf("SEQUENCER_MAX_POLL_RECORDS=%d is above SEQUENCER_STEP=%d: a crash could then leave a gap of more than one step", c.MaxPollRecords, c.Step)
		return c, fmt.Errorf("sequencer config: %w", errors.Join(e.Err(), err))
	}
	if err := e.Err(); err != nil {
		return c, fmt.Errorf("sequencer config: %w", err)
	}
	return c, nil
}

// TransactionalID is the Kafka transactional ID of this instance.
func (c Config) TransactionalID() string { return "seqflow-sequencer-" + c.InstanceID }
