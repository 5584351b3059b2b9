package load

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is the outcome of a run. Its JSON keys are stable: the chaos and
// benchmark suites read them.
type Report struct {
	Users      int     `json:"users"`
	Sessions   int     `json:"sessions"`
	Groups     int     `json:"groups"`
	GroupSize  int     `json:"group_size"`
	Gateways   int     `json:"gateways"`
	BodyBytes  int     `json:"body_bytes"`
	TargetRate float64 `json:"target_rate_msgs_per_s"` // 0: as fast as possible

	// Scheduled counts messages the generator meant to send; those not
	// sent are in Errors as window_full_at_end (a client's window was full
	// until the send phase ended) or generator_queue_full (paced: a user
	// was 4096 messages behind).
	Scheduled int64 `json:"scheduled"`
	// Sent counts messages posted; Acked those with an ok ACK (a seq);
	// Refused those a group's rules refused (IsRuleRefusal: muted,
	// not_a_member, ...), which are not sequenced and not expected
	// anywhere; Failed those answered with another final error or not
	// answered by the end of the drain. Sent = Acked + Refused + Failed.
	Sent    int64 `json:"sent"`
	Acked   int64 `json:"acked"`
	Refused int64 `json:"refused"`
	Failed  int64 `json:"failed"`
	// RefusedByCode splits Refused by error name; RefusedIDs lists them
	// as (session_id, client_msg_id).
	RefusedByCode map[string]int64 `json:"refused_by_code,omitempty"`
	RefusedIDs    [][2]string      `json:"-"`
	// Expected is acked messages times their recipients (the members at
	// the message's seq other than the sender); Delivered the distinct
	// (message, recipient) pairs of those handed to a recipient's app.
	// DeliveredAsHistory: messages handed to a member that was not one at
	// their seq (a rejoined member's gap filled from history).
	Expected           int64 `json:"expected_deliveries"`
	Delivered          int64 `json:"delivered"`
	DeliveredAsHistory int64 `json:"delivered_as_history,omitempty"`
	// Late: acked, not delivered by the end, but returned by a final sync
	// of the recipient. Lost: acked and neither delivered nor returned by
	// sync.
	Late int64 `json:"late"`
	Lost int64 `json:"lost"`
	// MissedBeforeRemoval: acked while a recipient was a member, never
	// handed to it, and out of its reach at the end because it is no
	// longer a member (sync is for members). Not counted in Lost.
	MissedBeforeRemoval int64 `json:"missed_before_removal,omitempty"`
	// DeliveredAfterRemoval: events of a group handed to a user at a seq
	// where it was not a member, that did not rejoin after it: a removed
	// member must get its removal and nothing after. Must be 0.
	DeliveredAfterRemoval int64 `json:"delivered_after_removal"`
	// GovernanceOps is every governance operation issued
	// (Options.Governance); Governance splits them by operation.
	GovernanceOps int64                   `json:"governance_ops"`
	Governance    map[string]GovernanceOp `json:"governance,omitempty"`
	// Duplicated: an event handed to an app twice, or one client message
	// under two seqs. OutOfOrder: an event handed over below a seq the app
	// already had for the session.
	Duplicated int64 `json:"duplicated"`
	OutOfOrder int64 `json:"out_of_order"`

	AckP50Ms      float64 `json:"ack_p50_ms"`
	AckP90Ms      float64 `json:"ack_p90_ms"`
	AckP99Ms      float64 `json:"ack_p99_ms"`
	AckP999Ms     float64 `json:"ack_p999_ms"`
	AckMaxMs      float64 `json:"ack_max_ms"`
	DeliverP50Ms  float64 `json:"deliver_p50_ms"`
	DeliverP90Ms  float64 `json:"deliver_p90_ms"`
	DeliverP99Ms  float64 `json:"deliver_p99_ms"`
	DeliverP999Ms float64 `json:"deliver_p999_ms"`
	DeliverMaxMs  float64 `json:"deliver_max_ms"`

	// DurationS is the send phase; RateMsgsPerS is Acked over it.
	DurationS    float64 `json:"duration_s"`
	RateMsgsPerS float64 `json:"rate_msgs_per_s"`

	// Client-side counters summed over all clients.
	Reconnects      int64 `json:"reconnects"`
	Resent          int64 `json:"resent"`
	RetryableErrors int64 `json:"retryable_errors"`
	GapFills        int64 `json:"gap_fills"`
	// Synced counts events the clients received in sync pages (gap
	// fills, catch-ups, resyncs: history fetched); SyncedPerAcked is it
	// over Acked.
	Synced         int64   `json:"synced"`
	SyncedPerAcked float64 `json:"synced_per_acked"`
	// SyncPages: sync requests of the clients' fills; SyncsPaced: those
	// that waited for a client's sync budget (client.Options.SyncBudget).
	SyncPages  int64 `json:"sync_pages"`
	SyncsPaced int64 `json:"syncs_paced"`
	// Errors counts final errors by name (and generator_queue_full when
	// the paced generator could not hand a message to a stalled user).
	Errors map[string]int64 `json:"errors"`

	// AckSamples and DeliverSamples are the sorted latencies in ms, for
	// the plot. DeliverSamples are the deliveries counted in Delivered:
	// an acked message to a member at its seq (not DeliveredAsHistory,
	// whose latency is how long the member was away).
	AckSamples     []float64 `json:"-"`
	DeliverSamples []float64 `json:"-"`
	// Timeline is every acked message's scheduled time and ACK latency,
	// in ACK order, when Options.Timeline is set.
	Timeline []TimelinePoint `json:"-"`
	// Minutes are the clients' recovery counters per minute of the send
	// phase (the last one partial).
	Minutes []ClientMinute `json:"minutes,omitempty"`
	// Deliveries are the deliveries of DeliverSamples with their
	// message's scheduled time, in no order (the chaos suite's delivery
	// lag per minute).
	Deliveries []DeliveryPoint `json:"-"`
}

// ClientMinute is what the clients' recovery did in one minute of the
// send phase: gap fills started, sync pages of fills, events received in
// sync pages, reconnects.
type ClientMinute struct {
	Minute     int   `json:"minute"`
	GapFills   int64 `json:"gap_fills"`
	SyncPages  int64 `json:"sync_pages"`
	Synced     int64 `json:"synced"`
	Reconnects int64 `json:"reconnects"`
}

// since is the increase from c to now, as minute i.
func (c ClientMinute) since(now ClientMinute, i int) ClientMinute {
	return ClientMinute{Minute: i, GapFills: now.GapFills - c.GapFills, SyncPages: now.SyncPages - c.SyncPages,
		Synced: now.Synced - c.Synced, Reconnects: now.Reconnects - c.Reconnects}
}

// DeliveryPoint is one delivery to a member: when its message was
// scheduled, and how many ms later the member's app had it.
type DeliveryPoint struct {
	At time.Time
	Ms float64
}

// TimelinePoint is one acked message: when it was scheduled, and how many
// ms later its ACK came.
type TimelinePoint struct {
	At    time.Time
	AckMs float64
}

// WindowMedians groups tl by the scheduled time into windows of width,
// from the first, and returns each non-empty window's median ACK latency
// in time order.
func WindowMedians(tl []TimelinePoint, width time.Duration) []float64 {
	if len(tl) == 0 || width <= 0 {
		return nil
	}
	start := tl[0].At
	for _, p := range tl {
		if p.At.Before(start) {
			start = p.At
		}
	}
	byWin := map[int64][]float64{}
	var wins []int64
	for _, p := range tl {
		w := int64(p.At.Sub(start) / width)
		if byWin[w] == nil {
			wins = append(wins, w)
		}
		byWin[w] = append(byWin[w], p.AckMs)
	}
	slices.Sort(wins)
	out := make([]float64, 0, len(wins))
	for _, w := range wins {
		v := byWin[w]
		slices.Sort(v)
		out = append(out, Quantile(v, 0.5))
	}
	return out
}

func (r *run) report(sendSecs float64) Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	o := r.o
	rep := Report{
		Users: o.Users, Sessions: o.Sessions, Groups: o.groups(), GroupSize: o.GroupSize, Gateways: len(o.Gateways),
		BodyBytes: o.BodyBytes, TargetRate: o.Rate,
		Scheduled: r.scheduled, Sent: r.posted, Acked: r.acked, Refused: int64(len(r.refused)),
		Failed: r.posted - r.acked - int64(len(r.refused)), Late: r.late, Lost: r.lost, MissedBeforeRemoval: r.missedRemoved,
		Duplicated: r.dups, OutOfOrder: r.ooo, DurationS: sendSecs, Errors: map[string]int64{},
		RefusedByCode: maps.Clone(r.refusedBy), RefusedIDs: slices.Clone(r.refused),
	}
	for k, v := range r.errs {
		rep.Errors[k] = v
	}
	if unanswered := r.posted - r.acked - r.failed - rep.Refused; unanswered > 0 {
		rep.Errors["unanswered"] = unanswered
	}
	for _, m := range r.msgs {
		if !m.acked {
			continue
		}
		rep.Expected += int64(len(m.expect))
		for u := range m.deliveredTo {
			if slices.Contains(m.expect, u) {
				rep.Delivered++
				rep.DeliverSamples = append(rep.DeliverSamples, m.deliveredMs[u])
				rep.Deliveries = append(rep.Deliveries, DeliveryPoint{At: m.at, Ms: m.deliveredMs[u]})
			} else {
				rep.DeliveredAsHistory++
			}
		}
	}
	if len(r.govOps) > 0 {
		rep.Governance = map[string]GovernanceOp{}
		for k, v := range r.govOps {
			c := *v
			c.Refused = maps.Clone(v.Refused)
			rep.Governance[k] = c
			rep.GovernanceOps += v.Issued
		}
	}
	for _, s := range r.sessions {
		if s.governed {
			rep.DeliveredAfterRemoval += s.gov.afterRemoval()
		}
	}
	if sendSecs > 0 {
		rep.RateMsgsPerS = float64(r.acked) / sendSecs
	}
	rep.Timeline = slices.Clone(r.timeline)
	rep.Minutes = slices.Clone(r.minutes)
	rep.AckSamples = slices.Clone(r.ackMs)
	slices.Sort(rep.AckSamples)
	slices.Sort(rep.DeliverSamples)
	a, d := rep.AckSamples, rep.DeliverSamples
	rep.AckP50Ms, rep.AckP90Ms, rep.AckP99Ms, rep.AckP999Ms, rep.AckMaxMs = Quantile(a, 0.5), Quantile(a, 0.9), Quantile(a, 0.99), Quantile(a, 0.999), Quantile(a, 1)
	rep.DeliverP50Ms, rep.DeliverP90Ms, rep.DeliverP99Ms, rep.DeliverP999Ms, rep.DeliverMaxMs = Quantile(d, 0.5), Quantile(d, 0.9), Quantile(d, 0.99), Quantile(d, 0.999), Quantile(d, 1)
	for _, c := range r.clients {
		st := c.Stats()
		rep.Reconnects += max(st.Connects-1, 0)
		rep.Resent += st.Resent
		rep.RetryableErrors += st.RetryableErrors
		rep.GapFills += st.Gaps
		rep.Synced += st.Synced
		rep.SyncPages += st.SyncPages
		rep.SyncsPaced += st.SyncsPaced
	}
	if r.acked > 0 {
		rep.SyncedPerAcked = float64(rep.Synced) / float64(r.acked)
	}
	return rep
}

// Quantile returns the q-quantile (0..1) of sorted samples by the
// nearest-rank method: the smallest sample with at least q of all samples
// at or below it. 0 for no samples.
func Quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// Table writes the report as a text table.
func (rep Report) Table(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	rate := "as fast as possible"
	if rep.TargetRate > 0 {
		rate = fmt.Sprintf("%.0f msg/s", rep.TargetRate)
	}
	fmt.Fprintf(w, "%d users, %d sessions (%d groups of %d), %d gateways, %d-byte bodies, target %s, %.1fs\n\n",
		rep.Users, rep.Sessions, rep.Groups, rep.GroupSize, rep.Gateways, rep.BodyBytes, rate, rep.DurationS)
	fmt.Fprintln(tw, "sent\tacked\trefused\tfailed\tdelivered\texpected\tlate\tlost\tduplicated\tout_of_order\tmsg/s\t")
	fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.0f\t\n", rep.Sent, rep.Acked, rep.Refused, rep.Failed, rep.Delivered, rep.Expected,
		rep.Late, rep.Lost, rep.Duplicated, rep.OutOfOrder, rep.RateMsgsPerS)
	fmt.Fprintln(tw, "\t\t\t\t\t\t\t\t\t\t\t")
	fmt.Fprintln(tw, "latency ms\tp50\tp90\tp99\tp99.9\tmax\tsamples\t")
	fmt.Fprintf(tw, "send→ACK\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%d\t\n", rep.AckP50Ms, rep.AckP90Ms, rep.AckP99Ms, rep.AckP999Ms, rep.AckMaxMs, len(rep.AckSamples))
	fmt.Fprintf(tw, "send→deliver\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%d\t\n", rep.DeliverP50Ms, rep.DeliverP90Ms, rep.DeliverP99Ms, rep.DeliverP999Ms, rep.DeliverMaxMs, len(rep.DeliverSamples))
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nclients: %d reconnects, %d resends, %d retryable errors, %d gap fills, %d sync pages (%d paced), %d events synced (%.2f per acked)\n",
		rep.Reconnects, rep.Resent, rep.RetryableErrors, rep.GapFills, rep.SyncPages, rep.SyncsPaced, rep.Synced, rep.SyncedPerAcked)
	if rep.GovernanceOps > 0 {
		fmt.Fprintf(w, "governance: %s\n", rep.GovernanceSummary())
		fmt.Fprintf(w, "refused sends: %d %s; delivered after removal %d, as history %d, missed before removal %d\n",
			rep.Refused, counts(rep.RefusedByCode), rep.DeliveredAfterRemoval, rep.DeliveredAsHistory, rep.MissedBeforeRemoval)
	}
	if len(rep.Errors) > 0 {
		_, err := fmt.Fprintf(w, "errors: %s\n", counts(rep.Errors))
		return err
	}
	return nil
}

// GovernanceSummary says in one line how many governance operations were
// issued, accepted, refused and failed, and each operation's count.
func (rep Report) GovernanceSummary() string {
	var ok, refused, failed int64
	per := map[string]int64{}
	for name, g := range rep.Governance {
		ok += g.OK
		failed += g.Failed
		for _, n := range g.Refused {
			refused += n
		}
		per[name] = g.Issued
	}
	return fmt.Sprintf("%d ops (%d ok, %d refused, %d failed) %s", rep.GovernanceOps, ok, refused, failed, counts(per))
}

// counts writes name=count pairs in name order.
func counts(m map[string]int64) string {
	parts := make([]string, 0, len(m))
	for k, v := range m {
		parts = append(parts, fmt.Sprintf("%s=%d", k, v))
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

// progress draws a progress bar until the returned stop is called or ctx
// ends; a no-op without Options.Progress.
func (r *run) progress(ctx context.Context, began time.Time) func() {
	if r.o.Progress == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	total := r.o.Duration
	go func() {
		defer close(done)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			r.draw(time.Since(began), total)
			select {
			case <-ctx.Done():
				r.draw(time.Since(began), total)
				return
			case <-t.C:
			}
		}
	}()
	return func() { cancel(); <-done }
}

func (r *run) draw(el, total time.Duration) {
	r.mu.Lock()
	sent, acked, del, failed, refused := r.posted, r.acked, r.delivered, r.failed, len(r.refused)
	r.mu.Unlock()
	frac := min(float64(el)/float64(max(total, 1)), 1)
	const width = 30
	n := int(frac * width)
	fmt.Fprintf(r.o.Progress, "\r[%s%s] %5.1fs sent %d acked %d delivered %d refused %d failed %d   ",
		strings.Repeat("#", n), strings.Repeat(".", width-n), el.Seconds(), sent, acked, del, refused, failed)
}
