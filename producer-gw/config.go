package main

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/seqflow/seqflow/internal/admin"
	"github.com/seqflow/seqflow/internal/auth"
	"github.com/seqflow/seqflow/internal/config"
	"github.com/seqflow/seqflow/internal/delivery"
	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/keystore"
	"github.com/seqflow/seqflow/internal/peerauth"
	"github.com/seqflow/seqflow/internal/wire"
)

// Config is the gateway's configuration, read from the environment.
type Config struct {
	// Brokers: SEQFLOW_KAFKA_BROKERS, comma-separated (required).
	Brokers []string
	// PGURL: SEQFLOW_PG_URL, the message store the persister writes (required).
	PGURL string
	// KEK: SEQFLOW_KEK, the key-encryption key (32 bytes, standard
	// base64) that wraps the data keys sealing message bodies
	// (docs/erasure.md). Required unless PlaintextBodies.
	KEK string
	// PlaintextBodies: SEQFLOW_PLAINTEXT_BODIES, default false. Bodies are
	// sealed by default and the gateway refuses to start without a KEK;
	// true chooses plaintext bodies explicitly: they then enter a log kept
	// for ever, where no erasure can reach them. It and KEK exclude each
	// other.
	PlaintextBodies bool
	// KEKPrevious: SEQFLOW_KEK_PREVIOUS, KEKs being rotated out
	// (comma-separated): they still unwrap the keys wrapped with them
	// until `seqflow keys rotate` moved those to KEK (docs/erasure.md).
	KEKPrevious string
	// KeyPeriod: SEQFLOW_KEY_PERIOD, how long one data key seals one
	// sender's messages in one session, default 24h: the unit retention
	// shreds by.
	KeyPeriod time.Duration
	// KeyCacheTTL: SEQFLOW_KEY_CACHE_TTL, how long an unwrapped data key
	// stays in the gateway's memory, default 30s: the bound on how long an
	// erased body still opens here.
	KeyCacheTTL time.Duration
	// RedisAddr: SEQFLOW_REDIS_ADDR, presence and push transport (required);
	// comma-separated addresses mean a Redis Cluster.
	RedisAddr string
	// Topics: names under SEQFLOW_TOPIC_PREFIX, default no prefix.
	Topics eventlog.Topics
	// StoreSchema: GATEWAY_STORE_SCHEMA, the store's home schema, default
	// "public"; its store_pointer is followed to the live schema.
	StoreSchema string
	// GatewayID: GATEWAY_ID, default "<hostname>-<pid>" (auth.ValidID
	// alphabet). The pusher addresses this gateway's batches by it.
	GatewayID string
	// Addr: GATEWAY_ADDR for WebSocket and HTTP clients, default
	// 127.0.0.1:8080. Port 0 picks a free port (tests).
	Addr string
	// PushAddr: GATEWAY_PUSH_ADDR, where the gateway listens for the
	// pushers' direct TCP streams, default 127.0.0.1:0 (a free loopback
	// port); "off" leaves only Redis pub/sub. The address is registered in
	// Redis (seqflow:gateway:{id}:push) for the pushers to find. Redis
	// pub/sub is always subscribed as well: it is what a pusher uses when
	// the stream is not registered or refuses it.
	PushAddr string
	// PushAdvertise: GATEWAY_PUSH_ADVERTISE, the address registered for
	// the pushers when it differs from the listener's (another host, NAT),
	// default the listener's address.
	PushAdvertise string
	// PeerKeys: the key ring every batch on the push path (stream, pub/sub,
	// registry entry) must be authenticated with, from
	// SEQFLOW_PEER_KEYS_FILE or SEQFLOW_PEER_KEYS (internal/peerauth).
	// Required: without it the gateway refuses to start, unless
	// SEQFLOW_PEER_AUTH=insecure-none, which it then logs and exports as
	// seqflow_peer_auth_insecure 1.
	PeerKeys *peerauth.Keyring
	// PushHandshakeTimeout: GATEWAY_PUSH_HANDSHAKE_TIMEOUT, default 5s: a
	// push connection that has not authenticated by then is closed.
	PushHandshakeTimeout time.Duration
	// PushIdleTimeout: GATEWAY_PUSH_IDLE_TIMEOUT, default 2m: a push
	// connection that brings no complete frame for this long is closed.
	PushIdleTimeout time.Duration
	// PushMaxConns: GATEWAY_PUSH_MAX_CONNS, default 256: push connections
	// held at once (a pusher, sequencer or gateway process holds one per
	// gateway); at most 32 of them still in their handshake.
	PushMaxConns int
	// OriginPatterns: GATEWAY_ORIGIN_PATTERNS, comma-separated host
	// patterns browsers may connect from besides the gateway's own host,
	// default none. Clients that send no Origin (curl, Node) are unaffected.
	OriginPatterns []string
	// OTLPEndpoint: SEQFLOW_OTLP_ENDPOINT, an OTLP/HTTP trace collector
	// ("host:port" or URL), default empty: tracing off (the gateway still
	// puts a traceparent on every uplink).
	OTLPEndpoint string
	// AdminAddr: GATEWAY_ADMIN_ADDR for /metrics /healthz /readyz, default
	// 127.0.0.1:9103; empty disables.
	AdminAddr string
	// Admin: the admin port's operator tokens (SEQFLOW_ADMIN_TOKENS_FILE)
	// and pprof (SEQFLOW_ADMIN_PPROF), as in every service: internal/admin.
	Admin admin.Config
	// HS256Secret: GATEWAY_JWT_HS256_SECRET, at least 32 bytes. Exactly one
	// of it and Ed25519Public must be set.
	HS256Secret []byte
	// Ed25519Public: GATEWAY_JWT_ED25519_PUBLIC_KEY, PEM or base64 of the
	// 32 raw bytes.
	Ed25519Public ed25519.PublicKey
	// DevMode: GATEWAY_DEV_MODE, default false. Turns on POST /v1/dev/login,
	// which mints a token for any user: never in production.
	DevMode bool
	// Web: GATEWAY_WEB, default the value of GATEWAY_DEV_MODE. Serves the
	// demo chat page (producer-gw/web) at GET / and GET /app/. Without dev
	// mode the page cannot log in by itself: paste a token from
	// `seqflow token` into it.
	Web bool
	// DevEd25519Private: GATEWAY_DEV_JWT_ED25519_PRIVATE_KEY, the key dev
	// login signs with when tokens are Ed25519 (with HS256 it uses the secret).
	DevEd25519Private ed25519.PrivateKey
	// DevTokenTTL: GATEWAY_DEV_TOKEN_TTL, lifetime of dev-login tokens, default 24h.
	// At most DeviceRetention.
	DevTokenTTL time.Duration
	// JWTAudience: GATEWAY_JWT_AUDIENCE, default none. Set, every token
	// must carry it in "aud" (dev-login tokens do).
	JWTAudience string
	// JWTIssuer: GATEWAY_JWT_ISSUER, default none. Set, every token's
	// "iss" must be it (dev-login tokens are issued so).
	JWTIssuer string
	// AckWait: GATEWAY_ACK_WAIT, how long a send waits for its seq before it
	// is answered "accepted", default 2s; 0 answers "accepted" at once.
	AckWait time.Duration
	// NoticeTTL: GATEWAY_NOTICE_TTL, how long after an "accepted" answer a
	// late seq is still forwarded as a seq_notice, default 2m.
	NoticeTTL time.Duration
	// ProduceTimeout: GATEWAY_PRODUCE_TIMEOUT, the bound on Kafka accepting
	// an uplink before the client gets a retryable "unavailable", default
	// 10s: above what a broker's death costs (the controller fences it, 4 s
	// on the local three-broker stack, then elects new leaders, which the
	// producer finds within a metadata refresh and a backoff). At 5 s the
	// uplinks waiting on a dead leader failed just before it was replaced,
	// and the SDK's resend came a round trip later than the original would
	// have (chaos run 7d056a8d, fault #4).
	ProduceTimeout time.Duration
	// ProduceLinger: GATEWAY_PRODUCE_LINGER, how long the uplink producer
	// waits for more records before it sends a partition's batch, default
	// 2ms, at most 1s; 0 sends each record at once (batched only behind the
	// requests already in flight). At 2,000 msg/s a few records per request
	// instead of one cut the broker's queueing more than the linger adds:
	// in 5 of 5 alternating pairs of runs differing only in it
	// (SEQBENCH_PHASES=e2e SEQBENCH_E2E_MAX=false GATEWAY_PRODUCE_LINGER=0
	// or 2ms go run ./cmd/seqbench, load average 15-34 from other work),
	// ACK p50 was lower with 2ms (e.g. 219 → 120 ms, 285 → 212 ms).
	ProduceLinger time.Duration
	// MaxInFlight: GATEWAY_MAX_IN_FLIGHT, sends per connection awaiting
	// their ACK, default 64; one more gets "too_many_in_flight".
	MaxInFlight int
	// RatePerUser: GATEWAY_RATE_PER_USER, requests per second per user
	// (all devices together), default 50; RateBurst: GATEWAY_RATE_BURST,
	// default 100. Past them: "rate_limited". Kept in Redis, so they hold
	// across gateways (limiter.go).
	RatePerUser int
	RateBurst   int
	// RatePerDevice: GATEWAY_RATE_PER_DEVICE, requests per second of one
	// device, within its user's; default 0: no limit of its own.
	// RateDeviceBurst: GATEWAY_RATE_DEVICE_BURST, default twice the rate.
	// Set it below the user's rate so one runaway device cannot use up
	// its user's other devices' requests.
	RatePerDevice   int
	RateDeviceBurst int
	// SyncConcurrency: GATEWAY_SYNC_CONCURRENCY, sync and changes requests
	// reading the message store at once on this gateway, default 8: a slot
	// is held only for one request's reads (a membership check and a page
	// of at most GATEWAY_MAX_SYNC_LIMIT rows, or one changes), so a few
	// turn over quickly, and a reconnect storm waits in the gateway rather
	// than as PostgreSQL backends. Give the PostgreSQL pool
	// (pool_max_conns in SEQFLOW_PG_URL; pgx's default is the larger of 4
	// and the CPU count) more connections than this, so commands and the
	// push path's key reads do not queue behind a full set of page reads.
	// SyncQueueWait: GATEWAY_SYNC_QUEUE_WAIT, how long one more waits for
	// a slot, in arrival order, default 250ms (a burst that clears within
	// it costs no retry; a shed client learns it long before the request's
	// 3 s store bound, out of which the wait comes: at most 2s); 0: no
	// wait. Past it the request is answered "unavailable" (retryable) and
	// counted in seqflow_gateway_sync_shed_total. Pushes never take a slot.
	SyncConcurrency int
	SyncQueueWait   time.Duration
	// Limits: GATEWAY_MAX_FRAME_BYTES (default 65536), GATEWAY_MAX_BODY_BYTES
	// (16384), GATEWAY_MAX_MEMBERS per request (500), GATEWAY_MAX_SYNC_LIMIT
	// (200, page default 50).
	Limits wire.Limits
	// Heartbeat: GATEWAY_HEARTBEAT, how often the gateway pings each
	// WebSocket, default 15s.
	Heartbeat time.Duration
	// IdleTimeout: GATEWAY_IDLE_TIMEOUT, a connection from which nothing
	// (frame or pong) arrives for this long is closed, default 60s.
	IdleTimeout time.Duration
	// WriteTimeout: GATEWAY_WRITE_TIMEOUT per write to a connection (the
	// frames queued when its writer wakes, up to 64 KiB, go out in one
	// write), default 10s.
	WriteTimeout time.Duration
	// HTTPReadHeaderTimeout: GATEWAY_HTTP_READ_HEADER_TIMEOUT, the bound on
	// reading a request's headers (a WebSocket's handshake included),
	// default 10s.
	HTTPReadHeaderTimeout time.Duration
	// HTTPReadTimeout: GATEWAY_HTTP_READ_TIMEOUT, the bound on reading a
	// whole HTTP request, headers and body, default 20s: a body trickled
	// slower is cut off with "timeout" and its connection closed, so a
	// client holds a descriptor no longer than this. A WebSocket is free
	// of it once upgraded (its own bounds are GATEWAY_IDLE_TIMEOUT and
	// GATEWAY_WRITE_TIMEOUT).
	HTTPReadTimeout time.Duration
	// HTTPWriteTimeout: GATEWAY_HTTP_WRITE_TIMEOUT, the bound from the end
	// of a request's headers to the end of its response, default 60s; it
	// must exceed GATEWAY_HTTP_READ_TIMEOUT plus GATEWAY_PRODUCE_TIMEOUT
	// plus GATEWAY_ACK_WAIT (32s by default), the longest an HTTP command
	// takes to answer. A client that does not read its response is cut
	// off then.
	HTTPWriteTimeout time.Duration
	// HTTPIdleTimeout: GATEWAY_HTTP_IDLE_TIMEOUT, how long a keep-alive
	// connection may wait for its next request, default 60s.
	HTTPIdleTimeout time.Duration
	// MaxHeaderBytes: GATEWAY_MAX_HEADER_BYTES, the bound on a request's
	// headers (and its request line), default 16384: a token is at most
	// 4096 bytes.
	MaxHeaderBytes int
	// MaxConns: GATEWAY_MAX_CONNS, TCP connections the client port holds
	// at once (HTTP and WebSocket, idle keep-alive ones included), default
	// 20000; 0: no cap. One more is answered "rate_limited" and closed.
	// Keep it below RLIMIT_NOFILE less what the gateway's other sockets
	// need (Kafka, PostgreSQL, Redis, push streams).
	MaxConns int
	// MaxConnsPerIP: GATEWAY_MAX_CONNS_PER_IP, connections of one client
	// address, default 256; 0: no cap. The address is the socket's, or,
	// when the socket's is one of GATEWAY_TRUSTED_PROXIES, the one
	// X-Forwarded-For names (connlimit.go). Raise it where many clients
	// share an address (carrier-grade NAT).
	MaxConnsPerIP int
	// MaxConnsPerUser: GATEWAY_MAX_CONNS_PER_USER, WebSocket connections
	// and HTTP requests in progress of one user (all devices) on this
	// gateway, default 64; 0: no cap.
	MaxConnsPerUser int
	// SocketSendBuffer: GATEWAY_SOCKET_SEND_BUFFER, the kernel's send
	// buffer of each client socket in bytes (SO_SNDBUF, which Linux
	// doubles), default 262144; 0 leaves it to the kernel's autotuning,
	// which lets it grow to net.ipv4.tcp_wmem's maximum (4 MiB by
	// default) for a client that does not read. With it, such a client
	// blocks the connection's writer early, and GATEWAY_WRITE_TIMEOUT or
	// the full GATEWAY_CONN_QUEUE drops it.
	SocketSendBuffer int
	// TrustedProxies: GATEWAY_TRUSTED_PROXIES, comma-separated CIDRs (or
	// addresses) of the reverse proxies whose X-Forwarded-For is believed,
	// default none: every client is its socket's address.
	TrustedProxies []netip.Prefix
	// ProxyProtocol: GATEWAY_PROXY_PROTOCOL, default false. True: every
	// socket from GATEWAY_TRUSTED_PROXIES (which must be set) starts with
	// a PROXY protocol header (HAProxy's, version 1 or 2), whose source
	// address is the client's; one without it is answered 400 and
	// closed. Other sockets' headers are not read.
	ProxyProtocol bool
	// ConnQueue: GATEWAY_CONN_QUEUE, frames queued per connection, default
	// 512; a connection whose queue is full is closed (it syncs on reconnect).
	ConnQueue int
	// PresenceTTL: GATEWAY_PRESENCE_TTL, default 30s, refreshed every TTL/3.
	PresenceTTL time.Duration
	// MemberCacheTTL: GATEWAY_MEMBER_CACHE_TTL, how long a membership answer
	// from PostgreSQL is reused, default 1s; 0 disables the cache.
	MemberCacheTTL time.Duration
	// EditWindow: GATEWAY_EDIT_WINDOW, default 15m; RecallWindow:
	// GATEWAY_RECALL_WINDOW, default 2m: how long after its server time a
	// sender may edit or recall a message.
	EditWindow   time.Duration
	RecallWindow time.Duration
	// DeliveredFlushCount: GATEWAY_DELIVERED_FLUSH_COUNT (default 64) and
	// DeliveredFlushInterval: GATEWAY_DELIVERED_FLUSH_INTERVAL (default
	// 1s): delivery receipts of a connection are produced after this many
	// cursor updates or this long after the first, whichever comes first.
	// Nothing watches the stored cursor live, and at 100 ms the gateway
	// produced about 0.6 receipts per message of a paced chat (README,
	// "Delivery receipts").
	DeliveredFlushCount    int
	DeliveredFlushInterval time.Duration
	// ShutdownTimeout: GATEWAY_SHUTDOWN_TIMEOUT, how long shutdown waits for
	// in-flight sends before closing sockets, default 10s.
	ShutdownTimeout time.Duration
	// LoginPolicy: GATEWAY_LOGIN_POLICY, which older WebSocket connections
	// of a user a new one closes (close code 4003 replaced), on every
	// gateway: "multi" (default: none, any number of connections),
	// "one_per_platform" (the user's connections of the same platform;
	// connections without a platform are left alone) or "one_per_device"
	// (the same device's). The newest connection wins.
	LoginPolicy string
	// DeviceRetention: GATEWAY_DEVICE_RETENTION, how long a device stays on
	// its user's list after it was last seen, and a sign-out is kept after
	// it was made, default 30 days. A token that lives longer than this is
	// refused (auth.Policy.MaxLifetime): a signed-out device's token would
	// work again once its sign-out is forgotten.
	DeviceRetention time.Duration
}

// Login policies (Config.LoginPolicy).
const (
	policyMulti    = "multi"
	policyPlatform = "one_per_platform"
	policyDevice   = "one_per_device"
)

// LoadConfig reads Config from e and validates it.
func LoadConfig(e *config.Env) (Config, error) {
	host, _ := os.Hostname()
	c := Config{
		Brokers:                e.List("SEQFLOW_KAFKA_BROKERS", nil),
		PGURL:                  e.Required("SEQFLOW_PG_URL"),
		RedisAddr:              e.Required("SEQFLOW_REDIS_ADDR"),
		KEK:                    e.Optional("SEQFLOW_KEK", ""),
		PlaintextBodies:        e.Bool("SEQFLOW_PLAINTEXT_BODIES", false),
		KEKPrevious:            e.Optional("SEQFLOW_KEK_PREVIOUS", ""),
		KeyPeriod:              e.Duration("SEQFLOW_KEY_PERIOD", 24*time.Hour, time.Second, 366*24*time.Hour),
		KeyCacheTTL:            e.Duration("SEQFLOW_KEY_CACHE_TTL", 30*time.Second, time.Second, time.Minute),
		Topics:                 eventlog.Names(e.String("SEQFLOW_TOPIC_PREFIX", "")),
		StoreSchema:            e.String("GATEWAY_STORE_SCHEMA", "public"),
		GatewayID:              e.String("GATEWAY_ID", fmt.Sprintf("%s-%d", host, os.Getpid())),
		Addr:                   e.String("GATEWAY_ADDR", "127.0.0.1:8080"),
		OriginPatterns:         e.List("GATEWAY_ORIGIN_PATTERNS", nil),
		PushAddr:               e.String("GATEWAY_PUSH_ADDR", "127.0.0.1:0"),
		PushAdvertise:          e.String("GATEWAY_PUSH_ADVERTISE", ""),
		PushHandshakeTimeout:   e.Duration("GATEWAY_PUSH_HANDSHAKE_TIMEOUT", delivery.DefaultHandshakeTimeout, 100*time.Millisecond, time.Minute),
		PushIdleTimeout:        e.Duration("GATEWAY_PUSH_IDLE_TIMEOUT", 2*time.Minute, 100*time.Millisecond, time.Hour),
		PushMaxConns:           e.Int("GATEWAY_PUSH_MAX_CONNS", 256, 1, 100_000),
		AdminAddr:              e.Optional("GATEWAY_ADMIN_ADDR", "127.0.0.1:9103"),
		Admin:                  admin.LoadConfig(e),
		OTLPEndpoint:           e.Optional("SEQFLOW_OTLP_ENDPOINT", ""),
		DevMode:                e.Bool("GATEWAY_DEV_MODE", false),
		DevTokenTTL:            e.Duration("GATEWAY_DEV_TOKEN_TTL", 24*time.Hour, time.Minute, 30*24*time.Hour),
		JWTAudience:            e.String("GATEWAY_JWT_AUDIENCE", ""),
		JWTIssuer:              e.String("GATEWAY_JWT_ISSUER", ""),
		AckWait:                e.Duration("GATEWAY_ACK_WAIT", 2*time.Second, 0, 30*time.Second),
		NoticeTTL:              e.Duration("GATEWAY_NOTICE_TTL", 2*time.Minute, time.Second, time.Hour),
		ProduceTimeout:         e.Duration("GATEWAY_PRODUCE_TIMEOUT", 10*time.Second, 100*time.Millisecond, time.Minute),
		ProduceLinger:          e.Duration("GATEWAY_PRODUCE_LINGER", 2*time.Millisecond, 0, time.Second),
		MaxInFlight:            e.Int("GATEWAY_MAX_IN_FLIGHT", 64, 1, 10_000),
		RatePerUser:            e.Int("GATEWAY_RATE_PER_USER", 50, 1, 1_000_000),
		RateBurst:              e.Int("GATEWAY_RATE_BURST", 100, 1, 1_000_000),
		RatePerDevice:          e.Int("GATEWAY_RATE_PER_DEVICE", 0, 0, 1_000_000),
		SyncConcurrency:        e.Int("GATEWAY_SYNC_CONCURRENCY", 8, 1, 10_000),
		SyncQueueWait:          e.Duration("GATEWAY_SYNC_QUEUE_WAIT", 250*time.Millisecond, 0, 2*time.Second),
		Heartbeat:              e.Duration("GATEWAY_HEARTBEAT", 15*time.Second, 100*time.Millisecond, 10*time.Minute),
		IdleTimeout:            e.Duration("GATEWAY_IDLE_TIMEOUT", 60*time.Second, 300*time.Millisecond, time.Hour),
		WriteTimeout:           e.Duration("GATEWAY_WRITE_TIMEOUT", 10*time.Second, 100*time.Millisecond, 5*time.Minute),
		ConnQueue:              e.Int("GATEWAY_CONN_QUEUE", 512, 8, 1_000_000),
		HTTPReadHeaderTimeout:  e.Duration("GATEWAY_HTTP_READ_HEADER_TIMEOUT", 10*time.Second, 100*time.Millisecond, 10*time.Minute),
		HTTPReadTimeout:        e.Duration("GATEWAY_HTTP_READ_TIMEOUT", 20*time.Second, 100*time.Millisecond, 10*time.Minute),
		HTTPWriteTimeout:       e.Duration("GATEWAY_HTTP_WRITE_TIMEOUT", time.Minute, 100*time.Millisecond, 30*time.Minute),
		HTTPIdleTimeout:        e.Duration("GATEWAY_HTTP_IDLE_TIMEOUT", time.Minute, 100*time.Millisecond, time.Hour),
		MaxHeaderBytes:         e.Int("GATEWAY_MAX_HEADER_BYTES", 16<<10, 4096+1024, 1<<20),
		MaxConns:               e.Int("GATEWAY_MAX_CONNS", 20_000, 0, 10_000_000),
		MaxConnsPerIP:          e.Int("GATEWAY_MAX_CONNS_PER_IP", 256, 0, 10_000_000),
		MaxConnsPerUser:        e.Int("GATEWAY_MAX_CONNS_PER_USER", 64, 0, 10_000_000),
		SocketSendBuffer:       e.Int("GATEWAY_SOCKET_SEND_BUFFER", 256<<10, 0, 64<<20),
		ProxyProtocol:          e.Bool("GATEWAY_PROXY_PROTOCOL", false),
		PresenceTTL:            e.Duration("GATEWAY_PRESENCE_TTL", 30*time.Second, 3*time.Second, time.Hour),
		MemberCacheTTL:         e.Duration("GATEWAY_MEMBER_CACHE_TTL", time.Second, 0, time.Minute),
		EditWindow:             e.Duration("GATEWAY_EDIT_WINDOW", 15*time.Minute, 0, 30*24*time.Hour),
		RecallWindow:           e.Duration("GATEWAY_RECALL_WINDOW", 2*time.Minute, 0, 30*24*time.Hour),
		DeliveredFlushCount:    e.Int("GATEWAY_DELIVERED_FLUSH_COUNT", 64, 1, 100_000),
		DeliveredFlushInterval: e.Duration("GATEWAY_DELIVERED_FLUSH_INTERVAL", time.Second, time.Millisecond, time.Minute),
		ShutdownTimeout:        e.Duration("GATEWAY_SHUTDOWN_TIMEOUT", 10*time.Second, 0, 10*time.Minute),
		LoginPolicy:            e.OneOf("GATEWAY_LOGIN_POLICY", policyMulti, policyMulti, policyPlatform, policyDevice),
		DeviceRetention:        e.Duration("GATEWAY_DEVICE_RETENTION", 30*24*time.Hour, time.Hour, 366*24*time.Hour),
	}
	c.RateDeviceBurst = e.Int("GATEWAY_RATE_DEVICE_BURST", max(2*c.RatePerDevice, 1), 1, 1_000_000)
	l := wire.DefaultLimits
	l.MaxFrameBytes = e.Int("GATEWAY_MAX_FRAME_BYTES", l.MaxFrameBytes, 1024, 512<<10)
	l.MaxBodyBytes = e.Int("GATEWAY_MAX_BODY_BYTES", l.MaxBodyBytes, 16, 48<<10)
	l.MaxMembers = e.Int("GATEWAY_MAX_MEMBERS", l.MaxMembers, 1, 10_000)
	l.MaxSyncLimit = e.Int("GATEWAY_MAX_SYNC_LIMIT", l.MaxSyncLimit, 1, 10_000)
	l.DefaultSyncLimit = min(l.DefaultSyncLimit, l.MaxSyncLimit)
	c.Limits = l
	c.Web = e.Bool("GATEWAY_WEB", c.DevMode)
	if len(c.Brokers) == 0 {
		e.Required("SEQFLOW_KAFKA_BROKERS")
	}
	eventlog.CheckCompression(e)
	secret := e.String("GATEWAY_JWT_HS256_SECRET", "")
	pub := e.String("GATEWAY_JWT_ED25519_PUBLIC_KEY", "")
	devPriv := e.String("GATEWAY_DEV_JWT_ED25519_PRIVATE_KEY", "")
	// Report every problem at once: the env's and the checks below.
	errs := []error{e.Err()}
	if k, err := peerSettings(e).Ring(); err != nil {
		errs = append(errs, err)
	} else {
		c.PeerKeys = k
	}
	switch {
	case secret != "" && pub != "":
		errs = append(errs, errors.New("set one of GATEWAY_JWT_HS256_SECRET and GATEWAY_JWT_ED25519_PUBLIC_KEY, not both"))
	case secret != "":
		if len(secret) < auth.MinSecretBytes {
			errs = append(errs, fmt.Errorf("GATEWAY_JWT_HS256_SECRET is %d bytes, want at least %d", len(secret), auth.MinSecretBytes))
		}
		c.HS256Secret = []byte(secret)
	case pub != "":
		k, err := auth.ParseEd25519PublicKey(pub)
		if err != nil {
			errs = append(errs, fmt.Errorf("GATEWAY_JWT_ED25519_PUBLIC_KEY: %w", err))
		}
		c.Ed25519Public = k
	default:
		errs = append(errs, errors.New("GATEWAY_JWT_HS256_SECRET or GATEWAY_JWT_ED25519_PUBLIC_KEY is required"))
	}
	if devPriv != "" {
		k, err := auth.ParseEd25519PrivateKey(devPriv)
		if err != nil {
			errs = append(errs, fmt.Errorf("GATEWAY_DEV_JWT_ED25519_PRIVATE_KEY: %w", err))
		}
		c.DevEd25519Private = k
	}
	if c.DevMode && c.HS256Secret == nil && c.DevEd25519Private == nil {
		errs = append(errs, errors.New("GATEWAY_DEV_MODE with Ed25519 tokens needs GATEWAY_DEV_JWT_ED25519_PRIVATE_KEY to sign dev logins"))
	}
	if err := auth.ValidID(c.GatewayID); err != nil {
		errs = append(errs, fmt.Errorf("GATEWAY_ID=%q: %w", c.GatewayID, err))
	}
	for _, a := range []struct{ name, v string }{{"GATEWAY_ADDR", c.Addr}, {"GATEWAY_ADMIN_ADDR", c.AdminAddr},
		{"GATEWAY_PUSH_ADDR", c.PushAddr}, {"GATEWAY_PUSH_ADVERTISE", c.PushAdvertise}} {
		if (a.v == "" && (a.name == "GATEWAY_ADMIN_ADDR" || a.name == "GATEWAY_PUSH_ADVERTISE")) || (a.v == "off" && a.name == "GATEWAY_PUSH_ADDR") {
			continue
		}
		if _, _, err := net.SplitHostPort(a.v); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: want host:port", a.name, a.v))
		}
	}
	if c.DevTokenTTL > c.DeviceRetention {
		errs = append(errs, fmt.Errorf("GATEWAY_DEV_TOKEN_TTL (%s) must not exceed GATEWAY_DEVICE_RETENTION (%s): longer tokens are refused", c.DevTokenTTL, c.DeviceRetention))
	}
	switch {
	case c.KEK == "" && !c.PlaintextBodies:
		errs = append(errs, errors.New("SEQFLOW_KEK is required: bodies are sealed before they enter Kafka (docs/erasure.md); "+
			"set it to 32 random bytes in base64 (openssl rand -base64 32), or set SEQFLOW_PLAINTEXT_BODIES=true to write bodies "+
			"in plaintext into a log no erasure can reach"))
	case c.KEK != "" && c.PlaintextBodies:
		errs = append(errs, errors.New("SEQFLOW_KEK is set and SEQFLOW_PLAINTEXT_BODIES=true: choose one (sealed bodies, or plaintext)"))
	case c.KEK != "":
		if _, err := keystore.ParseKEK(c.KEK); err != nil {
			errs = append(errs, fmt.Errorf("SEQFLOW_KEK: %w", err))
		}
	}
	proxies, err := parsePrefixes(e.List("GATEWAY_TRUSTED_PROXIES", nil))
	if err != nil {
		errs = append(errs, fmt.Errorf("GATEWAY_TRUSTED_PROXIES: %w", err))
	}
	c.TrustedProxies = proxies
	if c.ProxyProtocol && len(c.TrustedProxies) == 0 {
		errs = append(errs, errors.New("GATEWAY_PROXY_PROTOCOL needs GATEWAY_TRUSTED_PROXIES: the header is read only from them"))
	}
	if c.HTTPWriteTimeout <= c.HTTPReadTimeout+c.ProduceTimeout+c.AckWait {
		errs = append(errs, fmt.Errorf("GATEWAY_HTTP_WRITE_TIMEOUT (%s) must exceed GATEWAY_HTTP_READ_TIMEOUT (%s) plus GATEWAY_PRODUCE_TIMEOUT (%s) plus GATEWAY_ACK_WAIT (%s): an HTTP command may take that long to answer",
			c.HTTPWriteTimeout, c.HTTPReadTimeout, c.ProduceTimeout, c.AckWait))
	}
	if c.IdleTimeout <= c.Heartbeat {
		errs = append(errs, fmt.Errorf("GATEWAY_IDLE_TIMEOUT (%s) must exceed GATEWAY_HEARTBEAT (%s)", c.IdleTimeout, c.Heartbeat))
	}
	if c.Limits.MaxBodyBytes+4096 > c.Limits.MaxFrameBytes {
		errs = append(errs, fmt.Errorf("GATEWAY_MAX_BODY_BYTES (%d) must leave 4096 bytes of GATEWAY_MAX_FRAME_BYTES (%d) for the rest of the frame", c.Limits.MaxBodyBytes, c.Limits.MaxFrameBytes))
	}
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("producer-gw config: %w", err)
	}
	return c, nil
}

// parsePrefixes parses CIDRs; a bare address is a prefix of its own.
func parsePrefixes(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, v := range list {
		v = strings.TrimSpace(v)
		if !strings.Contains(v, "/") {
			a, err := netip.ParseAddr(v)
			if err != nil {
				return nil, fmt.Errorf("%q: want a CIDR or an address", v)
			}
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(v)
		if err != nil {
			return nil, fmt.Errorf("%q: want a CIDR or an address", v)
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		out = append(out, p.Masked())
	}
	return out, nil
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
