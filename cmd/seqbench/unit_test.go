package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seqflow/seqflow/client/load"
	"github.com/seqflow/seqflow/internal/config"
	"github.com/seqflow/seqflow/internal/testkit/chaos"
)

func TestParseBench(t *testing.T) {
	tests := []struct {
		name  string
		out   string
		bench string
		unit  string
		want  float64
		err   bool
	}{
		{"sequencer line", "goos: linux\nBenchmarkSequencer_Throughput-2   \t       1\t6361789209 ns/op\t     31428 sequencer_msgs/s\t    155244 kafka_ceiling_msgs/s\t         0.2024 ratio\nPASS\n",
			"BenchmarkSequencer_Throughput", "kafka_ceiling_msgs/s", 155244, false},
		{"no procs suffix", "BenchmarkAlloc_Segment 1000 12 ns/op 2065465 seqs/s\n", "BenchmarkAlloc_Segment", "seqs/s", 2065465, false},
		{"last of several", "BenchmarkX-2 1 1 ns/op 5 a/s\nBenchmarkX-2 1 1 ns/op 7 a/s\n", "BenchmarkX", "a/s", 7, false},
		{"log line with Benchmark prefix", "BenchmarkX-2 starting now\n", "BenchmarkX", "a/s", 0, true},
		{"missing unit", "BenchmarkX-2 1 1 ns/op\n", "BenchmarkX", "a/s", 0, true},
		{"failed benchmark", "--- FAIL: BenchmarkX\nFAIL\n", "BenchmarkX", "a/s", 0, true},
		{"sub-benchmark name keeps its dash part", "BenchmarkY/a-b-2 3 1 ns/op 9 a/s\n", "BenchmarkY/a-b", "a/s", 9, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := metric(ParseBench([]byte(tt.out)), tt.bench, tt.unit)
			if (err != nil) != tt.err {
				t.Fatalf("err = %v, want error %v", err, tt.err)
			}
			if got != tt.want {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestSplice(t *testing.T) {
	tests := []struct {
		name, doc, want string
	}{
		{"markers replaced, rest kept", "# B\n\n" + beginMarker + "\nold\n" + endMarker + "\n\n## Other\nkept\n",
			"# B\n\n" + beginMarker + "\nnew\n" + endMarker + "\n\n## Other\nkept\n"},
		{"no markers: after the title", "# B\n\nintro\n", "# B\n\n" + beginMarker + "\nnew\n" + endMarker + "\n\nintro\n"},
		{"no title", "text\n", beginMarker + "\nnew\n" + endMarker + "\n\ntext\n"},
		{"empty doc", "", beginMarker + "\nnew\n" + endMarker + "\n\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := string(Splice([]byte(tt.doc), "new\n"))
			if got != tt.want {
				t.Fatalf("got\n%q\nwant\n%q", got, tt.want)
			}
			if again := string(Splice([]byte(got), "new\n")); again != got {
				t.Fatalf("second splice changed the doc:\n%q", again)
			}
		})
	}
}

func TestVerdict(t *testing.T) {
	find := func(key string) Target {
		for _, tg := range Targets {
			if tg.Key == key {
				return tg
			}
		}
		t.Fatalf("no target %s", key)
		return Target{}
	}
	tests := []struct {
		name string
		key  string
		vals map[string]float64
		want string
	}{
		{"sequencer met", "sequencer_msgs_per_s", map[string]float64{"sequencer_msgs_per_s": 60_000, "kafka_ceiling_msgs_per_s": 150_000}, "yes"},
		{"sequencer under ratio", "sequencer_msgs_per_s", map[string]float64{"sequencer_msgs_per_s": 60_000, "kafka_ceiling_msgs_per_s": 300_000}, "no"},
		{"sequencer without ceiling", "sequencer_msgs_per_s", map[string]float64{"sequencer_msgs_per_s": 60_000}, "not measured"},
		{"alloc both ratios", "alloc_segment_per_s", map[string]float64{"alloc_segment_per_s": 2e6, "alloc_pg_update_per_s": 3e3, "alloc_redis_incr_per_s": 3e4}, "yes"},
		{"alloc redis too close", "alloc_segment_per_s", map[string]float64{"alloc_segment_per_s": 2e6, "alloc_pg_update_per_s": 3e3, "alloc_redis_incr_per_s": 3e5}, "no"},
		{"e2e rate with loss", "e2e_max_msgs_per_s", map[string]float64{"e2e_max_msgs_per_s": 20_000, "e2e_max_lost": 1}, "no"},
		{"e2e rate without loss", "e2e_max_msgs_per_s", map[string]float64{"e2e_max_msgs_per_s": 20_000, "e2e_max_lost": 0}, "yes"},
		{"e2e rate below issue 24's", "e2e_max_msgs_per_s", map[string]float64{"e2e_max_msgs_per_s": 14_000, "e2e_max_lost": 0}, "no"},
		{"deliver p999 over 60 ms", "e2e_deliver_p999_ms", map[string]float64{"e2e_deliver_p999_ms": 61}, "no"},
		{"rss per conn over", "gateway_rss_bytes_per_conn", map[string]float64{"gateway_rss_bytes_per_conn": 51_201}, "no"},
		{"no goal", "kafka_ceiling_msgs_per_s", map[string]float64{"kafka_ceiling_msgs_per_s": 1}, "—"},
		{"missing", "fanout_10k_deliver_p99_ms", map[string]float64{}, "not measured"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := verdict(find(tt.key), tt.vals); got != tt.want {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestNum(t *testing.T) {
	tests := []struct {
		v    float64
		want string
	}{{0.123, "0.12"}, {12.34, "12.3"}, {999, "999"}, {1000, "1,000"}, {2065465.4, "2,065,465"}, {-12345, "-12,345"}}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := num(tt.v); got != tt.want {
				t.Fatalf("num(%v) = %q, want %q", tt.v, got, tt.want)
			}
		})
	}
}

func TestLoadConfig(t *testing.T) {
	base := map[string]string{"SEQFLOW_KAFKA_BROKERS": "127.0.0.1:19092", "SEQFLOW_PG_URL": "postgres://x", "SEQFLOW_REDIS_ADDR": "127.0.0.1:16379"}
	tests := []struct {
		name  string
		set   map[string]string
		unset string
		err   string
	}{
		{"defaults", nil, "", ""},
		{"unknown phase", map[string]string{"SEQBENCH_PHASES": "e2e,warp"}, "", `unknown phase "warp"`},
		{"bad idle conns", map[string]string{"SEQBENCH_IDLE_CONNS": "lots"}, "", "SEQBENCH_IDLE_CONNS"},
		{"online not below members", map[string]string{"SEQBENCH_FANOUT_ONLINE": "10000"}, "", "SEQBENCH_FANOUT_ONLINE"},
		{"no brokers", nil, "SEQFLOW_KAFKA_BROKERS", "SEQFLOW_KAFKA_BROKERS"},
		{"no pg", nil, "SEQFLOW_PG_URL", "SEQFLOW_PG_URL is required"},
		{"service env without a value", map[string]string{"SEQBENCH_SERVICE_ENV": "GOMAXPROCS=1 GOGC"}, "", `SEQBENCH_SERVICE_ENV: "GOGC" is not NAME=value`},
		{"service env without a name", map[string]string{"SEQBENCH_SERVICE_ENV": "=1"}, "", `SEQBENCH_SERVICE_ENV: "=1" is not NAME=value`},
		{"negative delivered interval", map[string]string{"SEQBENCH_DELIVERED_INTERVAL": "-1s"}, "", "SEQBENCH_DELIVERED_INTERVAL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := map[string]string{}
			for k, v := range base {
				m[k] = v
			}
			for k, v := range tt.set {
				m[k] = v
			}
			delete(m, tt.unset)
			c, err := LoadConfig(config.FromMap(m))
			if tt.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				if c.IdleConns != 19_000 || c.FixedRate != 2000 || len(c.Phases) != len(Phases) || len(c.ServiceEnv) != 0 || c.DeliveredInterval != 0 {
					t.Fatalf("defaults not applied: %+v", c)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("err = %v, want it to mention %q", err, tt.err)
			}
		})
	}
	m := map[string]string{"SEQBENCH_SERVICE_ENV": " GOMAXPROCS=1  GOGC=200 ", "SEQBENCH_DELIVERED_INTERVAL": "1s"}
	for k, v := range base {
		m[k] = v
	}
	c, err := LoadConfig(config.FromMap(m))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.ServiceEnv, []string{"GOMAXPROCS=1", "GOGC=200"}) {
		t.Fatalf("SEQBENCH_SERVICE_ENV parsed as %q", c.ServiceEnv)
	}
	if c.DeliveredInterval != time.Second {
		t.Fatalf("SEQBENCH_DELIVERED_INTERVAL parsed as %v", c.DeliveredInterval)
	}
}

// FuzzParseBench: go test output is outside input; parsing must not
// panic and every line it returns must carry a Benchmark name.
func FuzzParseBench(f *testing.F) {
	f.Add([]byte("BenchmarkX-2 1 1 ns/op 5 a/s\n"))
	f.Add([]byte("BenchmarkX-2 starting\nPASS\n"))
	f.Add([]byte("Benchmark-1 1 NaN x\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, l := range ParseBench(b) {
			if !strings.HasPrefix(l.Name, "Benchmark") || l.N <= 0 {
				t.Fatalf("bad line %+v", l)
			}
		}
	})
}

func TestSummaryNamesMisses(t *testing.T) {
	r := newResults()
	r.set("idle_conns", 500, "x")
	r.set("fanout_10k_deliver_p99_ms", 50, "x")
	s := Summary(r)
	for _, want := range []string{"missed: idle_conns", "targets met 1, missed 1"} {
		if !strings.Contains(s, want) {
			t.Fatalf("summary %q lacks %q", s, want)
		}
	}
}

func TestCPUTable(t *testing.T) {
	before := cpuSnapshot{byGroup: map[string]float64{"kafka": 10, "producer-gw": 1}, busy: 100, total: 200}
	after := cpuSnapshot{byGroup: map[string]float64{"kafka": 13, "producer-gw": 2, "gone": 0}, busy: 104, total: 208}
	tests := []struct {
		name  string
		msgs  float64
		wants []string
	}{
		{"per message", 2000, []string{"busy 50% of 8 CPU-seconds", "| kafka | 3.0 | 75% | 1500.0 |", "| producer-gw | 1.0 | 25% | 500.0 |"}},
		{"no messages", 0, []string{"| kafka | 3.0 | 75% | — |"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := cpuTable(before, after, tt.msgs)
			for _, w := range tt.wants {
				if !strings.Contains(got, w) {
					t.Fatalf("table lacks %q:\n%s", w, got)
				}
			}
			if strings.Contains(got, "gone") {
				t.Fatalf("a group without CPU in the window is listed:\n%s", got)
			}
			if strings.Index(got, "kafka") > strings.Index(got, "producer-gw") {
				t.Fatalf("rows not sorted by CPU:\n%s", got)
			}
		})
	}
}

func TestMedianReport(t *testing.T) {
	reps := []load.Report{
		{Sent: 10, Acked: 10, AckP50Ms: 30, AckP99Ms: 143, DeliverP999Ms: 194, RateMsgsPerS: 1999, Errors: map[string]int64{"x": 1}},
		{Sent: 11, Acked: 11, Lost: 1, AckP50Ms: 15, AckP99Ms: 69, DeliverP999Ms: 103, RateMsgsPerS: 2000},
		{Sent: 12, Acked: 12, AckP50Ms: 20, AckP99Ms: 90, DeliverP999Ms: 120, RateMsgsPerS: 1998, Errors: map[string]int64{"x": 2}},
	}
	got := medianReport(reps)
	if got.AckP50Ms != 20 || got.AckP99Ms != 90 || got.DeliverP999Ms != 120 || got.RateMsgsPerS != 1999 {
		t.Fatalf("medians: %+v", got)
	}
	if got.Sent != 33 || got.Acked != 33 || got.Lost != 1 || got.Errors["x"] != 3 {
		t.Fatalf("sums: %+v", got)
	}
	if two := medianReport(reps[:2]); two.AckP99Ms != 106 {
		t.Fatalf("median of two p99s: %v, want their mean 106", two.AckP99Ms)
	}
}

// TestReplicatedAuditIgnoresDeliveryLag: the replicated phase fails a run
// for what its audit found, not for the delivery lag it measures.
func TestReplicatedAuditIgnoresDeliveryLag(t *testing.T) {
	rep := &chaos.Report{Failures: []string{"delivery_lag = 2", "lost = 1"}}
	if got := auditFailures(rep); len(got) != 1 || got[0] != "lost = 1" {
		t.Fatalf("audit failures %q, want only the loss", got)
	}
	if got := auditFailures(&chaos.Report{Failures: []string{"delivery_lag = 1"}}); len(got) != 0 {
		t.Fatalf("audit failures %q of a run that only lagged", got)
	}
}
