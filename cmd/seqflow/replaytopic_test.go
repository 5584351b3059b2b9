package main

import (
	"flag"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/schemas/imv1"
)

func TestParsePartitionRanges(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []*imv1.ReplayRange
		bad  bool
	}{
		{"", nil, false},
		{"0:10-20", []*imv1.ReplayRange{{Partition: 0, FromOffset: 10, ToOffset: 20}}, false},
		{"3:5-, 1:0-7", []*imv1.ReplayRange{{Partition: 3, FromOffset: 5, ToOffset: -1}, {Partition: 1, FromOffset: 0, ToOffset: 7}}, false},
		{"1:7-7", []*imv1.ReplayRange{{Partition: 1, FromOffset: 7, ToOffset: 7}}, false},
		{"1:8-7", nil, true},
		{"1:-7", nil, true},
		{"x:1-2", nil, true},
		{"1-2", nil, true},
		{"-1:1-2", nil, true},
		{"1:1-2,1:3-4", nil, true},
	} {
		got, err := parsePartitionRanges(tc.in)
		if (err != nil) != tc.bad {
			t.Errorf("%q: error %v, want bad %v", tc.in, err, tc.bad)
			continue
		}
		if len(got) != len(tc.want) {
			t.Errorf("%q: %v, want %v", tc.in, got, tc.want)
			continue
		}
		for i := range got {
			if !proto.Equal(got[i], tc.want[i]) {
				t.Errorf("%q: %v, want %v", tc.in, got, tc.want)
			}
		}
	}
}

func TestParseTimeAndRetention(t *testing.T) {
	for in, want := range map[string]int64{
		"": 0, "1700000000123": 1700000000123, "2026-12-04T10:00:00Z": 1796378400000, "2026-12-04T10:00:00.5+01:00": 1796374800500,
	} {
		if got, err := parseTime(in); err != nil || got != want {
			t.Errorf("parseTime(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"yesterday", "-5", "2026-12-04"} {
		if _, err := parseTime(in); err == nil {
			t.Errorf("parseTime(%q): no error", in)
		}
	}
	for in, want := range map[string]time.Duration{"forever": 0, "-1": 0, "0": 0, "7d": 7 * 24 * time.Hour, "90m": 90 * time.Minute} {
		if got, err := parseRetention(in); err != nil || got != want {
			t.Errorf("parseRetention(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	for _, in := range []string{"0d", "-2h", "week", "d"} {
		if _, err := parseRetention(in); err == nil {
			t.Errorf("parseRetention(%q): no error", in)
		}
	}
}

func TestParseNamedTakesFlagsOnEitherSide(t *testing.T) {
	for _, args := range [][]string{{"r1", "-rate", "5"}, {"-rate", "5", "r1"}} {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		rate := fs.Float64("rate", 0, "")
		name, err := parseNamed(fs, args)
		if err != nil || name != "r1" || *rate != 5 {
			t.Errorf("%q: name %q rate %v err %v", args, name, *rate, err)
		}
	}
	for _, args := range [][]string{{}, {"a.b"}, {"r1", "r2"}} {
		if _, err := parseNamed(flag.NewFlagSet("x", flag.ContinueOnError), args); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}
