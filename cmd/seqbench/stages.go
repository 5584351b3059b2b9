package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// stage is one hop of a message's path, timed by a histogram a service
// exposes on its /metrics.
type stage struct {
	key    string // JSON key part: e2e_stage_<key>_p50_ms
	path   string // "ack", "deliver" or "both"
	what   string
	svc    string
	metric string
	labels string // the series' labels without le, as /metrics writes them; "" for none
}

// stages are the hops of an ACK and of a delivery, in path order. Rows
// whose histogram a service does not expose are left out of the table.
var stages = []stage{
	{"gw_produce", "ack", "gateway: command frame arrived → uplink acknowledged (acks=all)", "producer-gw",
		"seqflow_gateway_ack_stage_seconds", `stage="produce"`},
	{"seq_uplink_wait", "both", "sequencer: uplink record timestamp (gateway's produce call) → returned by a poll", "sequencer",
		"seqflow_sequencer_uplink_wait_seconds", ""},
	{"seq_prepare", "both", "sequencer, per batch: poll returned → events built (decode, dedup, segments)", "sequencer",
		"seqflow_sequencer_batch_stage_seconds", `stage="prepare"`},
	{"seq_produce", "both", "sequencer, per batch: produce and flush the events", "sequencer",
		"seqflow_sequencer_batch_stage_seconds", `stage="produce"`},
	{"seq_commit", "both", "sequencer, per batch: EndTxn (offsets, commit)", "sequencer",
		"seqflow_sequencer_batch_stage_seconds", `stage="commit"`},
	{"seq_total", "both", "sequencer, per batch: poll returned → committed", "sequencer",
		"seqflow_sequencer_batch_stage_seconds", `stage="total"`},
	{"push_read", "both", "pusher: event server_ts → returned by the pusher's poll", "pusher",
		"seqflow_pusher_read_latency_seconds", ""},
	{"push_handoff", "both", "pusher: event server_ts → its batch handed to the transport", "pusher",
		"seqflow_pusher_push_latency_seconds", ""},
	{"gw_push_lag", "both", "gateway, per batch: pusher handed it over → gateway received it", "producer-gw",
		"seqflow_gateway_push_batch_lag_seconds", ""},
	{"seq_direct_ack", "ack", "sequencer, per direct-ACK send: End returned → written to the gateway", "sequencer",
		"seqflow_sequencer_direct_ack_seconds", ""},
	{"gw_seq_from_sequencer", "ack", "gateway: event server_ts → the sequencer's direct ACK arrived (every copy)", "producer-gw",
		"seqflow_gateway_seq_arrival_seconds", `source="sequencer"`},
	{"gw_seq_from_pusher", "ack", "gateway: event server_ts → the pusher's copy arrived (every copy)", "producer-gw",
		"seqflow_gateway_seq_arrival_seconds", `source="pusher"`},
	{"gw_seq_wait", "ack", "gateway: uplink acknowledged → seq arrived", "producer-gw",
		"seqflow_gateway_ack_stage_seconds", `stage="seq_wait"`},
	{"gw_from_sequencer", "ack", "gateway: event server_ts (sequencer, before commit) → seq arrived", "producer-gw",
		"seqflow_gateway_ack_stage_seconds", `stage="from_sequencer"`},
	{"gw_ack", "ack", "gateway: command frame arrived → ACK with seq queued", "producer-gw",
		"seqflow_gateway_ack_seconds", `status="ok"`},
}

// counters are series whose change over the paced run goes into the
// stage table as it is (counts, and the _sum and _count of a histogram
// whose mean matters, such as records per batch).
// A counter sums every series named name whose labels contain labels.
var counters = []struct{ svc, name, labels, what string }{
	{"sequencer", "seqflow_sequencer_batch_records_count", "", "sequencer: transactions"},
	{"sequencer", "seqflow_sequencer_batch_records_sum", "", "sequencer: records in them"},
	{"sequencer", "seqflow_sequencer_poll_merges_total", `result="merged"`, "sequencer: polls joined by the next fetch"},
	{"sequencer", "seqflow_sequencer_poll_merges_total", `result="none"`, "sequencer: polls whose next fetch did not come in time"},
	{"pusher", "seqflow_pusher_poll_records_count", "", "pusher: polls"},
	{"pusher", "seqflow_pusher_poll_records_sum", "", "pusher: records in them"},
	{"producer-gw", "seqflow_gateway_seq_results_total", `matched="true",source="sequencer"`, "gateway: ACKs answered by the sequencer's direct ACK"},
	{"producer-gw", "seqflow_gateway_seq_results_total", `matched="true",source="pusher"`, "gateway: ACKs answered by the pusher's event"},
	{"producer-gw", "seqflow_gateway_seq_before_produce_ack_total", "", "gateway: of those, seqs that came before Kafka's answer to the uplink's produce"},
	{"sequencer", "seqflow_sequencer_direct_acks_total", `result="sent"`, "sequencer: direct ACKs sent"},
	{"sequencer", "seqflow_sequencer_direct_acks_total", `result="dropped"`, "sequencer: direct ACKs dropped (queue full)"},
	{"sequencer", "seqflow_sequencer_direct_acks_total", `result="failed"`, "sequencer: direct ACKs failed"},
	{"sequencer", "seqflow_sequencer_direct_acks_total", `result="no_receiver"`, "sequencer: direct ACKs without a receiver"},
	{"producer-gw", "seqflow_kafka_produce_batches_total", "", "gateway: record batches produced"},
	{"producer-gw", "seqflow_kafka_produce_records_total", "", "gateway: records in them"},
	{"producer-gw", "seqflow_gateway_requests_total", `op="delivered"`, "gateway: delivered frames from clients"},
	{"producer-gw", "seqflow_gateway_receipts_total", `kind="delivery"`, "gateway: delivery receipts produced"},
}

// hist is one histogram series: cumulative counts per upper bound.
type hist struct {
	les    []float64
	counts []float64
}

// metricsSnap is every histogram series of every service, by service and
// "name{labels}", and under "plain:"+service every other sample.
type metricsSnap map[string]map[string]*hist

// snapMetrics reads the /metrics of every service of s; a service that
// does not answer is left out.
func (s *services) snapMetrics(ctx context.Context) metricsSnap {
	out := metricsSnap{}
	for _, p := range s.procs {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		h, plain, err := scrapeHistograms(ctx, "http://"+p.Admin+"/metrics")
		cancel()
		if err == nil {
			out[p.Name], out["plain:"+p.Name] = h, plain
		}
	}
	return out
}

func scrapeHistograms(ctx context.Context, url string) (map[string]*hist, map[string]*hist, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	return parseHistograms(resp.Body)
}

// parseHistograms reads a Prometheus text exposition: the _bucket lines
// as histograms, every other sample as a one-bucket hist keyed
// "name{labels}".
func parseHistograms(r io.Reader) (map[string]*hist, map[string]*hist, error) {
	out, plain := map[string]*hist{}, map[string]*hist{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		name, rest, ok := strings.Cut(line, "_bucket{")
		if !ok {
			series, value, ok := strings.Cut(line, " ")
			if !ok {
				continue
			}
			if !strings.Contains(series, "{") {
				series += "{}"
			}
			if v, err := strconv.ParseFloat(strings.Fields(value)[0], 64); err == nil {
				plain[series] = &hist{les: []float64{math.Inf(1)}, counts: []float64{v}}
			}
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		var le float64
		var keep []string
		for _, l := range splitLabels(labels) {
			if v, ok := strings.CutPrefix(l, "le="); ok {
				var err error
				if le, err = strconv.ParseFloat(strings.Trim(v, `"`), 64); err != nil {
					return nil, nil, fmt.Errorf("parse le of %q: %w", line, err)
				}
				continue
			}
			keep = append(keep, l)
		}
		n, err := strconv.ParseFloat(strings.Fields(value)[0], 64)
		if err != nil {
			return nil, nil, fmt.Errorf("parse count of %q: %w", line, err)
		}
		key := name + "{" + strings.Join(keep, ",") + "}"
		h := out[key]
		if h == nil {
			h = &hist{}
			out[key] = h
		}
		h.les = append(h.les, le)
		h.counts = append(h.counts, n)
	}
	return out, plain, sc.Err()
}

// splitLabels splits a{x="1",y="2"}'s inside at the commas between labels;
// values of these services' labels hold no commas or quotes.
func splitLabels(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// sub returns h minus its earlier snapshot h0 (nil: nothing before).
func (h *hist) sub(h0 *hist) *hist {
	d := &hist{les: h.les, counts: make([]float64, len(h.counts))}
	copy(d.counts, h.counts)
	if h0 != nil && len(h0.counts) == len(h.counts) {
		for i := range d.counts {
			d.counts[i] -= h0.counts[i]
		}
	}
	return d
}

func (h *hist) total() float64 {
	if len(h.counts) == 0 {
		return 0
	}
	return h.counts[len(h.counts)-1]
}

// quantile interpolates linearly inside the bucket that holds q, as
// Prometheus' histogram_quantile does; the +Inf bucket answers its lower
// bound. NaN when the histogram is empty.
func (h *hist) quantile(q float64) float64 {
	idx := make([]int, len(h.les))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return h.les[idx[a]] < h.les[idx[b]] })
	n := h.total()
	if n <= 0 {
		return math.NaN()
	}
	rank := q * n
	lower, below := 0.0, 0.0
	for _, i := range idx {
		if h.counts[i] >= rank {
			if math.IsInf(h.les[i], 1) {
				return lower
			}
			in := h.counts[i] - below
			if in <= 0 {
				return h.les[i]
			}
			return lower + (h.les[i]-lower)*(rank-below)/in
		}
		lower, below = h.les[i], h.counts[i]
	}
	return lower
}

// stageRow is one measured stage of a run.
type stageRow struct {
	stage
	n              float64
	p50, p99, p999 float64 // ms
}

// stageRows diffs two snapshots taken around a run into one row per stage
// whose histogram was exposed.
func stageRows(before, after metricsSnap) []stageRow {
	var rows []stageRow
	for _, st := range stages {
		key := st.metric + "{" + st.labels + "}"
		h := after[st.svc][key]
		if h == nil {
			continue
		}
		d := h.sub(before[st.svc][key])
		rows = append(rows, stageRow{stage: st, n: d.total(),
			p50: d.quantile(0.5) * 1000, p99: d.quantile(0.99) * 1000, p999: d.quantile(0.999) * 1000})
	}
	return rows
}

// counterRows is "what: change" for every counter of counters exposed.
func counterRows(before, after metricsSnap) []string {
	var out []string
	for _, c := range counters {
		var n float64
		found := false
		for series, h := range after["plain:"+c.svc] {
			name, labels, _ := strings.Cut(series, "{")
			if name != c.name || !strings.Contains(labels, c.labels) {
				continue
			}
			found = true
			n += h.sub(before["plain:"+c.svc][series]).total()
		}
		if found {
			out = append(out, fmt.Sprintf("%s: %.0f", c.what, n))
		}
	}
	return out
}

// stageTable renders rows as the doc's markdown table.
func stageTable(rows []stageRow) string {
	var b strings.Builder
	b.WriteString("| stage | path | count | p50 ms | p99 ms | p999 ms | series |\n|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		series := r.metric
		if r.labels != "" {
			series += "{" + r.labels + "}"
		}
		fmt.Fprintf(&b, "| %s | %s | %.0f | %s | %s | %s | `%s` (%s) |\n", r.what, r.path, r.n, num(r.p50), num(r.p99), num(r.p999), series, r.svc)
	}
	return b.String()
}

// committedWatch reads the sequenced topic read_committed, as the pusher
// does, and times each event from its record timestamp (the sequencer's
// server_ts, taken before its transaction commits) to the poll that
// returned it: what the broker's transaction commit and a read_committed
// fetch cost, without the pusher's own work.
type committedWatch struct {
	cl   *kgo.Client
	done chan struct{}
	lat  []float64 // ms
}

// watchCommitted starts reading topic from its end.
func (b *Bench) watchCommitted(topic string) (*committedWatch, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.cfg.Brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	w := &committedWatch{cl: cl, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			fs := cl.PollFetches(context.Background())
			if fs.IsClientClosed() {
				return
			}
			now := time.Now()
			fs.EachRecord(func(r *kgo.Record) { w.lat = append(w.lat, float64(now.Sub(r.Timestamp))/float64(time.Millisecond)) })
		}
	}()
	return w, nil
}

// stop ends the watch and returns its row.
func (w *committedWatch) stop() stageRow {
	w.cl.Close()
	<-w.done
	sort.Float64s(w.lat)
	q := func(f float64) float64 {
		if len(w.lat) == 0 {
			return math.NaN()
		}
		return w.lat[min(len(w.lat)-1, int(f*float64(len(w.lat))))]
	}
	return stageRow{stage: stage{key: "committed_visible", path: "both",
		what: "broker: event's record timestamp (server_ts) → returned to a read_committed consumer of the bench (exact, ms timestamps)",
		svc:  "seqbench", metric: "(im.sequenced.v1 read by the bench)"}, n: float64(len(w.lat)), p50: q(0.5), p99: q(0.99), p999: q(0.999)}
}
