package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Markers delimit the generated section of the doc; the rest of the file
// belongs to the people who wrote it and is left as it is.
const (
	beginMarker = "<!-- bench:begin -->"
	endMarker   = "<!-- bench:end -->"
)

// Results are what a run measured: Values are the report's JSON keys
// (all numbers), Sources the command that measured each, Details the
// per-phase tables of the doc, Failures the phases that did not finish.
type Results struct {
	Values   map[string]float64
	Sources  map[string]string
	Details  []string
	Failures []string
}

func newResults() *Results {
	return &Results{Values: map[string]float64{}, Sources: map[string]string{}}
}

func (r *Results) set(key string, v float64, source string) {
	r.Values[key] = v
	r.Sources[key] = source
}

// Target is one goal of issue 9 over the values of a run.
type Target struct {
	Key  string
	Goal string
	// Met reports whether v (the key's value) meets the goal given all
	// values; ok is false when a value it needs was not measured.
	Met func(v float64, all map[string]float64) (met, ok bool)
}

func atLeast(x float64) func(float64, map[string]float64) (bool, bool) {
	return func(v float64, _ map[string]float64) (bool, bool) { return v >= x, true }
}

func atMost(x float64) func(float64, map[string]float64) (bool, bool) {
	return func(v float64, _ map[string]float64) (bool, bool) { return v <= x, true }
}

// ratioAtLeast: v ≥ floor and v ≥ k × all[other] for every (k, other).
func ratioAtLeast(floor float64, others map[string]float64) func(float64, map[string]float64) (bool, bool) {
	return func(v float64, all map[string]float64) (bool, bool) {
		met := v >= floor
		for key, k := range others {
			o, ok := all[key]
			if !ok {
				return false, false
			}
			met = met && v >= k*o
		}
		return met, true
	}
}

// Targets are the targets, in the order of the doc's table.
var Targets = []Target{
	// The e2e targets are issue 24's (issue 9's were 10,000 msg/s and a
	// deliver p999 of 100 ms).
	{"e2e_max_msgs_per_s", "≥ 15,000 msg/s, 0 lost", func(v float64, all map[string]float64) (bool, bool) {
		lost, ok := all["e2e_max_lost"]
		return v >= 15_000 && lost == 0, ok
	}},
	{"e2e_ack_p50_ms", "(at 2,000 msg/s)", nil},
	{"e2e_ack_p99_ms", "≤ 30 ms at 2,000 msg/s", atMost(30)},
	{"e2e_deliver_p50_ms", "(at 2,000 msg/s)", nil},
	{"e2e_deliver_p99_ms", "≤ 30 ms at 2,000 msg/s", atMost(30)},
	{"e2e_deliver_p999_ms", "≤ 60 ms at 2,000 msg/s", atMost(60)},
	{"e2e_paced_cpu_ms_per_1k_total", "(at 2,000 msg/s, all processes)", nil},
	{"sequencer_msgs_per_s", "≥ 50,000 and ≥ 0.3 × Kafka ceiling", ratioAtLeast(50_000, map[string]float64{"kafka_ceiling_msgs_per_s": 0.3})},
	{"kafka_ceiling_msgs_per_s", "(ceiling)", nil},
	{"persister_rows_per_s", "≥ 50,000 and ≥ 0.5 × COPY ceiling", ratioAtLeast(50_000, map[string]float64{"copy_ceiling_rows_per_s": 0.5})},
	{"copy_ceiling_rows_per_s", "(ceiling)", nil},
	{"alloc_segment_per_s", "≥ 100 × PG UPDATE and ≥ 10 × Redis INCR", ratioAtLeast(0, map[string]float64{"alloc_pg_update_per_s": 100, "alloc_redis_incr_per_s": 10})},
	{"alloc_pg_update_per_s", "(alternative)", nil},
	{"alloc_redis_incr_per_s", "(alternative)", nil},
	// 19,000: this sandbox's NOFILE hard limit is 20,000 descriptors for
	// the gateway's connections and everything else (issue 24).
	{"idle_conns", "≥ 19,000", atLeast(19_000)},
	{"gateway_rss_bytes_per_conn", "≤ 50 KiB (51,200 B)", atMost(50 << 10)},
	{"fanout_10k_deliver_p99_ms", "≤ 100 ms", atMost(100)},
	// Issue 25's: one message to a 100,000-member group, 1,000 online.
	{"fanout_100k_deliver_p99_ms", "≤ 100 ms", atMost(100)},
	// Issue 28's: the log's other readers, and what a replay costs the
	// live pipeline.
	{"replay_topic_events_per_s", "≥ 100,000 events/s", atLeast(100_000)},
	{"export_events_per_s", "≥ 100,000 events/s", atLeast(100_000)},
	{"e2e_ack_p99_replay_ratio", "≤ 1.2 (ACK p99 during a replay within 20 % of without)", atMost(1.2)},
	// The replicated topology (three brokers, two of each service).
	{"replicated_250_ack_p99_ms", "≤ 300 ms at 250 msg/s", atMost(300)},
	{"replicated_250_deliver_p99_ms", "≤ 1,000 ms at 250 msg/s", atMost(1000)},
	{"replicated_250_history_per_acked", "≤ 1.5 at 250 msg/s", atMost(1.5)},
	{"replicated_250_busy_pct", "(the machine, at 250 msg/s)", nil},
	{"replicated_500_ack_p99_ms", "(at 500 msg/s, as it comes out)", nil},
	{"replicated_500_deliver_p99_ms", "(at 500 msg/s)", nil},
	{"replicated_500_history_per_acked", "(at 500 msg/s)", nil},
	{"replicated_500_busy_pct", "(the machine, at 500 msg/s)", nil},
}

// Verdict is one target row: met is "yes", "no", "—" (no goal) or "not
// measured".
func verdict(t Target, vals map[string]float64) string {
	v, ok := vals[t.Key]
	switch {
	case !ok:
		return "not measured"
	case t.Met == nil:
		return "—"
	}
	met, ok := t.Met(v, vals)
	switch {
	case !ok:
		return "not measured"
	case met:
		return "yes"
	}
	return "no"
}

// writeJSON writes the values, sorted by key, to path.
func writeJSON(path string, vals map[string]float64) error {
	clean := map[string]float64{}
	for k, v := range vals {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			clean[k] = v
		}
	}
	b, err := json.MarshalIndent(clean, "", "  ")
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create report dir: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

// num formats a figure for the doc: thousands separators, one or two
// decimals below 100.
func num(v float64) string {
	switch {
	case math.Abs(v) < 10:
		return fmt.Sprintf("%.2f", v)
	case math.Abs(v) < 100:
		return fmt.Sprintf("%.1f", v)
	}
	s := fmt.Sprintf("%.0f", v)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}

// Section renders the generated part of the doc (without the markers).
func Section(facts []string, r *Results) string {
	var b strings.Builder
	b.WriteString("## Summary of the last `go tool task bench` (generated)\n\n")
	b.WriteString("Written by `cmd/seqbench` (run by `go tool task bench`, which calls\n`bash infra/local/bench.sh`); everything between the bench markers is\nreplaced on every run. Every figure below was measured in that one run by\nthe command given with it, on this machine:\n\n")
	for _, f := range facts {
		fmt.Fprintf(&b, "- %s\n", f)
	}
	b.WriteString("\n| key | value | target | met | measured by |\n|---|---|---|---|---|\n")
	for _, t := range Targets {
		v, ok := r.Values[t.Key]
		vs := "—"
		if ok {
			vs = num(v)
		}
		src := r.Sources[t.Key]
		if src != "" {
			src = "`" + src + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", t.Key, vs, t.Goal, verdict(t, r.Values), src)
	}
	var extra []string
	known := map[string]bool{}
	for _, t := range Targets {
		known[t.Key] = true
	}
	for k := range r.Values {
		if !known[k] {
			extra = append(extra, k)
		}
	}
	sort.Strings(extra)
	if len(extra) > 0 {
		b.WriteString("\nOther figures of the run (also in `.data/reports/bench.json`):\n\n| key | value | measured by |\n|---|---|---|\n")
		for _, k := range extra {
			fmt.Fprintf(&b, "| `%s` | %s | `%s` |\n", k, num(r.Values[k]), r.Sources[k])
		}
	}
	for _, d := range r.Details {
		b.WriteString("\n" + strings.TrimRight(d, "\n") + "\n")
	}
	if len(r.Failures) > 0 {
		b.WriteString("\nPhases that did not finish (their figures are \"not measured\"):\n\n")
		for _, f := range r.Failures {
			fmt.Fprintf(&b, "- %s\n", strings.ReplaceAll(f, "\n", " "))
		}
	}
	return b.String()
}

// Splice puts section between the markers of doc; a doc without markers
// gets them after its first line (the title), or at the top when it has
// no title.
func Splice(doc []byte, section string) []byte {
	block := beginMarker + "\n" + strings.TrimRight(section, "\n") + "\n" + endMarker + "\n"
	s := string(doc)
	i := strings.Index(s, beginMarker)
	j := strings.Index(s, endMarker)
	if i >= 0 && j > i {
		rest := s[j+len(endMarker):]
		rest = strings.TrimPrefix(rest, "\n")
		return []byte(s[:i] + block + rest)
	}
	if strings.HasPrefix(s, "# ") {
		k := strings.IndexByte(s, '\n')
		if k < 0 {
			return []byte(s + "\n\n" + block)
		}
		return []byte(s[:k+1] + "\n" + block + "\n" + strings.TrimLeft(s[k+1:], "\n"))
	}
	return []byte(block + "\n" + s)
}

// writeDoc rewrites the generated section of path.
func writeDoc(path, section string) error {
	doc, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("read doc: %w", err)
	}
	out := Splice(doc, section)
	if bytes.Equal(out, doc) {
		return nil
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		return fmt.Errorf("write doc: %w", err)
	}
	return nil
}

// Summary is the one line printed at the end.
func Summary(r *Results) string {
	met, missed, unmeasured := 0, 0, 0
	var misses []string
	for _, t := range Targets {
		if t.Met == nil {
			continue
		}
		switch verdict(t, r.Values) {
		case "yes":
			met++
		case "no":
			missed++
			misses = append(misses, t.Key)
		default:
			unmeasured++
		}
	}
	get := func(k string) string {
		if v, ok := r.Values[k]; ok {
			return num(v)
		}
		return "n/a"
	}
	s := fmt.Sprintf("bench: e2e %s msg/s, ack p99 %s ms, deliver p99 %s ms, sequencer %s msg/s, persister %s rows/s, idle %s conns at %s B/conn, fanout p99 %s ms, replay topic %s events/s, export %s events/s, ack p99 during a replay × %s, e2e CPU per message × %s the floor's; targets met %d, missed %d, not measured %d",
		get("e2e_max_msgs_per_s"), get("e2e_ack_p99_ms"), get("e2e_deliver_p99_ms"), get("sequencer_msgs_per_s"),
		get("persister_rows_per_s"), get("idle_conns"), get("gateway_rss_bytes_per_conn"), get("fanout_10k_deliver_p99_ms"),
		get("replay_topic_events_per_s"), get("export_events_per_s"), get("e2e_ack_p99_replay_ratio"), get("e2e_cpu_over_floor"),
		met, missed, unmeasured)
	if len(misses) > 0 {
		s += " (missed: " + strings.Join(misses, ", ") + ")"
	}
	return s
}
