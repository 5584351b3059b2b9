package load

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seqflow/seqflow/internal/testkit/clienttest"
)

// TestRun drives a short paced run through two gateway processes of the
// real pipeline and checks the report: everything sent is acked and
// delivered once, in order, nothing lost, and the JSON keys the chaos and
// benchmark suites read are there. Under governance, what is not acked was
// refused by the rules, and the members at each message's seq got it.
func TestRun(t *testing.T) {
	p := clienttest.Start(t)
	g1, g2 := p.Gateway(t, "gw-1"), p.Gateway(t, "gw-2")
	cases := []struct {
		name string
		o    Options
		kill bool // kill -9 gw-1 a second into the send phase, restart it
	}{
		{name: "paced, direct and group sessions", o: Options{Users: 6, Sessions: 4, GroupShare: 0.5, GroupSize: 3, Rate: 100, Duration: 3 * time.Second}},
		{name: "as fast as possible", o: Options{Users: 4, Sessions: 2, GroupShare: 1, GroupSize: 4, Duration: 2 * time.Second, InFlight: 8}},
		{name: "a gateway killed mid-run loses nothing", o: Options{Users: 6, Sessions: 3, GroupShare: 1, GroupSize: 4, Rate: 100, Duration: 4 * time.Second}, kill: true},
		{name: "members change while sending", o: Options{Users: 6, Sessions: 2, GroupShare: 1, GroupSize: 4, Rate: 100, Duration: 5 * time.Second,
			Governance: 50 * time.Millisecond}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := c.o
			o.Gateways, o.Secret, o.BodyBytes, o.Drain = []string{g1.URL, g2.URL}, clienttest.Secret, 64, 20*time.Second
			bar := &syncBuffer{}
			o.Progress = bar
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			killed := make(chan struct{})
			if c.kill {
				go func() {
					defer close(killed)
					for !strings.Contains(bar.String(), "sent") { // the send phase began
						time.Sleep(20 * time.Millisecond)
					}
					time.Sleep(time.Second)
					g1.Proc.Kill()
					time.Sleep(500 * time.Millisecond)
					if err := g1.Proc.Restart(); err != nil {
						t.Error(err)
					}
				}()
			} else {
				close(killed)
			}
			rep, err := Run(ctx, o)
			<-killed
			if err != nil {
				t.Fatal(err)
			}
			if c.kill && rep.Reconnects == 0 {
				t.Fatalf("no client reconnected: the kill missed (%+v)", rep)
			}
			var tb strings.Builder
			_ = rep.Table(&tb)
			t.Logf("\n%s", tb.String())
			if rep.Sent < 20 || rep.Acked+rep.Refused != rep.Sent || rep.Failed != 0 || rep.Acked < rep.Sent/2 {
				t.Fatalf("sent %d acked %d refused %d failed %d: want at least 20, most acked, the rest refused", rep.Sent, rep.Acked, rep.Refused, rep.Failed)
			}
			// A member added to a group may find it by its catch-up and
			// start after its first events (SkipHistory): those are late,
			// or out of its reach once it is removed again.
			late, missed := rep.Late, rep.MissedBeforeRemoval
			if c.o.Governance == 0 && late+missed != 0 {
				t.Fatalf("%d late deliveries, %d missed before a removal", late, missed)
			}
			if rep.Delivered+late+missed != rep.Expected || rep.Lost != 0 || rep.Duplicated != 0 || rep.OutOfOrder != 0 ||
				rep.DeliveredAfterRemoval != 0 {
				t.Fatalf("delivered %d of %d, late %d lost %d missed before removal %d dup %d ooo %d after removal %d", rep.Delivered, rep.Expected,
					rep.Late, rep.Lost, rep.MissedBeforeRemoval, rep.Duplicated, rep.OutOfOrder, rep.DeliveredAfterRemoval)
			}
			if c.o.Governance > 0 {
				var ok int64
				for _, g := range rep.Governance {
					ok += g.OK
				}
				adds, removes := rep.Governance["add"].OK+rep.Governance["rejoin"].OK, rep.Governance["remove"].OK+rep.Governance["leave"].OK
				if ok < 20 || adds == 0 || removes == 0 || rep.Governance["mute"].OK == 0 || rep.Refused == 0 {
					t.Fatalf("governance %s, %d refused sends: want at least 20 accepted, adds, removals, mutes and refused sends", rep.GovernanceSummary(), rep.Refused)
				}
			}
			if rep.Sent+rep.Errors["window_full_at_end"]+rep.Errors["generator_queue_full"]+rep.Errors["sender_in_no_session"] != rep.Scheduled {
				t.Fatalf("scheduled %d = sent %d + not sent %v does not add up", rep.Scheduled, rep.Sent, rep.Errors)
			}
			// The pacer catches up after a stall, so only a box stalled at
			// the very end of the phase lands below the target.
			if want := c.o.Rate * c.o.Duration.Seconds(); c.o.Rate > 0 && (float64(rep.Scheduled) < 0.7*want || float64(rep.Scheduled) > want+1) {
				t.Fatalf("scheduled %d at rate %v for %v", rep.Scheduled, c.o.Rate, c.o.Duration)
			}
			if !(rep.AckP50Ms > 0 && rep.AckP50Ms <= rep.AckP90Ms && rep.AckP90Ms <= rep.AckP99Ms && rep.AckP99Ms <= rep.AckP999Ms &&
				rep.DeliverP50Ms > 0 && rep.DeliverP50Ms <= rep.DeliverP999Ms) {
				t.Fatalf("percentiles not ordered: %+v", rep)
			}
			b, _ := json.Marshal(rep)
			var keys map[string]any
			_ = json.Unmarshal(b, &keys)
			for _, k := range []string{"sent", "acked", "refused", "delivered", "delivered_after_removal", "governance_ops", "lost", "duplicated", "out_of_order", "ack_p50_ms", "ack_p90_ms",
				"ack_p99_ms", "ack_p999_ms", "deliver_p50_ms", "deliver_p90_ms", "deliver_p99_ms", "deliver_p999_ms", "duration_s", "rate_msgs_per_s"} {
				if _, ok := keys[k]; !ok {
					t.Fatalf("JSON report has no %q: %s", k, b)
				}
			}
			if !strings.Contains(bar.String(), "\r[") || !strings.Contains(bar.String(), "acked") {
				t.Fatalf("no progress bar drawn: %q", bar.String())
			}
		})
	}
}

// syncBuffer is a bytes.Buffer safe for the progress goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestQuantile(t *testing.T) {
	s := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	cases := []struct {
		q    float64
		want float64
	}{{0, 1}, {0.1, 1}, {0.5, 5}, {0.9, 9}, {0.91, 10}, {0.999, 10}, {1, 10}}
	for _, c := range cases {
		t.Run("", func(t *testing.T) {
			if got := Quantile(s, c.q); got != c.want {
				t.Fatalf("Quantile(%v) = %v, want %v", c.q, got, c.want)
			}
		})
	}
	if Quantile(nil, 0.5) != 0 {
		t.Fatal("quantile of no samples")
	}
}

func TestOptionsValidate(t *testing.T) {
	cases := []struct {
		name string
		o    Options
		want []string
	}{
		{"defaults need a secret", Options{}, []string{"Secret"}},
		{"valid", Options{Secret: "s"}, nil},
		{"too many direct sessions for the users", Options{Secret: "s", Users: 3, Sessions: 10, GroupShare: -1}, []string{"direct sessions"}},
		{"bad ranges", Options{Secret: "s", Users: 1, GroupShare: 2, Rate: -1, BodyBytes: 1 << 20}, []string{"Users", "GroupShare", "Rate", "BodyBytes"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := c.o
			err := o.defaults()
			if c.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("%q does not name %q", err, w)
				}
			}
		})
	}
}

func TestPlotHTMLIsSelfContained(t *testing.T) {
	rep := Report{Users: 2, AckSamples: []float64{1, 2, 3, 50}, DeliverSamples: []float64{2, 4, 8, 100, 900}}
	var b bytes.Buffer
	if err := rep.PlotHTML(&b); err != nil {
		t.Fatal(err)
	}
	s := b.String()
	for _, want := range []string{"<svg", "<polyline", "send→ACK", "send→deliver", "p99"} {
		if !strings.Contains(s, want) {
			t.Fatalf("plot has no %q", want)
		}
	}
	for _, bad := range []string{"<script", "src=", "href=", "@import"} {
		if strings.Contains(s, bad) {
			t.Fatalf("plot references something outside itself: %q", bad)
		}
	}
	if strings.Count(s, "<polyline") != 2 {
		t.Fatal("want one line per latency")
	}
}
