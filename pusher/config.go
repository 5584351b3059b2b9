package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/seqflow/seqflow/internal/admin"
	"github.com/seqflow/seqflow/internal/config"
	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/peerauth"
)

// Config is the pusher's configuration, read from the environment.
type Config struct {
	// Brokers: SEQFLOW_KAFKA_BROKERS, comma-separated (required).
	Brokers []string
	// RedisAddrs: SEQFLOW_REDIS_ADDR, comma-separated; several addresses
	// mean a Redis Cluster (required). Presence is read here, and the redis
	// transport publishes here.
	RedisAddrs []string
	// PGURL: SEQFLOW_PG_URL, optional. When set, a partition's membership
	// is rebuilt from the sequencer's group snapshot (when one holds for an
	// offset at or before where the pusher resumes) and the log after it,
	// instead of the partition's whole history.
	PGURL string
	// Topics: names under SEQFLOW_TOPIC_PREFIX, default no prefix.
	Topics eventlog.Topics
	// Group: PUSHER_GROUP, the consumer group, default "seqflow-pusher".
	Group string
	// InstanceID: PUSHER_INSTANCE_ID, names the Kafka client and, with
	// StaticMembership, the group member; default "<hostname>-<pid>". Give
	// each pusher a stable ID of its own (a pod name) for a restart to find
	// its partitions; two live pushers must never share one.
	InstanceID string
	// StaticMembership: PUSHER_STATIC_MEMBERSHIP, default true: join the
	// group as a static member (KIP-345) under InstanceID, so a pusher
	// that crashed and came back under its ID resumes its partitions at
	// once instead of after the session timeout and two rebalances. An
	// orderly stop still leaves the group (see internal/eventlog/static.go).
	StaticMembership bool
	// OTLPEndpoint: SEQFLOW_OTLP_ENDPOINT, an OTLP/HTTP trace collector
	// ("host:port" or URL), default empty: tracing off.
	OTLPEndpoint string
	// AdminAddr: PUSHER_ADMIN_ADDR for /metrics, /healthz, /readyz, default
	// 127.0.0.1:9104; empty disables it, as for the other services ("off"
	// too, which older configs used), port 0 picks a free port.
	AdminAddr string
	// Admin: the admin port's operator tokens (SEQFLOW_ADMIN_TOKENS_FILE)
	// and pprof (SEQFLOW_ADMIN_PPROF), as in every service: internal/admin.
	Admin admin.Config
	// Transport: PUSHER_TRANSPORT, how batches reach gateways: "auto" (the
	// default: a direct TCP stream to gateways that registered a stream
	// address, Redis sharded pub/sub to the others), "tcp" or "redis"
	// only. See README.md for the measurement behind the choice.
	Transport string
	// PeerKeys: the key ring the pusher proves itself to gateways with and
	// demands of them, from SEQFLOW_PEER_KEYS_FILE or SEQFLOW_PEER_KEYS
	// (internal/peerauth). Required: without it the pusher refuses to
	// start, unless SEQFLOW_PEER_AUTH=insecure-none.
	PeerKeys *peerauth.Keyring
	// ResetOffset: PUSHER_RESET_OFFSET, where a group with no committed
	// offset starts: "end" (the default: a new pusher does not push
	// history) or "start" (tests on fresh topics).
	ResetOffset string
	// SendTimeout: PUSHER_SEND_TIMEOUT, the longest one batch may take to
	// hand to the transport before it is dropped, default 500ms.
	SendTimeout time.Duration
	// QueueDepth: PUSHER_GATEWAY_QUEUE, batches waiting per gateway; when a
	// gateway's queue is full, new batches for it are dropped, default 64.
	QueueDepth int
	// LaneIdle: PUSHER_GATEWAY_IDLE, how long a gateway's sender goroutine
	// lives without batches, default 2m.
	LaneIdle time.Duration
	// MaxPollRecords: PUSHER_MAX_POLL_RECORDS per poll batch, default 5000.
	MaxPollRecords int
	// MaxInflightPolls: PUSHER_MAX_INFLIGHT_POLLS, poll batches handed to
	// gateways but not yet committed; polling waits beyond it, default 16.
	MaxInflightPolls int
	// PresenceTimeout: PUSHER_PRESENCE_TIMEOUT for one poll's presence
	// lookup; past it the poll's pushes are dropped, default 1s.
	PresenceTimeout time.Duration
	// PresenceChunk: PUSHER_PRESENCE_CHUNK, users per presence pipeline,
	// default 1000; chunks run 4 at a time.
	PresenceChunk int
	// PresenceCache: PUSHER_PRESENCE_CACHE, keep presence lookups in memory
	// (offline users too) and drop a user's entry when a gateway announces
	// a change of theirs on presence.ChangesChannel, default true. false:
	// every poll reads every recipient from Redis.
	PresenceCache bool
	// PresenceCacheMaxAge: PUSHER_PRESENCE_CACHE_MAX_AGE, the longest an
	// entry is used without an announcement (a safety net for gateways
	// that do not announce; each entry lasts between half of it and all of
	// it, so a large group is read again over time), default 30s.
	PresenceCacheMaxAge time.Duration
	// PresenceCacheUsers: PUSHER_PRESENCE_CACHE_USERS, the most users the
	// cache holds before it starts over empty, default 1000000.
	PresenceCacheUsers int
	// Offline: PUSHER_OFFLINE_NOTIFY, publish OfflineNotifications to
	// im.offline.v1 for members with no online device, default true.
	Offline bool
	// OfflineMaxMembers: PUSHER_OFFLINE_MAX_MEMBERS, sessions with more
	// members than this get no offline notifications (a mobile-push worker
	// would serve them by topic subscription instead), default 1000; 0: no
	// limit. Each notification is a Kafka record per offline member: one
	// message to a 100,000-member group would be 99,000 of them (README,
	// "Offline notifications").
	OfflineMaxMembers int
	// CommitInterval: PUSHER_COMMIT_INTERVAL, how often handed-off offsets
	// are committed, default 1s. It bounds the window re-pushed after a
	// crash.
	CommitInterval time.Duration
	// ShutdownTimeout: PUSHER_SHUTDOWN_TIMEOUT, how long shutdown and a
	// rebalance wait for handed-off batches before committing, default 5s.
	ShutdownTimeout time.Duration
	// SessionTimeout: PUSHER_SESSION_TIMEOUT, default 10s.
	SessionTimeout time.Duration
	// RebalanceTimeout: PUSHER_REBALANCE_TIMEOUT, default 30s; it must
	// cover the membership replay of newly assigned partitions.
	RebalanceTimeout time.Duration
}

// LoadConfig reads Config from e.
func LoadConfig(e *config.Env) (Config, error) {
	host, _ := os.Hostname()
	c := Config{
		Brokers:             e.List("SEQFLOW_KAFKA_BROKERS", nil),
		RedisAddrs:          e.List("SEQFLOW_REDIS_ADDR", nil),
		PGURL:               e.Optional("SEQFLOW_PG_URL", ""),
		Topics:              eventlog.Names(e.String("SEQFLOW_TOPIC_PREFIX", "")),
		Group:               e.String("PUSHER_GROUP", "seqflow-pusher"),
		InstanceID:          e.String("PUSHER_INSTANCE_ID", fmt.Sprintf("%s-%d", host, os.Getpid())),
		StaticMembership:    e.Bool("PUSHER_STATIC_MEMBERSHIP", true),
		AdminAddr:           e.Optional("PUSHER_ADMIN_ADDR", "127.0.0.1:9104"),
		Admin:               admin.LoadConfig(e),
		OTLPEndpoint:        e.Optional("SEQFLOW_OTLP_ENDPOINT", ""),
		Transport:           e.String("PUSHER_TRANSPORT", "auto"),
		ResetOffset:         e.String("PUSHER_RESET_OFFSET", "end"),
		SendTimeout:         e.Duration("PUSHER_SEND_TIMEOUT", 500*time.Millisecond, time.Millisecond, time.Minute),
		QueueDepth:          e.Int("PUSHER_GATEWAY_QUEUE", 64, 1, 1<<16),
		LaneIdle:            e.Duration("PUSHER_GATEWAY_IDLE", 2*time.Minute, time.Second, 24*time.Hour),
		MaxPollRecords:      e.Int("PUSHER_MAX_POLL_RECORDS", 5000, 1, 1_000_000),
		MaxInflightPolls:    e.Int("PUSHER_MAX_INFLIGHT_POLLS", 16, 1, 1024),
		PresenceTimeout:     e.Duration("PUSHER_PRESENCE_TIMEOUT", time.Second, time.Millisecond, time.Minute),
		PresenceChunk:       e.Int("PUSHER_PRESENCE_CHUNK", 1000, 1, 100_000),
		PresenceCache:       e.Bool("PUSHER_PRESENCE_CACHE", true),
		PresenceCacheMaxAge: e.Duration("PUSHER_PRESENCE_CACHE_MAX_AGE", 30*time.Second, time.Millisecond, time.Hour),
		PresenceCacheUsers:  e.Int("PUSHER_PRESENCE_CACHE_USERS", 1_000_000, 1, 1<<30),
		Offline:             e.Bool("PUSHER_OFFLINE_NOTIFY", true),
		OfflineMaxMembers:   e.Int("PUSHER_OFFLINE_MAX_MEMBERS", 1000, 0, 1<<30),
		CommitInterval:      e.Duration("PUSHER_COMMIT_INTERVAL", time.Second, 10*time.Millisecond, time.Minute),
		ShutdownTimeout:     e.Duration("PUSHER_SHUTDOWN_TIMEOUT", 5*time.Second, 0, 5*time.Minute),
		SessionTimeout:      e.Duration("PUSHER_SESSION_TIMEOUT", 10*time.Second, time.Second, 5*time.Minute),
		RebalanceTimeout:    e.Duration("PUSHER_REBALANCE_TIMEOUT", 30*time.Second, time.Second, 30*time.Minute),
	}
	if len(c.Brokers) == 0 {
		e.Required("SEQFLOW_KAFKA_BROKERS")
	}
	eventlog.CheckCompression(e)
	if len(c.RedisAddrs) == 0 {
		e.Required("SEQFLOW_REDIS_ADDR")
	}
	if c.AdminAddr == "off" {
		c.AdminAddr = ""
	}
	var bad error
	if k, err := peerSettings(e).Ring(); err != nil {
		bad = err
	} else {
		c.PeerKeys = k
	}
	switch c.Transport {
	case "auto", "redis", "tcp":
	default:
		bad = errors.Join(bad, fmt.Errorf("PUSHER_TRANSPORT=%q: want auto, tcp or redis", c.Transport))
	}
	if c.ResetOffset != "end" && c.ResetOffset != "start" {
		bad = errors.Join(bad, fmt.Errorf("PUSHER_RESET_OFFSET=%q: want end or start", c.ResetOffset))
	}
	if err := errors.Join(e.Err(), bad); err != nil {
		return c, fmt.Errorf("pusher config: %w", err)
	}
	return c, nil
}

// peerSettings reads the push transport's key ring settings
// (internal/peerauth).
func peerSettings(e *config.Env) peerauth.Settings {
	return peerauth.Settings{
		Auth:     e.Optional("SEQFLOW_PEER_AUTH", ""),
		KeysFile: e.Optional("SEQFLOW_PEER_KEYS_FILE", ""),
		Keys:     e.Optional("SEQFLOW_PEER_KEYS", ""),
	}
}
