package eventlog

import (
	"testing"
	"time"
)

func TestRetryBackoff(t *testing.T) {
	for _, tc := range []struct {
		fails    int
		min, max time.Duration
	}{
		{0, 16 * time.Millisecond, 20 * time.Millisecond},
		{1, 16 * time.Millisecond, 20 * time.Millisecond},
		{2, 32 * time.Millisecond, 40 * time.Millisecond},
		{4, 128 * time.Millisecond, 160 * time.Millisecond},
		{6, 512 * time.Millisecond, 640 * time.Millisecond},
		{7, 800 * time.Millisecond, MaxRetryBackoff},
		{60, 800 * time.Millisecond, MaxRetryBackoff},
		{1 << 30, 800 * time.Millisecond, MaxRetryBackoff},
	} {
		for range 200 {
			if d := RetryBackoff(tc.fails); d < tc.min || d > tc.max {
				t.Fatalf("RetryBackoff(%d) = %s, want within [%s, %s]", tc.fails, d, tc.min, tc.max)
			}
		}
	}
}

func TestHeartbeatInterval(t *testing.T) {
	for _, c := range []struct{ session, want time.Duration }{
		{6 * time.Second, 600 * time.Millisecond},
		{10 * time.Second, time.Second},
		{45 * time.Second, time.Second},
		{500 * time.Millisecond, 100 * time.Millisecond},
	} {
		if got := HeartbeatInterval(c.session); got != c.want {
			t.Errorf("HeartbeatInterval(%s) = %s, want %s", c.session, got, c.want)
		}
	}
}

// TestCodecNames: every name CheckCompression accepts has a codec in
// Compression's table, and the other way round.
func TestCodecNames(t *testing.T) {
	if len(codecNames) != len(codecs) {
		t.Fatalf("%d names for %d codecs", len(codecNames), len(codecs))
	}
	for _, n := range codecNames {
		if _, ok := codecs[n]; !ok {
			t.Fatalf("codec name %q has no codec", n)
		}
	}
	if _, ok := codecs[defaultCodec]; !ok {
		t.Fatalf("default codec %q has no codec", defaultCodec)
	}
}
