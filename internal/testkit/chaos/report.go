package chaos

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/seqflow/seqflow/client/load"
)

// FaultResult is one injected fault.
type FaultResult struct {
	N      int    `json:"n"`
	Kind   Kind   `json:"kind"`
	Target string `json:"target"`
	// AtS is when it was injected, seconds after the load's send phase
	// began; HoldS how long it lasted (to the restart or SIGCONT).
	AtS   float64 `json:"at_s"`
	HoldS float64 `json:"hold_s"`
	// RecoveryS: the longer of (injection → a probe round started after
	// it completed) and (end of the fault → the same after the end). The
	// end of a service fault is the restart or SIGCONT; the end of a
	// broker, Redis or PostgreSQL fault is when that part is back (a broker
	// restarted with every replica in sync, Redis answering, PostgreSQL
	// accepting connections): its own start-up is RestartS, not seqflow's.
	// The round started at the injection runs through the restart, so a
	// pipeline that cannot work without the part still counts it.
	RecoveryS float64 `json:"recovery_s"`
	// RestartS is how long the restart of an infrastructure part took
	// (0 for a service fault).
	RestartS float64 `json:"restart_s,omitempty"`
	// InFlight is, for a mid-send gateway kill, the commands in flight
	// through that gateway when it died.
	InFlight int `json:"in_flight,omitempty"`
	// FirstRound and AfterEnd are the probe rounds' stages: the round
	// started at the injection, and the one started after the end.
	FirstRound string `json:"first_round"`
	AfterEnd   string `json:"after_end"`
	Error      string `json:"error,omitempty"`
}

// Report is the outcome of a run; its JSON is .data/reports/chaos.json.
// The harm counters (lost, duplicated, seq_reused, seq_regressions,
// order_violations, undelivered_online, accepted_not_allowed,
// refused_in_log, delivered_after_removal, the erasures' and the details)
// must all be 0.
type Report struct {
	Seed      uint64  `json:"seed"`
	Short     bool    `json:"short"`
	RunID     string  `json:"run_id"`
	Started   string  `json:"started"`
	DurationS float64 `json:"duration_s"`
	Command   string  `json:"command,omitempty"`

	FaultsInjected int          `json:"faults_injected"`
	FaultsByKind   map[Kind]int `json:"faults_by_kind"`
	// Acked is the commands the clients were answered with a seq (load
	// and probes, as the proxies saw the ACKs).
	Acked int `json:"acked"`
	// Lost: acked but not in the log, or in the log but not in the store.
	Lost int `json:"lost"`
	// Duplicated: one client message with two seqs in the log, or two
	// rows in the store.
	Duplicated      int `json:"duplicated"`
	SeqReused       int `json:"seq_reused"`
	SeqRegressions  int `json:"seq_regressions"`
	OrderViolations int `json:"order_violations"`
	// UndeliveredOnline: (message, online recipient) pairs the recipient
	// got neither by push nor by sync (the load's lost).
	UndeliveredOnline int `json:"undelivered_online"`
	// AppDuplicates: events the SDK handed to an app twice (the load's
	// duplicated); AppOutOfOrder: below a seq it already had.
	AppDuplicates int `json:"app_duplicates"`
	AppOutOfOrder int `json:"app_out_of_order"`
	// AcceptedNotAllowed: events the groups' rules refuse at their seq
	// (Checks.AcceptedNotAllowed). RefusedInLog: sends the client was
	// told were refused that the log holds (Checks.RefusedInLog).
	// DeliveredAfterRemoval: events of a
	// group handed to a user removed from it (or gone) before them, that
	// did not rejoin after (the load's delivered_after_removal).
	AcceptedNotAllowed    int `json:"accepted_not_allowed"`
	RefusedInLog          int `json:"refused_in_log"`
	DeliveredAfterRemoval int `json:"delivered_after_removal"`

	// Not harm, what the governance in the load did: GovernanceOps
	// issued; Refused, the load's sends its groups' rules refused (muted,
	// not_a_member, ...), neither acked nor lost; MissedBeforeRemoval,
	// acked while a recipient was a member, never handed to it, and out of
	// its reach once removed.
	GovernanceOps       int `json:"governance_ops"`
	Refused             int `json:"refused"`
	MissedBeforeRemoval int `json:"missed_before_removal"`

	// DeliveryLag is the harm of late deliveries: the minutes of the send
	// phase clear of every fault's window (injection to end of hold plus
	// the recovery target) whose deliver p99 was over DeliverP99BoundMs.
	// DeliveryMinutes has every minute's figures.
	DeliveryLag       int              `json:"delivery_lag"`
	DeliverP99BoundMs float64          `json:"deliver_p99_bound_ms"`
	DeliveryMinutes   []DeliveryMinute `json:"delivery_minutes,omitempty"`
	// BusyPct: how busy the machine was over the send phase (all cores).
	// CPUCores: the cores each group of processes used over it (a process
	// restarted meanwhile counts from its restart only).
	BusyPct  float64            `json:"busy_pct"`
	CPUCores map[string]float64 `json:"cpu_cores,omitempty"`

	// Erasures: victims erased during the run (Checks.Erasure has the
	// rest, and the erasures' harm counters).
	Erasures int `json:"erasures"`

	MaxRecoveryS map[Kind]float64 `json:"max_recovery_s"`
	// RecoveryTargetS is the session timeout plus 5s; RecoveryLimitS the
	// bound past which a fault counts as not recovered (a failure).
	RecoveryTargetS float64 `json:"recovery_target_s"`
	// ProbeBaseline is the stages of the probe round before any fault.
	ProbeBaseline  string  `json:"probe_baseline"`
	RecoveryLimitS float64 `json:"recovery_limit_s"`
	OverTarget     int     `json:"faults_over_recovery_target"`

	Checks    Checks        `json:"checks"`
	Load      load.Report   `json:"load"`
	LoadError string        `json:"load_error,omitempty"`
	Faults    []FaultResult `json:"faults"`
	// Victims are the users erased in the load, with what they sent and
	// how their erasure went.
	Victims []Victim          `json:"victims,omitempty"`
	Config  map[string]string `json:"config"`

	// OK says every harm counter is 0, every fault recovered within the
	// limit and at least the minimum of faults was injected; Failures
	// says why not.
	OK       bool     `json:"ok"`
	Failures []string `json:"failures,omitempty"`
}

// DeliveryMinute is one minute of the send phase (by the messages'
// scheduled time): its deliveries to members and their p99 latency, and
// whether a fault's window overlapped it (then its lag is not judged).
// Minutes with fewer than minJudged deliveries are not judged either.
type DeliveryMinute struct {
	Minute     int     `json:"minute"`
	Deliveries int     `json:"deliveries"`
	P99Ms      float64 `json:"p99_ms"`
	Faulted    bool    `json:"faulted,omitempty"`
	Judged     bool    `json:"judged"`
	// BusyPct: how busy the machine was in the minute (all its cores).
	// MaxLag: the largest lag of each service's consumer group sampled in
	// it (every 10s, records behind the log end by committed offsets).
	BusyPct float64          `json:"busy_pct"`
	MaxLag  map[string]int64 `json:"max_lag,omitempty"`
}

// minJudged is the fewest deliveries in a minute whose p99 is judged.
const minJudged = 100

// deliveryMinutes splits deliveries (seconds after the send phase began,
// latency ms) into minutes and marks those a fault's window overlaps.
func deliveryMinutes(at, ms []float64, faults []FaultResult, recoveryTargetS float64) []DeliveryMinute {
	byMin := map[int][]float64{}
	last := -1
	for i, t := range at {
		m := max(int(t/60), 0)
		byMin[m] = append(byMin[m], ms[i])
		last = max(last, m)
	}
	out := make([]DeliveryMinute, 0, last+1)
	for m := 0; m <= last; m++ {
		v := byMin[m]
		slices.Sort(v)
		dm := DeliveryMinute{Minute: m, Deliveries: len(v), P99Ms: load.Quantile(v, 0.99)}
		lo, hi := float64(m*60), float64((m+1)*60)
		for _, f := range faults {
			if f.AtS < hi && f.AtS+f.HoldS+recoveryTargetS > lo {
				dm.Faulted = true
			}
		}
		dm.Judged = !dm.Faulted && len(v) >= minJudged
		out = append(out, dm)
	}
	return out
}

// judge fills the summary counters from the checks and the load report
// and decides OK.
func (r *Report) judge(minFaults int) {
	c := r.Checks
	r.Lost = c.LostFromLog + c.LostFromStore
	r.Duplicated = c.DuplicatedInLog + c.DuplicatedRows
	r.SeqReused, r.SeqRegressions = c.SeqReused, c.SeqRegressions
	r.UndeliveredOnline = int(r.Load.Lost)
	r.AppDuplicates, r.AppOutOfOrder = int(r.Load.Duplicated), int(r.Load.OutOfOrder)
	r.OrderViolations = c.OrderViolations + r.AppOutOfOrder
	r.AcceptedNotAllowed, r.DeliveredAfterRemoval = c.AcceptedNotAllowed, int(r.Load.DeliveredAfterRemoval)
	r.GovernanceOps, r.Refused, r.MissedBeforeRemoval = int(r.Load.GovernanceOps), int(r.Load.Refused), int(r.Load.MissedBeforeRemoval)
	r.RefusedInLog = c.RefusedInLog
	r.DeliveryLag = 0
	for _, m := range r.DeliveryMinutes {
		if m.Judged && m.P99Ms > r.DeliverP99BoundMs {
			r.DeliveryLag++
		}
	}
	r.Erasures = 0
	if c.Erasure != nil {
		r.Erasures = c.Erasure.Erased
	}
	r.FaultsByKind, r.MaxRecoveryS = map[Kind]int{}, map[Kind]float64{}
	r.FaultsInjected, r.OverTarget = 0, 0
	r.Failures = nil
	if r.LoadError != "" {
		r.Failures = append(r.Failures, "load: "+r.LoadError)
	}
	for _, f := range r.Faults {
		r.FaultsInjected++
		r.FaultsByKind[f.Kind]++
		r.MaxRecoveryS[f.Kind] = max(r.MaxRecoveryS[f.Kind], f.RecoveryS)
		if f.RecoveryS > r.RecoveryTargetS {
			r.OverTarget++
		}
		if f.Error != "" {
			r.Failures = append(r.Failures, fmt.Sprintf("fault #%d %s: %s", f.N, f.Kind, f.Error))
		}
	}
	for _, h := range []struct {
		name string
		n    int
	}{{"lost", r.Lost}, {"duplicated", r.Duplicated}, {"seq_reused", r.SeqReused}, {"seq_regressions", r.SeqRegressions},
		{"order_violations", r.OrderViolations}, {"undelivered_online", r.UndeliveredOnline}, {"app_duplicates", r.AppDuplicates},
		{"ack_seq_mismatch", c.AckSeqMismatch}, {"bad_duplicate_acks", c.BadDuplicateAcks}, {"accepted_not_allowed", r.AcceptedNotAllowed},
		{"refused_in_log", r.RefusedInLog}, {"delivered_after_removal", r.DeliveredAfterRemoval}, {"delivery_lag", r.DeliveryLag},
		{"store_missing", c.StoreMissing}, {"store_extra", c.StoreExtra}, {"store_mismatched", c.StoreMismatched}} {
		if h.n != 0 {
			r.Failures = append(r.Failures, fmt.Sprintf("%s = %d", h.name, h.n))
		}
	}
	for _, h := range r.erasureHarm() {
		if h.n != 0 {
			r.Failures = append(r.Failures, fmt.Sprintf("%s = %d", h.name, h.n))
		}
	}
	if c.Erasure != nil && c.Erasure.Erased == 0 {
		r.Failures = append(r.Failures, "erasures were on, and no victim was erased")
	}
	if r.FaultsInjected < minFaults {
		r.Failures = append(r.Failures, fmt.Sprintf("only %d faults injected, want at least %d", r.FaultsInjected, minFaults))
	}
	if r.Acked == 0 {
		r.Failures = append(r.Failures, "nothing was acked")
	}
	r.OK = len(r.Failures) == 0
}

type counter struct {
	name string
	n    int
}

// erasureHarm lists the erasures' harm counters (none when there were no
// erasures).
func (r *Report) erasureHarm() []counter {
	e := r.Checks.Erasure
	if e == nil {
		return nil
	}
	return []counter{{"erasure_not_erased", e.NotErased}, {"erasure_victim_not_once", e.VictimNotOnce},
		{"erasure_victim_out_of_order", e.VictimOutOfOrder}, {"erasure_keys_left", e.KeysLeft},
		{"erasure_keys_not_recorded", e.KeysNotRecorded}, {"erasure_bodies_open", e.BodiesOpen},
		{"erasure_leaves_missing", e.LeavesMissing}}
}

// Table writes the report as text: the harm counters, recovery per fault
// kind, then every fault.
func (r *Report) Table(w io.Writer) error {
	verdict := "PASS"
	if !r.OK {
		verdict = "FAIL"
	}
	fmt.Fprintf(w, "chaos %s: seed %d, %d faults in %.0fs, %d acked (load: sent %d, acked %d, %.0f msg/s)\n\n",
		verdict, r.Seed, r.FaultsInjected, r.DurationS, r.Acked, r.Load.Sent, r.Load.Acked, r.Load.RateMsgsPerS)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "check\tcount\t")
	for _, row := range []struct {
		name string
		n    int
	}{{"lost", r.Lost}, {"duplicated", r.Duplicated}, {"seq_reused", r.SeqReused}, {"seq_regressions", r.SeqRegressions},
		{"order_violations", r.OrderViolations}, {"undelivered_online", r.UndeliveredOnline}, {"app_duplicates", r.AppDuplicates},
		{"ack_seq_mismatch", r.Checks.AckSeqMismatch}, {"bad_duplicate_acks", r.Checks.BadDuplicateAcks},
		{"accepted_not_allowed", r.AcceptedNotAllowed}, {"refused_in_log", r.RefusedInLog}, {"delivered_after_removal", r.DeliveredAfterRemoval},
		{"delivery_lag", r.DeliveryLag},
		{"store_missing/extra/mismatched", r.Checks.StoreMissing + r.Checks.StoreExtra + r.Checks.StoreMismatched}} {
		fmt.Fprintf(tw, "%s\t%d\t\n", row.name, row.n)
	}
	for _, row := range r.erasureHarm() {
		fmt.Fprintf(tw, "%s\t%d\t\n", row.name, row.n)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.GovernanceOps > 0 {
		fmt.Fprintf(w, "(governance: %s)\n", r.Load.GovernanceSummary())
		var codes []string
		for k, v := range r.Load.RefusedByCode {
			codes = append(codes, fmt.Sprintf("%s=%d", k, v))
		}
		slices.Sort(codes)
		fmt.Fprintf(w, "(refused sends %d %s, refusal records %d, missed before removal %d)\n",
			r.Refused, strings.Join(codes, " "), r.Checks.Refusals, r.MissedBeforeRemoval)
	}
	if e := r.Checks.Erasure; e != nil {
		fmt.Fprintf(w, "(erasures: %d victims, %d erased in %d admin calls (%d at a fault's injection, %d retried), %d victim messages acked, %d keys destroyed, %d sessions left, %d setup errors)\n",
			e.Victims, e.Erased, e.Attempts, e.AtFaults, e.Retried, e.VictimSends, e.KeysDestroyed, e.SessionsLeft, e.SetupErrors)
	}
	if len(r.DeliveryMinutes) > 0 {
		var mins []string
		for _, m := range r.DeliveryMinutes {
			mark := ""
			switch {
			case m.Faulted:
				mark = "f"
			case !m.Judged:
				mark = "-"
			}
			mins = append(mins, fmt.Sprintf("%.0f%s (%.0f%%)", m.P99Ms, mark, m.BusyPct))
		}
		fmt.Fprintf(w, "(deliver p99 per minute, ms, and the machine's busy share; f: a fault's window, -: too few to judge; bound %.0f: %s; busy over the send phase %.0f%%)\n",
			r.DeliverP99BoundMs, strings.Join(mins, " "), r.BusyPct)
	}
	var lags []string
	for _, m := range r.DeliveryMinutes {
		if m.MaxLag != nil {
			lags = append(lags, fmt.Sprintf("%d/%d/%d", m.MaxLag["sequencer"], m.MaxLag["persister"], m.MaxLag["pusher"]))
		}
	}
	if len(lags) > 0 {
		fmt.Fprintf(w, "(largest consumer lag per minute, records, sequencer/persister/pusher: %s)\n", strings.Join(lags, " "))
	}
	if len(r.CPUCores) > 0 {
		groups := slices.Sorted(maps.Keys(r.CPUCores))
		slices.SortStableFunc(groups, func(a, b string) int { return cmp.Compare(r.CPUCores[b], r.CPUCores[a]) })
		var parts []string
		for _, g := range groups {
			parts = append(parts, fmt.Sprintf("%s %.2f", g, r.CPUCores[g]))
		}
		fmt.Fprintf(w, "(cores over the send phase: %s)\n", strings.Join(parts, ", "))
	}
	fmt.Fprintf(w, "(probe round before faults: %s)\n", r.ProbeBaseline)
	fmt.Fprintf(w, "(log events %d, store rows %d, sessions %d, max seq gap %d, late deliveries %d)\n\n",
		r.Checks.LogEvents, r.Checks.StoreRows, r.Checks.Sessions, r.Checks.MaxGap, r.Load.Late)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "fault kind\tinjected\tmax_recovery_s\t(target %.0fs)\t\n", r.RecoveryTargetS)
	kinds := make([]Kind, 0, len(r.FaultsByKind))
	for k := range r.FaultsByKind {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	for _, k := range kinds {
		mark := ""
		if r.MaxRecoveryS[k] > r.RecoveryTargetS {
			mark = "over target"
		}
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%s\t\n", k, r.FaultsByKind[k], r.MaxRecoveryS[k], mark)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tat_s\tkind\ttarget\thold_s\trestart_s\trecovery_s\tnote\t")
	for _, f := range r.Faults {
		note := f.Error
		if f.InFlight > 0 {
			note = strings.TrimSpace(fmt.Sprintf("%d in flight %s", f.InFlight, note))
		}
		fmt.Fprintf(tw, "%d\t%.0f\t%s\t%s\t%.1f\t%.1f\t%.1f\t%s\t\n", f.N, f.AtS, f.Kind, f.Target, f.HoldS, f.RestartS, f.RecoveryS, note)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, f := range r.Checks.Findings {
		fmt.Fprintf(w, "finding: %s\n", f)
	}
	if e := r.Checks.Erasure; e != nil {
		for _, f := range e.Findings {
			fmt.Fprintf(w, "finding: erasure: %s\n", f)
		}
	}
	for _, f := range r.Failures {
		fmt.Fprintf(w, "FAIL: %s\n", f)
	}
	return nil
}
