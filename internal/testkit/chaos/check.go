package chaos

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/rebuild"
	"github.com/seqflow/seqflow/internal/testkit/logcheck"
)

// Checks is what the final audit found. Every field but the sizes counts
// harm and must be 0.
type Checks struct {
	LogEvents  int   `json:"log_events"`
	StoreRows  int   `json:"store_rows"`
	Sessions   int   `json:"sessions"`
	AckedInLog int   `json:"acked_in_log"`
	MaxGap     int64 `json:"max_gap"`

	// LostFromLog: acked, and no event of the log carries it.
	// LostFromStore: acked, in the log, and not in the message store.
	LostFromLog   int `json:"lost_from_log"`
	LostFromStore int `json:"lost_from_store"`
	// DuplicatedInLog: a client message with two events (two seqs);
	// DuplicatedRows: two store rows of one client message.
	DuplicatedInLog int `json:"duplicated_in_log"`
	DuplicatedRows  int `json:"duplicated_rows"`
	SeqReused       int `json:"seq_reused"`
	SeqRegressions  int `json:"seq_regressions"`
	// OrderViolations: a session's events out of the order of their
	// uplinks in the log.
	OrderViolations int `json:"order_violations"`
	// AckSeqMismatch: a client was told a seq or message ID the log does
	// not hold for its message, or two different ones.
	AckSeqMismatch int `json:"ack_seq_mismatch"`
	// BadDuplicateAcks: a duplicate ACK record naming another seq than the
	// event it repeats.
	BadDuplicateAcks int `json:"bad_duplicate_acks"`
	// AcceptedNotAllowed: an event the session's rules refuse at its seq
	// (a send from a member muted or removed before it, a kick by a
	// demoted admin), found by replaying the log through internal/groups.
	AcceptedNotAllowed int `json:"accepted_not_allowed"`
	// Refusals: refusal records on the duplicates topic; RefusedInLog
	// (not a harm, not counted by Harm): sends the load was finally told
	// were refused whose client message has an event in the log anyway. A
	// refused command is decided again when retried (docs/protocol.md,
	// "Groups"), so an attempt refused while an earlier one of the same
	// client_msg_id was accepted, or the other way round, tells the client
	// one outcome and the log another.
	Refusals     int `json:"refusals"`
	RefusedInLog int `json:"refused_in_log"`
	// Store against log, all events: rows missing, rows not in the log,
	// rows that differ.
	StoreMissing    int `json:"store_missing"`
	StoreExtra      int `json:"store_extra"`
	StoreMismatched int `json:"store_mismatched"`

	// Findings are the first few findings, in words.
	Findings []string `json:"findings,omitempty"`
}

// logKey is one client message of one session.
type logKey struct{ session, clientMsgID string }

// sentFromLog builds logcheck.Check's input from the log and the acked set:
// each session's client messages in the order of their first event, then
// the acked ones the log lacks (which Check then reports lost). The order
// of first events is what G4 is checked against through the uplink
// offsets; the clients' own order is checked by the load (out_of_order).
func sentFromLog(l *logcheck.Log, acked []Acked) []logcheck.Sent {
	idx := map[string]int{}
	var sent []logcheck.Sent
	seen := map[logKey]bool{}
	add := func(s, c string) {
		k := logKey{s, c}
		if seen[k] {
			return
		}
		seen[k] = true
		i, ok := idx[s]
		if !ok {
			i = len(sent)
			idx[s] = i
			sent = append(sent, logcheck.Sent{SessionID: s})
		}
		sent[i].ClientMsgIDs = append(sent[i].ClientMsgIDs, c)
	}
	for _, ev := range l.Events {
		add(ev.SessionID, ev.ClientMsgID)
	}
	sorted := append([]Acked(nil), acked...)
	sort.Slice(sorted, func(i, j int) bool {
		if sorted[i].SessionID != sorted[j].SessionID {
			return sorted[i].SessionID < sorted[j].SessionID
		}
		return sorted[i].ClientMsgID < sorted[j].ClientMsgID
	})
	for _, a := range sorted {
		add(a.SessionID, a.ClientMsgID)
	}
	return sent
}

// checkLog compares the committed log with the acked set, and the sends
// the load was told were refused ((session_id, client_msg_id)) with it.
// step is the sequencer's segment step, the largest gap one crash may
// leave.
func checkLog(l *logcheck.Log, acked []Acked, refused [][2]string, step int64) (Checks, map[logKey]logcheck.Event) {
	r := logcheck.Check(l, sentFromLog(l, acked), step)
	c := Checks{LogEvents: len(l.Events), Sessions: r.Sessions, MaxGap: r.MaxGap, Refusals: r.Refusals,
		DuplicatedInLog: len(r.Duplicated), SeqReused: len(r.SeqReused), SeqRegressions: len(r.SeqRegressions),
		OrderViolations: len(r.OrderViolations), BadDuplicateAcks: len(r.BadDuplicateAcks), AcceptedNotAllowed: len(r.NotAllowed)}
	first := map[logKey]logcheck.Event{}
	for _, ev := range l.Events {
		k := logKey{ev.SessionID, ev.ClientMsgID}
		if _, ok := first[k]; !ok {
			first[k] = ev
		}
	}
	for _, a := range acked {
		ev, ok := first[logKey{a.SessionID, a.ClientMsgID}]
		switch {
		case !ok:
			c.LostFromLog++
			c.finding("lost from log: %s/%s acked with seq %d", a.SessionID, a.ClientMsgID, a.Seq)
		case ev.Seq != a.Seq || fmt.Sprint(ev.MsgID) != a.MsgID || a.Conflict:
			c.AckSeqMismatch++
			c.finding("ack mismatch: %s/%s acked seq %d msg %s (conflicting acks: %v), log seq %d msg %d",
				a.SessionID, a.ClientMsgID, a.Seq, a.MsgID, a.Conflict, ev.Seq, ev.MsgID)
		default:
			c.AckedInLog++
		}
	}
	for _, rf := range refused {
		if ev, ok := first[logKey{rf[0], rf[1]}]; ok {
			c.RefusedInLog++
			c.finding("refused, yet in the log: %s/%s at seq %d", rf[0], rf[1], ev.Seq)
		}
	}
	for _, group := range [][]string{r.Duplicated, r.SeqReused, r.SeqRegressions, r.OrderViolations, r.BadDuplicateAcks, r.Unexpected, r.NotAllowed} {
		for i, f := range group {
			if i == 5 {
				break
			}
			c.finding("%s", f)
		}
	}
	return c, first
}

func (c *Checks) finding(format string, args ...any) {
	if len(c.Findings) < 40 {
		c.Findings = append(c.Findings, fmt.Sprintf(format, args...))
	}
}

// Harm sums the counters that must be 0.
func (c Checks) Harm() int {
	return c.LostFromLog + c.LostFromStore + c.DuplicatedInLog + c.DuplicatedRows + c.SeqReused + c.SeqRegressions +
		c.OrderViolations + c.AckSeqMismatch + c.BadDuplicateAcks + c.AcceptedNotAllowed + c.StoreMissing + c.StoreExtra + c.StoreMismatched
}

// verify runs every check: the log (internal/audit) against the acked set,
// then the store (internal/store/audit) against the log, waiting up to
// settle for the persisters to catch up.
func verify(ctx context.Context, brokers []string, t eventlog.Topics, pool *pgxpool.Pool, acked []Acked, refused [][2]string, step int64, settle time.Duration) (Checks, error) {
	l, err := logcheck.Read(ctx, brokers, t)
	if err != nil {
		return Checks{}, fmt.Errorf("read the log: %w", err)
	}
	c, first := checkLog(l, acked, refused, step)
	var cmp *rebuild.Report
	deadline := time.Now().Add(settle)
	for {
		sl, err := rebuild.ReadLog(ctx, brokers, t.Sequenced, nil)
		if err != nil {
			return c, fmt.Errorf("read the log for the store audit: %w", err)
		}
		if cmp, err = rebuild.Compare(ctx, pool, "public", sl); err != nil {
			return c, fmt.Errorf("compare store and log: %w", err)
		}
		if cmp.Equal() || time.Now().After(deadline) {
			break
		}
		if err := sleep(ctx, 2*time.Second); err != nil {
			return c, err
		}
	}
	c.StoreRows = cmp.StoreRows
	missing := map[[2]any]bool{}
	for _, d := range cmp.Differences {
		c.StoreMissing += len(d.Missing)
		c.StoreExtra += len(d.Extra)
		c.StoreMismatched += len(d.Mismatched)
		for _, s := range d.Missing {
			missing[[2]any{d.SessionID, s}] = true
		}
		c.finding("store differs in %s: missing %s extra %s mismatched %s %v", d.SessionID, seqs(d.Missing), seqs(d.Extra), seqs(d.Mismatched), d.Details)
	}
	for _, a := range acked {
		if ev, ok := first[logKey{a.SessionID, a.ClientMsgID}]; ok && missing[[2]any{ev.SessionID, ev.Seq}] {
			c.LostFromStore++
		}
	}
	rows, err := pool.Query(ctx, `SELECT session_id, client_msg_id, count(*) FROM messages
		WHERE client_msg_id <> '' GROUP BY 1, 2 HAVING count(*) > 1`)
	if err != nil {
		return c, fmt.Errorf("look for duplicate rows: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var s, id string
		var n int
		if err := rows.Scan(&s, &id, &n); err != nil {
			return c, err
		}
		c.DuplicatedRows += n - 1
		c.finding("%d store rows for %s/%s", n, s, id)
	}
	return c, rows.Err()
}

// seqs writes a list of seqs short: the count, the first and the last.
func seqs(s []int64) string {
	switch len(s) {
	case 0:
		return "[]"
	case 1, 2, 3:
		return fmt.Sprint(s)
	}
	return fmt.Sprintf("%d seqs [%d %d %d … %d]", len(s), s[0], s[1], s[2], s[len(s)-1])
}
