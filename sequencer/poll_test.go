package main

import (
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/seqflow/seqflow/internal/config"
)

// TestConfigPollWaits: SEQUENCER_POLL_MERGE_WAIT and SEQUENCER_TXN_FLOOR,
// their defaults, 0 (off), a value, and refusals naming the variable.
func TestConfigPollWaits(t *testing.T) {
	base := map[string]string{"SEQFLOW_KAFKA_BROKERS": "127.0.0.1:1", "SEQFLOW_PG_URL": "postgres://x"}
	mergeWait := func(c Config) time.Duration { return c.MergeWait }
	txnFloor := func(c Config) time.Duration { return c.TxnFloor }
	for _, tc := range []struct {
		name, value string
		get         func(Config) time.Duration
		want        time.Duration
		bad         bool
	}{
		{"SEQUENCER_POLL_MERGE_WAIT", "", mergeWait, 5 * time.Millisecond, false},
		{"SEQUENCER_POLL_MERGE_WAIT", "0", mergeWait, 0, false},
		{"SEQUENCER_POLL_MERGE_WAIT", "20ms", mergeWait, 20 * time.Millisecond, false},
		{"SEQUENCER_POLL_MERGE_WAIT", "2s", mergeWait, 0, true},
		{"SEQUENCER_POLL_MERGE_WAIT", "soon", mergeWait, 0, true},
		{"SEQUENCER_TXN_FLOOR", "", txnFloor, 12 * time.Millisecond, false},
		{"SEQUENCER_TXN_FLOOR", "0", txnFloor, 0, false},
		{"SEQUENCER_TXN_FLOOR", "40ms", txnFloor, 40 * time.Millisecond, false},
		{"SEQUENCER_TXN_FLOOR", "2s", txnFloor, 0, true},
		{"SEQUENCER_TXN_FLOOR", "-1ms", txnFloor, 0, true},
	} {
		t.Run(tc.name+"="+tc.value, func(t *testing.T) {
			env := maps.Clone(base)
			if tc.value != "" {
				env[tc.name] = tc.value
			}
			cfg, err := LoadConfig(config.FromMap(env))
			switch {
			case tc.bad && (err == nil || !strings.Contains(err.Error(), tc.name)):
				t.Fatalf("want an error naming %s, got %v", tc.name, err)
			case !tc.bad && err != nil:
				t.Fatal(err)
			case !tc.bad && tc.get(cfg) != tc.want:
				t.Fatalf("%s = %v, want %v", tc.name, tc.get(cfg), tc.want)
			}
		})
	}
}
