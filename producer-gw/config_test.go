package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/seqflow/seqflow/internal/config"
	"github.com/seqflow/seqflow/internal/peerauth"
)

func baseEnv() map[string]string {
	return map[string]string{
		"SEQFLOW_KAFKA_BROKERS":    "127.0.0.1:19092",
		"SEQFLOW_PG_URL":           "postgres://x@127.0.0.1/db",
		"SEQFLOW_REDIS_ADDR":       "127.0.0.1:16379",
		"GATEWAY_JWT_HS256_SECRET": testSecret,
		"GATEWAY_ID":               "gw-1",
		"SEQFLOW_PLAINTEXT_BODIES": "true",
		"SEQFLOW_PEER_KEYS":        testPeerKeys,
	}
}

// testPeerKeys is a peer key ring for tests without the stack.
var testPeerKeys = peerauth.NewEntry("unit")

func TestLoadConfig(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	cases := []struct {
		name    string
		set     map[string]string
		unset   []string
		wantErr string // substring; "" = valid
		check   func(t *testing.T, c Config)
	}{
		{name: "defaults", check: func(t *testing.T, c Config) {
			if c.Addr != "127.0.0.1:8080" || c.AdminAddr != "127.0.0.1:9103" || c.AckWait != 2*time.Second || c.DevMode ||
				c.MaxInFlight != 64 || c.ProduceLinger != 2*time.Millisecond || c.Limits.MaxFrameBytes != 64<<10 || c.PresenceTTL != 30*time.Second || c.StoreSchema != "public" ||
				c.DeliveredFlushCount != 64 || c.DeliveredFlushInterval != time.Second {
				t.Fatalf("defaults: %+v", c)
			}
		}},
		{name: "produce linger off", set: map[string]string{"GATEWAY_PRODUCE_LINGER": "0"}, check: func(t *testing.T, c Config) {
			if c.ProduceLinger != 0 {
				t.Fatalf("linger %v, want 0", c.ProduceLinger)
			}
		}},
		{name: "produce linger too long", set: map[string]string{"GATEWAY_PRODUCE_LINGER": "2s"}, wantErr: "GATEWAY_PRODUCE_LINGER"},
		{name: "unknown codec", set: map[string]string{"SEQFLOW_KAFKA_COMPRESSION": "gzip"}, wantErr: `SEQFLOW_KAFKA_COMPRESSION="gzip"`},
		{name: "a known codec", set: map[string]string{"SEQFLOW_KAFKA_COMPRESSION": "zstd"}},
		{name: "admin off", set: map[string]string{"GATEWAY_ADMIN_ADDR": ""}, check: func(t *testing.T, c Config) {
			if c.AdminAddr != "" {
				t.Fatalf("admin addr %q, want off", c.AdminAddr)
			}
		}},
		{name: "ed25519", set: map[string]string{"GATEWAY_JWT_ED25519_PUBLIC_KEY": base64.StdEncoding.EncodeToString(pub)}, unset: []string{"GATEWAY_JWT_HS256_SECRET"},
			check: func(t *testing.T, c Config) {
				if !c.Ed25519Public.Equal(pub) || c.HS256Secret != nil {
					t.Fatal("ed25519 key not loaded")
				}
			}},
		{name: "dev mode with ed25519 needs a private key", set: map[string]string{"GATEWAY_DEV_MODE": "true", "GATEWAY_JWT_ED25519_PUBLIC_KEY": base64.StdEncoding.EncodeToString(pub)},
			unset: []string{"GATEWAY_JWT_HS256_SECRET"}, wantErr: "GATEWAY_DEV_JWT_ED25519_PRIVATE_KEY"},
		{name: "dev mode with ed25519 private key", set: map[string]string{"GATEWAY_DEV_MODE": "true", "GATEWAY_JWT_ED25519_PUBLIC_KEY": base64.StdEncoding.EncodeToString(pub),
			"GATEWAY_DEV_JWT_ED25519_PRIVATE_KEY": base64.StdEncoding.EncodeToString(priv.Seed())}, unset: []string{"GATEWAY_JWT_HS256_SECRET"}},
		{name: "no key", unset: []string{"GATEWAY_JWT_HS256_SECRET"}, wantErr: "is required"},
		{name: "both keys", set: map[string]string{"GATEWAY_JWT_ED25519_PUBLIC_KEY": base64.StdEncoding.EncodeToString(pub)}, wantErr: "not both"},
		{name: "short secret", set: map[string]string{"GATEWAY_JWT_HS256_SECRET": "short"}, wantErr: "at least 32"},
		{name: "bad public key", set: map[string]string{"GATEWAY_JWT_ED25519_PUBLIC_KEY": "nope"}, unset: []string{"GATEWAY_JWT_HS256_SECRET"}, wantErr: "ED25519_PUBLIC_KEY"},
		{name: "missing brokers", unset: []string{"SEQFLOW_KAFKA_BROKERS"}, wantErr: "SEQFLOW_KAFKA_BROKERS"},
		{name: "missing redis", unset: []string{"SEQFLOW_REDIS_ADDR"}, wantErr: "SEQFLOW_REDIS_ADDR"},
		{name: "bad duration", set: map[string]string{"GATEWAY_ACK_WAIT": "soon"}, wantErr: "GATEWAY_ACK_WAIT"},
		{name: "in flight out of range", set: map[string]string{"GATEWAY_MAX_IN_FLIGHT": "0"}, wantErr: "GATEWAY_MAX_IN_FLIGHT"},
		{name: "sync slots default", check: func(t *testing.T, c Config) {
			if c.SyncConcurrency != 8 || c.SyncQueueWait != 250*time.Millisecond {
				t.Fatalf("sync concurrency %d, queue wait %v, want 8, 250ms", c.SyncConcurrency, c.SyncQueueWait)
			}
		}},
		{name: "sync slots set, no queue wait", set: map[string]string{"GATEWAY_SYNC_CONCURRENCY": "2", "GATEWAY_SYNC_QUEUE_WAIT": "0"}, check: func(t *testing.T, c Config) {
			if c.SyncConcurrency != 2 || c.SyncQueueWait != 0 {
				t.Fatalf("sync concurrency %d, queue wait %v, want 2, 0", c.SyncConcurrency, c.SyncQueueWait)
			}
		}},
		{name: "no sync slot", set: map[string]string{"GATEWAY_SYNC_CONCURRENCY": "0"}, wantErr: "GATEWAY_SYNC_CONCURRENCY"},
		{name: "sync queue wait past the store bound", set: map[string]string{"GATEWAY_SYNC_QUEUE_WAIT": "3s"}, wantErr: "GATEWAY_SYNC_QUEUE_WAIT"},
		{name: "bad gateway id", set: map[string]string{"GATEWAY_ID": "gw|1"}, wantErr: "GATEWAY_ID"},
		{name: "bad addr", set: map[string]string{"GATEWAY_ADDR": "8080"}, wantErr: "GATEWAY_ADDR"},
		{name: "idle not above heartbeat", set: map[string]string{"GATEWAY_HEARTBEAT": "30s", "GATEWAY_IDLE_TIMEOUT": "20s"}, wantErr: "GATEWAY_IDLE_TIMEOUT"},
		{name: "body leaves no room in frame", set: map[string]string{"GATEWAY_MAX_FRAME_BYTES": "8192", "GATEWAY_MAX_BODY_BYTES": "8000"}, wantErr: "GATEWAY_MAX_BODY_BYTES"},
		{name: "neither a KEK nor plaintext chosen", unset: []string{"SEQFLOW_PLAINTEXT_BODIES"}, wantErr: "SEQFLOW_KEK is required"},
		{name: "plaintext false is no choice", set: map[string]string{"SEQFLOW_PLAINTEXT_BODIES": "false"}, wantErr: "SEQFLOW_PLAINTEXT_BODIES=true"},
		{name: "a KEK and plaintext", set: map[string]string{"SEQFLOW_KEK": testKEK}, wantErr: "choose one"},
		{name: "a KEK", set: map[string]string{"SEQFLOW_KEK": testKEK}, unset: []string{"SEQFLOW_PLAINTEXT_BODIES"}, check: func(t *testing.T, c Config) {
			if c.PlaintextBodies || c.KEK != testKEK {
				t.Fatalf("KEK %q, plaintext %v", c.KEK, c.PlaintextBodies)
			}
		}},
		{name: "a short KEK", set: map[string]string{"SEQFLOW_KEK": base64.StdEncoding.EncodeToString(make([]byte, 16))}, unset: []string{"SEQFLOW_PLAINTEXT_BODIES"}, wantErr: "SEQFLOW_KEK: the KEK must be 32 bytes"},
		{name: "dev tokens outlive the retention", set: map[string]string{"GATEWAY_DEV_TOKEN_TTL": "72h", "GATEWAY_DEVICE_RETENTION": "48h"}, wantErr: "GATEWAY_DEV_TOKEN_TTL (72h0m0s) must not exceed GATEWAY_DEVICE_RETENTION"},
		{name: "pinned audience and issuer", set: map[string]string{"GATEWAY_JWT_AUDIENCE": "seqflow", "GATEWAY_JWT_ISSUER": "https://id.example"}, check: func(t *testing.T, c Config) {
			if c.JWTAudience != "seqflow" || c.JWTIssuer != "https://id.example" {
				t.Fatalf("audience %q issuer %q", c.JWTAudience, c.JWTIssuer)
			}
		}},
		{name: "trusted proxies", set: map[string]string{"GATEWAY_TRUSTED_PROXIES": "10.0.0.0/8, 192.0.2.7,::1"}, check: func(t *testing.T, c Config) {
			if fmt.Sprint(c.TrustedProxies) != "[10.0.0.0/8 192.0.2.7/32 ::1/128]" {
				t.Fatalf("TrustedProxies = %v", c.TrustedProxies)
			}
		}},
		{name: "bad trusted proxy", set: map[string]string{"GATEWAY_TRUSTED_PROXIES": "10.0.0.0/8,proxy.local"}, wantErr: "GATEWAY_TRUSTED_PROXIES"},
		{name: "http write timeout not above read, produce and ack wait", set: map[string]string{"GATEWAY_HTTP_READ_TIMEOUT": "20s", "GATEWAY_PRODUCE_TIMEOUT": "10s", "GATEWAY_ACK_WAIT": "2s", "GATEWAY_HTTP_WRITE_TIMEOUT": "32s"}, wantErr: "GATEWAY_HTTP_WRITE_TIMEOUT"},
		{name: "proxy protocol without trusted proxies", set: map[string]string{"GATEWAY_PROXY_PROTOCOL": "true"}, wantErr: "GATEWAY_PROXY_PROTOCOL"},
		{name: "proxy protocol", set: map[string]string{"GATEWAY_PROXY_PROTOCOL": "true", "GATEWAY_TRUSTED_PROXIES": "10.0.0.0/8"}},
		{name: "caps off", set: map[string]string{"GATEWAY_MAX_CONNS": "0", "GATEWAY_MAX_CONNS_PER_IP": "0", "GATEWAY_MAX_CONNS_PER_USER": "0"}},
		{name: "negative cap", set: map[string]string{"GATEWAY_MAX_CONNS_PER_IP": "-1"}, wantErr: "GATEWAY_MAX_CONNS_PER_IP"},
		{name: "no peer key ring", unset: []string{"SEQFLOW_PEER_KEYS"}, wantErr: "SEQFLOW_PEER_KEYS_FILE"},
		{name: "bad peer key", set: map[string]string{"SEQFLOW_PEER_KEYS": "k:c2hvcnQ="}, wantErr: "SEQFLOW_PEER_KEYS"},
		{name: "peer auth explicitly off", unset: []string{"SEQFLOW_PEER_KEYS"}, set: map[string]string{"SEQFLOW_PEER_AUTH": "insecure-none"}, check: func(t *testing.T, c Config) {
			if !c.PeerKeys.IsInsecure() {
				t.Fatal("insecure-none did not give the insecure ring")
			}
		}},
		{name: "peer auth misspelt", set: map[string]string{"SEQFLOW_PEER_AUTH": "none"}, wantErr: "SEQFLOW_PEER_AUTH"},
		{name: "push timeouts", set: map[string]string{"GATEWAY_PUSH_IDLE_TIMEOUT": "1s", "GATEWAY_PUSH_HANDSHAKE_TIMEOUT": "1s", "GATEWAY_PUSH_MAX_CONNS": "4"}, check: func(t *testing.T, c Config) {
			if c.PushIdleTimeout != time.Second || c.PushHandshakeTimeout != time.Second || c.PushMaxConns != 4 {
				t.Fatalf("push limits: %v %v %d", c.PushIdleTimeout, c.PushHandshakeTimeout, c.PushMaxConns)
			}
		}},
		{name: "every error at once", set: map[string]string{"GATEWAY_ACK_WAIT": "x", "GATEWAY_RATE_BURST": "-1"}, wantErr: "GATEWAY_RATE_BURST"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := baseEnv()
			for _, k := range c.unset {
				delete(env, k)
			}
			for k, v := range c.set {
				env[k] = v
			}
			cfg, err := LoadConfig(config.FromMap(env))
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want one mentioning %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.check != nil {
				c.check(t, cfg)
			}
			if _, err := New(cfg, slog.New(slog.DiscardHandler)); err != nil {
				t.Fatalf("New: %v", err)
			}
		})
	}
}
