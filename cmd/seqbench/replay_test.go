package main

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/seqflow/seqflow/client/load"
)

func TestSplitByReplay(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	toggles := []toggle{{at: at(0), on: true}, {at: at(5000)}, {at: at(10000), on: true}}
	tests := []struct {
		name    string
		tl      []load.TimelinePoint
		on, off []float64
	}{
		{"before the replayer started: neither", []load.TimelinePoint{{At: at(-1), AckMs: 1}}, nil, nil},
		{"within settle after a switch: neither", []load.TimelinePoint{{At: at(0), AckMs: 1}, {At: at(999), AckMs: 2}, {At: at(5500), AckMs: 3}, {At: at(10999), AckMs: 4}}, nil, nil},
		{"copying and paused windows", []load.TimelinePoint{{At: at(1000), AckMs: 10}, {At: at(4999), AckMs: 30}, {At: at(6000), AckMs: 5}, {At: at(9999), AckMs: 7}}, []float64{10, 30}, []float64{5, 7}},
		{"after the last toggle", []load.TimelinePoint{{At: at(60000), AckMs: 9}}, []float64{9}, nil},
		{"sorted", []load.TimelinePoint{{At: at(2000), AckMs: 30}, {At: at(3000), AckMs: 10}, {At: at(4000), AckMs: 20}}, []float64{10, 20, 30}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			on, off := splitByReplay(tt.tl, toggles, time.Second)
			if !slices.Equal(on, tt.on) || !slices.Equal(off, tt.off) {
				t.Fatalf("got on %v off %v, want on %v off %v", on, off, tt.on, tt.off)
			}
		})
	}
}

// The lines the bench reads are printed by cmd/seqflow (replaytopic.go's
// runReplayer, export.go's runExport); a change there must show here.
func TestCommandLines(t *testing.T) {
	tests := []struct {
		name string
		re   func(string) []string
		line string
		want []string
	}{
		{"replay summary", replayDoneRE.FindStringSubmatch,
			"replay bench-1a2b complete: 1000000 events in 8 partitions of bench-x.im.replay.bench-1a2b.v1, each ending with its marker; this run copied 1000000 in 5.921s (168890 events/s)\n",
			[]string{"1000000", "1000000", "168890"}},
		{"export summary", exportDoneRE.FindStringSubmatch,
			"exported 1000000 events in 8 files (280043 events/s while reading)\n", []string{"1000000", "8", "280043"}},
		{"replay progress", replayProgressRE.FindStringSubmatch,
			"replay live-1:  13.4% of source offsets read (134000/1000016), 133992 events in the topic (133992 this run, 9297 events/s), 0/8 partitions done\n",
			[]string{"133992", "9297"}},
		{"not a summary", exportDoneRE.FindStringSubmatch, "exported some events\n", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := tt.re(tt.line)
			if tt.want == nil {
				if m != nil {
					t.Fatalf("matched %q", m)
				}
				return
			}
			if m == nil || !slices.Equal(m[1:], tt.want) {
				t.Fatalf("got %q, want %q", m, tt.want)
			}
		})
	}
}

func TestCPUSplit(t *testing.T) {
	t0 := time.Unix(1000, 0)
	snap := func(s int, kafka float64) cpuSnapshot {
		return cpuSnapshot{at: t0.Add(time.Duration(s) * time.Second), byGroup: map[string]float64{"kafka": kafka}}
	}
	// copying 0-2 s (0.6 CPU-s), paused 2-4 s (0.2), copying 4-5 s (0.4).
	toggles := []toggle{{on: true, cpu: snap(0, 10)}, {cpu: snap(2, 10.6)}, {on: true, cpu: snap(4, 10.8)}}
	on, off := cpuSplit(toggles, snap(5, 11.2), "kafka")
	if math.Abs(on-1000*1.0/3) > 1e-6 || math.Abs(off-100) > 1e-6 {
		t.Fatalf("got %v ms/s copying, %v paused; want 333.3 and 100", on, off)
	}
}
