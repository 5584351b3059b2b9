package main

import "testing"

func TestHistMean(t *testing.T) {
	const before = "# HELP x_seconds h\nx_seconds_bucket{le=\"+Inf\"} 4\nx_seconds_sum 2\nx_seconds_count 4\ny_seconds_count 9\n"
	const after = "x_seconds_bucket{le=\"+Inf\"} 8\nx_seconds_sum 4.5\nx_seconds_count 8\n"
	cases := []struct {
		name          string
		before, after string
		series        string
		want          float64
		ok            bool
	}{
		{"difference of the scrapes", before, after, "x_seconds", 0.625, true},
		{"from nothing", "", after, "x_seconds", 4.5 / 8, true},
		{"nothing observed in between", after, after, "x_seconds", 0, false},
		{"series absent", before, after, "z_seconds", 0, false},
		{"no second scrape", before, "", "x_seconds", 0, false},
		{"a longer name is not the series", "", "xx_seconds_count 3\nxx_seconds_sum 1\n", "x_seconds", 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := histMean(c.before, c.after, c.series)
			if ok != c.ok || got != c.want {
				t.Fatalf("histMean = %v, %v; want %v, %v", got, ok, c.want, c.ok)
			}
		})
	}
}

func TestQuantiles(t *testing.T) {
	cases := []struct {
		name string
		v    []float64
		q    float64
		want float64
	}{
		{"empty", nil, 0.99, 0},
		{"median of unsorted", []float64{5, 1, 3}, 0.5, 3},
		{"p99 of 100 is the 100th", func() []float64 {
			v := make([]float64, 100)
			for i := range v {
				v[i] = float64(100 - i)
			}
			return v
		}(), 0.99, 100},
		{"max", []float64{2, 9, 4}, 1, 9},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := quantiles(c.v)(c.q); got != c.want {
				t.Fatalf("quantile %v = %v, want %v", c.q, got, c.want)
			}
		})
	}
}
