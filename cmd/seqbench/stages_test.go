package main

import (
	"math"
	"strings"
	"testing"
)

const exposition = `# HELP seqflow_x_seconds x
# TYPE seqflow_x_seconds histogram
seqflow_x_seconds_bucket{stage="a",le="0.01"} 10
seqflow_x_seconds_bucket{stage="a",le="0.02"} 30
seqflow_x_seconds_bucket{stage="a",le="0.04"} 40
seqflow_x_seconds_bucket{stage="a",le="+Inf"} 40
seqflow_x_seconds_sum{stage="a"} 0.7
seqflow_x_seconds_count{stage="a"} 40
seqflow_y_total{result="merged"} 7
go_goroutines 12
`

func TestParseHistograms(t *testing.T) {
	h, plain, err := parseHistograms(strings.NewReader(exposition))
	if err != nil {
		t.Fatal(err)
	}
	a := h[`seqflow_x_seconds{stage="a"}`]
	if a == nil || len(a.les) != 4 || a.total() != 40 {
		t.Fatalf("histogram: %+v (all: %v)", a, h)
	}
	for series, want := range map[string]float64{`seqflow_y_total{result="merged"}`: 7, `go_goroutines{}`: 12, `seqflow_x_seconds_count{stage="a"}`: 40} {
		if got := plain[series]; got == nil || got.total() != want {
			t.Errorf("%s: %+v, want %v", series, got, want)
		}
	}
}

func TestHistQuantile(t *testing.T) {
	h, _, err := parseHistograms(strings.NewReader(exposition))
	if err != nil {
		t.Fatal(err)
	}
	full := h[`seqflow_x_seconds{stage="a"}`]
	before := &hist{les: full.les, counts: []float64{10, 10, 10, 10}}
	for _, tc := range []struct {
		name string
		h    *hist
		q    float64
		want float64
	}{
		{"inside the first bucket", full, 0.125, 0.005},
		{"median interpolated in the second", full, 0.5, 0.015},
		{"top of the third", full, 1, 0.04},
		{"difference of two snapshots", full.sub(before), 0.5, 0.01 + 0.01*15/20},
		{"all in +Inf answers its lower bound", &hist{les: []float64{0.01, math.Inf(1)}, counts: []float64{0, 5}}, 0.5, 0.01},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.h.quantile(tc.q); math.Abs(got-tc.want) > 1e-9 {
				t.Fatalf("quantile(%v) = %v, want %v", tc.q, got, tc.want)
			}
		})
	}
	if got := (&hist{les: []float64{1}, counts: []float64{0}}).quantile(0.5); !math.IsNaN(got) {
		t.Fatalf("empty histogram: %v, want NaN", got)
	}
}

func TestStageRowsSkipsAbsentSeries(t *testing.T) {
	after := metricsSnap{"sequencer": {`seqflow_sequencer_uplink_wait_seconds{}`: {les: []float64{0.01, math.Inf(1)}, counts: []float64{4, 4}}}}
	rows := stageRows(metricsSnap{}, after)
	if len(rows) != 1 || rows[0].key != "seq_uplink_wait" || rows[0].n != 4 || rows[0].p50 != 5 {
		t.Fatalf("rows %+v, want one seq_uplink_wait row of 4 with p50 5 ms", rows)
	}
}
