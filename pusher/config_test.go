package main

import (
	"strings"
	"testing"
	"time"

	"github.com/seqflow/seqflow/internal/config"
	"github.com/seqflow/seqflow/internal/peerauth"
)

func TestLoadConfig(t *testing.T) {
	base := func(over map[string]string) map[string]string {
		m := map[string]string{"SEQFLOW_KAFKA_BROKERS": "k1:9092,k2:9092", "SEQFLOW_REDIS_ADDR": "r:6379", "SEQFLOW_PEER_KEYS": peerauth.NewEntry("unit")}
		for k, v := range over {
			m[k] = v
		}
		return m
	}
	cases := []struct {
		name    string
		env     map[string]string
		wantErr []string // substrings of the error; nil: valid
		check   func(t *testing.T, c Config)
	}{
		{"defaults", base(nil), nil, func(t *testing.T, c Config) {
			if c.Group != "seqflow-pusher" || c.AdminAddr != "127.0.0.1:9104" || c.Transport != "auto" ||
				c.SendTimeout != 500*time.Millisecond || c.QueueDepth != 64 || !c.Offline || c.ResetOffset != "end" ||
				len(c.Brokers) != 2 || c.Topics.Sequenced != "im.sequenced.v1" ||
				!c.PresenceCache || c.PresenceCacheMaxAge != 30*time.Second || c.PresenceCacheUsers != 1_000_000 {
				t.Fatalf("defaults: %+v", c)
			}
		}},
		{"prefix and overrides", base(map[string]string{"SEQFLOW_TOPIC_PREFIX": "t-1.", "PUSHER_ADMIN_ADDR": "off",
			"PUSHER_GATEWAY_QUEUE": "8", "PUSHER_OFFLINE_NOTIFY": "false", "PUSHER_RESET_OFFSET": "start"}), nil, func(t *testing.T, c Config) {
			if c.Topics.Offline != "t-1.im.offline.v1" || c.AdminAddr != "" || c.QueueDepth != 8 || c.Offline || c.ResetOffset != "start" {
				t.Fatalf("overrides: %+v", c)
			}
		}},
		{"empty admin address switches it off, as for the other services", base(map[string]string{"PUSHER_ADMIN_ADDR": ""}), nil, func(t *testing.T, c Config) {
			if c.AdminAddr != "" {
				t.Fatalf("admin address %q, want off", c.AdminAddr)
			}
		}},
		{"unknown codec", base(map[string]string{"SEQFLOW_KAFKA_COMPRESSION": "gzip"}), []string{`SEQFLOW_KAFKA_COMPRESSION="gzip"`}, nil},
		{"missing brokers and redis", map[string]string{}, []string{"SEQFLOW_KAFKA_BROKERS is required", "SEQFLOW_REDIS_ADDR is required", "SEQFLOW_PEER_KEYS_FILE"}, nil},
		{"no peer key ring", base(map[string]string{"SEQFLOW_PEER_KEYS": ""}), []string{"peer key ring required", "SEQFLOW_PEER_AUTH=insecure-none"}, nil},
		{"insecure by name", base(map[string]string{"SEQFLOW_PEER_KEYS": "", "SEQFLOW_PEER_AUTH": "insecure-none"}), nil, func(t *testing.T, c Config) {
			if !c.PeerKeys.IsInsecure() {
				t.Fatal("want the insecure ring")
			}
		}},
		{"bad values are all reported", base(map[string]string{"PUSHER_SEND_TIMEOUT": "soon", "PUSHER_GATEWAY_QUEUE": "0",
			"PUSHER_TRANSPORT": "carrier-pigeon", "PUSHER_RESET_OFFSET": "middle", "PUSHER_PRESENCE_CACHE": "maybe",
			"PUSHER_PRESENCE_CACHE_MAX_AGE": "0s", "PUSHER_PRESENCE_CACHE_USERS": "0"}),
			[]string{"PUSHER_SEND_TIMEOUT", "PUSHER_GATEWAY_QUEUE", "PUSHER_TRANSPORT", "PUSHER_RESET_OFFSET",
				"PUSHER_PRESENCE_CACHE", "PUSHER_PRESENCE_CACHE_MAX_AGE", "PUSHER_PRESENCE_CACHE_USERS"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := LoadConfig(config.FromMap(c.env))
			if c.wantErr == nil {
				if err != nil {
					t.Fatal(err)
				}
				c.check(t, cfg)
				return
			}
			if err == nil {
				t.Fatal("want an error")
			}
			for _, w := range c.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not mention %s", err, w)
				}
			}
		})
	}
}
