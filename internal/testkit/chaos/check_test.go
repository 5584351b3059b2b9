package chaos

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seqflow/seqflow/client/load"
	"github.com/seqflow/seqflow/internal/keystore"
	"github.com/seqflow/seqflow/internal/testkit/logcheck"
)

// TestCheckLog runs the log checks on logs written by hand (no Kafka: the
// audit's input is data, and these are the cases it must tell apart).
func TestCheckLog(t *testing.T) {
	ev := func(s string, seq, msg int64, c string, up int64) logcheck.Event {
		return logcheck.Event{SessionID: s, Seq: seq, MsgID: msg, ClientMsgID: c, UplinkOffset: up}
	}
	ack := func(s, c string, seq int64, msg string) Acked {
		return Acked{SessionID: s, ClientMsgID: c, Seq: seq, MsgID: msg, Acks: 1}
	}
	clean := []logcheck.Event{ev("s", 1, 10, "a", 0), ev("s", 2, 11, "b", 1), ev("s", 1001, 12, "c", 2), ev("t", 1, 20, "x", 0)}
	cases := []struct {
		name       string
		events     []logcheck.Event
		acked      []Acked
		refused    [][2]string
		notAllowed []string
		want       func(Checks) bool
		what       string
	}{
		{"clean, with a gap of one step", clean, []Acked{ack("s", "a", 1, "10"), ack("s", "c", 1001, "12"), ack("t", "x", 1, "20")}, nil, nil,
			func(c Checks) bool { return c.Harm() == 0 && c.AckedInLog == 3 && c.MaxGap == 998 }, "no harm, 3 acked in the log"},
		{"acked, not in the log", clean, []Acked{ack("s", "zz", 4, "99")}, nil, nil,
			func(c Checks) bool { return c.LostFromLog == 1 && c.Harm() == 1 }, "lost_from_log 1"},
		{"acked with another seq", clean, []Acked{ack("s", "b", 3, "11")}, nil, nil,
			func(c Checks) bool { return c.AckSeqMismatch == 1 && c.Harm() == 1 }, "ack_seq_mismatch 1"},
		{"acked twice with different seqs", clean, []Acked{{SessionID: "s", ClientMsgID: "b", Seq: 2, MsgID: "11", Acks: 2, Conflict: true}}, nil, nil,
			func(c Checks) bool { return c.AckSeqMismatch == 1 }, "ack_seq_mismatch 1"},
		{"one client message, two seqs", append(clean, ev("s", 1002, 13, "a", 3)), nil, nil, nil,
			func(c Checks) bool { return c.DuplicatedInLog == 1 }, "duplicated_in_log 1"},
		{"a seq given twice", append(clean, ev("t", 1, 21, "y", 1)), nil, nil, nil,
			func(c Checks) bool { return c.SeqReused == 1 && c.SeqRegressions == 1 }, "seq_reused 1, seq_regressions 1"},
		{"seq going back", append(clean, ev("s", 500, 14, "d", 3)), nil, nil, nil,
			func(c Checks) bool { return c.SeqRegressions == 1 && c.SeqReused == 0 }, "seq_regressions 1"},
		{"a gap over one step", append(clean, ev("s", 3000, 14, "d", 3)), nil, nil, nil,
			func(c Checks) bool { return c.SeqRegressions == 1 }, "seq_regressions 1 (gap)"},
		{"uplink order broken", append(clean, ev("s", 1002, 14, "d", 1)), nil, nil, nil,
			func(c Checks) bool { return c.OrderViolations == 1 }, "order_violations 1"},
		{"a send the rules refuse, sequenced", clean, nil, nil, []string{"s seq 2 (message by u2): muted"},
			func(c Checks) bool { return c.AcceptedNotAllowed == 1 && c.Harm() == 1 }, "accepted_not_allowed 1"},
		{"refused sends: one not in the log, one in it", clean, nil, [][2]string{{"s", "zz"}, {"s", "b"}}, nil,
			func(c Checks) bool { return c.RefusedInLog == 1 && c.Harm() == 1 }, "refused_in_log 1, a harm"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, _ := checkLog(&logcheck.Log{Events: c.events, NotAllowed: c.notAllowed}, c.acked, c.refused, 1000)
			if !c.want(got) {
				b, _ := json.Marshal(got)
				t.Fatalf("checks %s, want %s", b, c.what)
			}
			if got.Harm() > 0 && len(got.Findings) == 0 {
				t.Fatal("harm without a finding in words")
			}
		})
	}
}

func TestJudge(t *testing.T) {
	base := func() *Report {
		return &Report{Acked: 10, RecoveryTargetS: 11, Faults: []FaultResult{
			{N: 1, Kind: KillSequencer, RecoveryS: 9}, {N: 2, Kind: KillSequencer, RecoveryS: 12}, {N: 3, Kind: RedisWipe, RecoveryS: 3},
		}}
	}
	cases := []struct {
		name string
		edit func(*Report)
		min  int
		ok   bool
		fail string
	}{
		{"clean", func(*Report) {}, 3, true, ""},
		{"too few faults", func(*Report) {}, 4, false, "only 3 faults"},
		{"lost from the store", func(r *Report) { r.Checks.LostFromStore = 1 }, 1, false, "lost = 1"},
		{"an online recipient missed one", func(r *Report) { r.Load.Lost = 2 }, 1, false, "undelivered_online = 2"},
		{"a removed member got a later event", func(r *Report) { r.Load.DeliveredAfterRemoval = 1 }, 1, false, "delivered_after_removal = 1"},
		{"a muted member's send sequenced", func(r *Report) { r.Checks.AcceptedNotAllowed = 1 }, 1, false, "accepted_not_allowed = 1"},
		{"refusals are not harm", func(r *Report) {
			r.Load.Refused, r.Load.MissedBeforeRemoval, r.Checks.Refusals, r.Load.GovernanceOps = 5, 1, 5, 9
		}, 1, true, ""},
		{"a client told refused of a message in the log", func(r *Report) { r.Checks.RefusedInLog = 1 }, 1, false, "refused_in_log = 1"},
		{"app saw one twice", func(r *Report) { r.Load.Duplicated = 1 }, 1, false, "app_duplicates = 1"},
		{"app saw one out of order", func(r *Report) { r.Load.OutOfOrder = 1 }, 1, false, "order_violations = 1"},
		{"store has an extra row", func(r *Report) { r.Checks.StoreExtra = 1 }, 1, false, "store_extra = 1"},
		{"a fault did not recover", func(r *Report) { r.Faults[2].Error = "not recovered" }, 1, false, "fault #3"},
		{"the load failed", func(r *Report) { r.LoadError = "boom" }, 1, false, "load: boom"},
		{"nothing acked", func(r *Report) { r.Acked = 0 }, 1, false, "nothing was acked"},
		{"a fault-free minute's deliveries late", func(r *Report) {
			r.DeliverP99BoundMs = 2000
			r.DeliveryMinutes = []DeliveryMinute{{Minute: 0, P99Ms: 900, Judged: true}, {Minute: 1, P99Ms: 2500, Judged: true}}
		}, 1, false, "delivery_lag = 1"},
		{"late deliveries in a fault's window", func(r *Report) {
			r.DeliverP99BoundMs = 2000
			r.DeliveryMinutes = []DeliveryMinute{{Minute: 0, P99Ms: 9000, Faulted: true}, {Minute: 1, P99Ms: 9000}}
		}, 1, true, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := base()
			c.edit(r)
			r.judge(c.min)
			if r.OK != c.ok || (c.fail != "" && !strings.Contains(strings.Join(r.Failures, "\n"), c.fail)) {
				t.Fatalf("OK %v failures %q, want OK %v with %q", r.OK, r.Failures, c.ok, c.fail)
			}
			if r.FaultsInjected != 3 || r.FaultsByKind[KillSequencer] != 2 || r.MaxRecoveryS[KillSequencer] != 12 || r.OverTarget != 1 {
				t.Fatalf("fault summary %d %v %v over %d", r.FaultsInjected, r.FaultsByKind, r.MaxRecoveryS, r.OverTarget)
			}
		})
	}
}

// TestReportJSONKeys pins the keys of chaos.json that the issue names.
func TestReportJSONKeys(t *testing.T) {
	r := &Report{Load: load.Report{}, Faults: []FaultResult{{N: 1, Kind: PostgresRestart, RecoveryS: 2}}, Acked: 1}
	r.judge(1)
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	for _, k := range []string{"faults_injected", "acked", "lost", "duplicated", "seq_reused", "seq_regressions",
		"order_violations", "undelivered_online", "accepted_not_allowed", "delivered_after_removal", "refused", "governance_ops",
		"max_recovery_s", "seed", "faults", "ok"} {
		if _, ok := m[k]; !ok {
			t.Errorf("chaos.json lacks %q", k)
		}
	}
	if rec, _ := m["max_recovery_s"].(map[string]any); rec[string(PostgresRestart)] != 2.0 {
		t.Errorf("max_recovery_s = %v", m["max_recovery_s"])
	}
	var sb strings.Builder
	if err := r.Table(&sb); err != nil || !strings.Contains(sb.String(), "postgres_restart") || !strings.Contains(sb.String(), "PASS") {
		t.Fatalf("table %v:\n%s", err, sb.String())
	}
}

// TestCheckErasures runs the erasure checks on victims, events and key
// store facts written by hand: a clean erasure, then one case per harm
// counter showing it can fail.
func TestCheckErasures(t *testing.T) {
	const v = "c1-v0001"
	victim := func() Victim {
		return Victim{User: v, Sessions: []string{"g", "d"}, Erased: true, Attempts: 1, KeysDestroyed: 2, SessionsLeft: 2,
			Sent: []VictimSend{{"g", "m1", 2}, {"g", "m2", 3}, {"d", "m3", 2}}}
	}
	msg := func(s, id string, seq, key int64) victimEvent {
		return victimEvent{Session: s, ClientMsgID: id, Sender: v, Seq: seq, Message: true, KeyID: key, HasBody: true, OpenErr: keystore.ErrDestroyed}
	}
	leave := func(s string, seq int64) victimEvent {
		return victimEvent{Session: s, ClientMsgID: "erasure:" + v, Sender: v, Seq: seq, ErasureLeave: true}
	}
	events := func() []victimEvent {
		return []victimEvent{{Session: "g", ClientMsgID: "c", Sender: v, Seq: 1}, msg("g", "m1", 2, 7), msg("g", "m2", 3, 7),
			{Session: "g", ClientMsgID: "erasure-transfer:" + v, Sender: v, Seq: 4}, leave("g", 5),
			{Session: "d", ClientMsgID: "c2", Sender: v, Seq: 1}, msg("d", "m3", 2, 8), leave("d", 3)}
	}
	facts := func() keyFacts {
		return keyFacts{live: map[string]int{}, erased: map[string]bool{v: true}, destroyed: map[int64]string{7: v, 8: v}}
	}
	cases := []struct {
		name string
		edit func(vs *[]Victim, evs *[]victimEvent, f *keyFacts)
		want func(ErasureChecks) bool
		what string
	}{
		{"clean", func(*[]Victim, *[]victimEvent, *keyFacts) {},
			func(c ErasureChecks) bool {
				return c.Harm() == 0 && c.Victims == 1 && c.Erased == 1 && c.VictimSends == 3 && c.KeysDestroyed == 2
			}, "no harm, 1 victim erased, 3 sends"},
		{"erased at a fault, after a failed call", func(vs *[]Victim, _ *[]victimEvent, _ *keyFacts) {
			(*vs)[0].DuringFault, (*vs)[0].Attempts = PostgresRestart, 3
		}, func(c ErasureChecks) bool {
			return c.Harm() == 0 && c.AtFaults == 1 && c.Retried == 1 && c.Attempts == 3
		}, "no harm, at_faults 1, retried 1"},
		{"erasure never answered ok", func(vs *[]Victim, _ *[]victimEvent, _ *keyFacts) {
			(*vs)[0].Erased, (*vs)[0].Attempts, (*vs)[0].EraseError = false, 40, "503"
		}, func(c ErasureChecks) bool { return c.NotErased == 1 && c.Harm() == 1 }, "not_erased 1"},
		{"an acked message missing from the log", func(_ *[]Victim, evs *[]victimEvent, _ *keyFacts) {
			*evs = slices.DeleteFunc(*evs, func(e victimEvent) bool { return e.ClientMsgID == "m2" })
		}, func(c ErasureChecks) bool { return c.VictimNotOnce == 1 && c.Harm() == 1 }, "victim_not_once 1"},
		{"an acked message twice in the log", func(_ *[]Victim, evs *[]victimEvent, _ *keyFacts) {
			*evs = append(*evs, msg("g", "m1", 6, 7))
		}, func(c ErasureChecks) bool { return c.VictimNotOnce == 1 && c.LeavesMissing == 1 }, "victim_not_once 1 (and the copy after the leave)"},
		{"an acked message at another seq", func(vs *[]Victim, _ *[]victimEvent, _ *keyFacts) {
			(*vs)[0].Sent[2].Seq = 1
		}, func(c ErasureChecks) bool { return c.VictimNotOnce == 1 && c.VictimOutOfOrder == 0 }, "victim_not_once 1"},
		{"acks out of the sending order", func(vs *[]Victim, _ *[]victimEvent, _ *keyFacts) {
			s := (*vs)[0].Sent
			s[0], s[1] = s[1], s[0]
		}, func(c ErasureChecks) bool { return c.VictimOutOfOrder == 1 && c.VictimNotOnce == 0 }, "victim_out_of_order 1"},
		{"a key left in seqflow_data_keys", func(_ *[]Victim, _ *[]victimEvent, f *keyFacts) { f.live[v] = 1 },
			func(c ErasureChecks) bool { return c.KeysLeft == 1 && c.Harm() == 1 }, "keys_left 1"},
		{"not in seqflow_erased_users", func(_ *[]Victim, _ *[]victimEvent, f *keyFacts) { delete(f.erased, v) },
			func(c ErasureChecks) bool { return c.KeysNotRecorded == 1 && c.Harm() == 1 }, "keys_not_recorded 1"},
		{"a key not in seqflow_destroyed_keys", func(_ *[]Victim, _ *[]victimEvent, f *keyFacts) { delete(f.destroyed, 8) },
			func(c ErasureChecks) bool { return c.KeysNotRecorded == 1 && c.Harm() == 1 }, "keys_not_recorded 1"},
		{"a body still opens", func(_ *[]Victim, evs *[]victimEvent, _ *keyFacts) { (*evs)[2].OpenErr = nil },
			func(c ErasureChecks) bool { return c.BodiesOpen == 1 && c.Harm() == 1 }, "bodies_open 1"},
		{"a body the key store cannot reach", func(_ *[]Victim, evs *[]victimEvent, _ *keyFacts) { (*evs)[2].OpenErr = keystore.ErrUnavailable },
			func(c ErasureChecks) bool { return c.BodiesOpen == 1 }, "bodies_open 1"},
		{"a body not sealed", func(_ *[]Victim, evs *[]victimEvent, _ *keyFacts) { (*evs)[1].KeyID, (*evs)[1].OpenErr = 0, nil },
			func(c ErasureChecks) bool { return c.BodiesOpen == 1 }, "bodies_open 1"},
		{"a session without its leave", func(_ *[]Victim, evs *[]victimEvent, _ *keyFacts) {
			*evs = slices.DeleteFunc(*evs, func(e victimEvent) bool { return e.ErasureLeave && e.Session == "d" })
		}, func(c ErasureChecks) bool { return c.LeavesMissing == 1 && c.Harm() == 1 }, "leaves_missing 1"},
		{"a session only the log knows, without a leave", func(_ *[]Victim, evs *[]victimEvent, _ *keyFacts) {
			*evs = append(*evs, victimEvent{Session: "x", ClientMsgID: "c3", Sender: v, Seq: 1})
		}, func(c ErasureChecks) bool { return c.LeavesMissing == 1 }, "leaves_missing 1"},
		{"a message after the leave", func(_ *[]Victim, evs *[]victimEvent, f *keyFacts) {
			*evs = append(*evs, msg("d", "m9", 4, 9))
			f.destroyed[9] = v
		}, func(c ErasureChecks) bool { return c.LeavesMissing == 1 && c.Harm() == 1 }, "leaves_missing 1"},
		{"a leave of someone else's erasure is not the victim's", func(_ *[]Victim, evs *[]victimEvent, _ *keyFacts) {
			for i := range *evs {
				if (*evs)[i].ErasureLeave && (*evs)[i].Session == "g" {
					(*evs)[i].Sender = "c1-v0002"
				}
			}
		}, func(c ErasureChecks) bool { return c.LeavesMissing == 1 }, "leaves_missing 1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			vs, evs, f := []Victim{victim()}, events(), facts()
			c.edit(&vs, &evs, &f)
			got := checkErasures(vs, evs, f)
			if !c.want(got) {
				b, _ := json.Marshal(got)
				t.Fatalf("checks %s, want %s", b, c.what)
			}
			if got.Harm() > 0 && len(got.Findings) == 0 {
				t.Fatal("harm without a finding in words")
			}
			if (Checks{Erasure: &got}).Harm() != got.Harm() {
				t.Fatal("Checks.Harm leaves the erasures out")
			}
		})
	}
}

// TestJudgeErasures: each erasure harm counter fails the run and is named
// in the table; erasures that were on and erased nobody fail it too.
func TestJudgeErasures(t *testing.T) {
	set := map[string]func(*ErasureChecks){
		"erasure_not_erased":          func(e *ErasureChecks) { e.NotErased = 1 },
		"erasure_victim_not_once":     func(e *ErasureChecks) { e.VictimNotOnce = 1 },
		"erasure_victim_out_of_order": func(e *ErasureChecks) { e.VictimOutOfOrder = 1 },
		"erasure_keys_left":           func(e *ErasureChecks) { e.KeysLeft = 1 },
		"erasure_keys_not_recorded":   func(e *ErasureChecks) { e.KeysNotRecorded = 1 },
		"erasure_bodies_open":         func(e *ErasureChecks) { e.BodiesOpen = 1 },
		"erasure_leaves_missing":      func(e *ErasureChecks) { e.LeavesMissing = 1 },
	}
	report := func(e *ErasureChecks) *Report {
		r := &Report{Acked: 10, RecoveryTargetS: 11, Faults: []FaultResult{{N: 1, Kind: KillSequencer, RecoveryS: 1}}}
		r.Checks.Erasure = e
		r.judge(1)
		return r
	}
	r := report(&ErasureChecks{Victims: 3, Erased: 3})
	var sb strings.Builder
	if err := r.Table(&sb); err != nil || !r.OK || r.Erasures != 3 || !strings.Contains(sb.String(), "3 erased") {
		t.Fatalf("clean: OK %v erasures %d failures %q\n%s", r.OK, r.Erasures, r.Failures, sb.String())
	}
	for name, f := range set {
		t.Run(name, func(t *testing.T) {
			e := &ErasureChecks{Victims: 3, Erased: 3}
			f(e)
			r := report(e)
			var sb strings.Builder
			if err := r.Table(&sb); err != nil {
				t.Fatal(err)
			}
			if r.OK || !strings.Contains(strings.Join(r.Failures, "\n"), name+" = 1") || !strings.Contains(sb.String(), name) {
				t.Fatalf("OK %v failures %q, want %s = 1 and a row in the table:\n%s", r.OK, r.Failures, name, sb.String())
			}
		})
	}
	if r := report(&ErasureChecks{Victims: 2}); r.OK {
		t.Fatal("erasures on, none erased: the run passed")
	}
	if r := report(nil); !r.OK || r.Erasures != 0 {
		t.Fatalf("erasures off: OK %v failures %q", r.OK, r.Failures)
	}
}

// TestDeliveryMinutes: deliveries fall into the minutes of their
// messages' scheduled time; a minute a fault's window (injection to end
// of hold plus the recovery target) overlaps, or with too few deliveries,
// is not judged.
func TestDeliveryMinutes(t *testing.T) {
	var at, ms []float64
	for i := range 600 { // minutes 0..2: 200 deliveries each
		at = append(at, float64(i)*0.3)
		ms = append(ms, float64(100+i%200))
	}
	at, ms = append(at, 200), append(ms, 50_000)  // minute 3: one late delivery
	faults := []FaultResult{{AtS: 100, HoldS: 5}} // window 100..116 with a 11s target
	got := deliveryMinutes(at, ms, faults, 11)
	if len(got) != 4 {
		t.Fatalf("%d minutes, want 4: %+v", len(got), got)
	}
	want := []struct {
		n              int
		faulted, judge bool
	}{{200, false, true}, {200, true, false}, {200, false, true}, {1, false, false}}
	for i, w := range want {
		m := got[i]
		if m.Minute != i || m.Deliveries != w.n || m.Faulted != w.faulted || m.Judged != w.judge {
			t.Fatalf("minute %d: %+v, want %d deliveries, faulted %v, judged %v", i, m, w.n, w.faulted, w.judge)
		}
	}
	if got[0].P99Ms != 297 {
		t.Fatalf("minute 0 p99 %.0f, want 297 (nearest rank of 100..299)", got[0].P99Ms)
	}
}

// TestCPUCores: a process's CPU time is read from /proc, and two
// snapshots turn into cores per group.
func TestCPUCores(t *testing.T) {
	before := procCPU(os.Getpid())
	for deadline := time.Now().Add(300 * time.Millisecond); time.Now().Before(deadline); {
	}
	if after := procCPU(os.Getpid()); after <= before {
		t.Fatalf("CPU time of this process %.2f s after %.2f s of spinning", after, before)
	}
	if procCPU(-1) != 0 {
		t.Fatal("a process that does not exist used CPU")
	}
	got := coresBetween(map[string]float64{"a": 10, "b": 5}, map[string]float64{"a": 40, "b": 5, "c": 3}, 60)
	if got["a"] != 0.5 || got["b"] != 0 || got["c"] != 0.05 {
		t.Fatalf("cores %v, want a 0.5, b 0, c 0.05", got)
	}
}
