package chaos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/keystore"
	"github.com/seqflow/seqflow/internal/rebuild"
	"github.com/seqflow/seqflow/internal/testkit/logcheck"
	"github.com/seqflow/seqflow/schemas/imv1"
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
	// Refusals: refusal records on the duplicates topic (not a harm).
	// RefusedInLog: sends the load was finally told were refused whose
	// client message has an event in the log anyway: a client told
	// "refused" of a message the log holds (a retry refused after the
	// first attempt was accepted, its ACK lost).
	Refusals     int `json:"refusals"`
	RefusedInLog int `json:"refused_in_log"`
	// Store against log, all events: rows missing, rows not in the log,
	// rows that differ.
	StoreMissing    int `json:"store_missing"`
	StoreExtra      int `json:"store_extra"`
	StoreMismatched int `json:"store_mismatched"`

	// Erasure is what the erasures in the load left (nil: none were
	// made, Options.EraseEvery).
	Erasure *ErasureChecks `json:"erasure,omitempty"`

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

// Harm sums the counters that must be 0, the erasures' among them.
func (c Checks) Harm() int {
	h := c.LostFromLog + c.LostFromStore + c.DuplicatedInLog + c.DuplicatedRows + c.SeqReused + c.SeqRegressions +
		c.OrderViolations + c.AckSeqMismatch + c.BadDuplicateAcks + c.AcceptedNotAllowed + c.RefusedInLog + c.StoreMissing + c.StoreExtra + c.StoreMismatched
	if c.Erasure != nil {
		h += c.Erasure.Harm()
	}
	return h
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

// ErasureChecks is what the audit found of the erasures in the load
// (eraser.go). Victims, Erased, Attempts, VictimSends, SetupErrors,
// KeysDestroyed, SessionsLeft, AtFaults and Retried are sizes; the rest
// counts harm.
type ErasureChecks struct {
	Victims       int   `json:"victims"`
	Erased        int   `json:"erased"`
	Attempts      int   `json:"attempts"`
	VictimSends   int   `json:"victim_sends"`
	SetupErrors   int   `json:"setup_errors"`
	KeysDestroyed int64 `json:"keys_destroyed"`
	SessionsLeft  int   `json:"sessions_left"`
	// AtFaults: erasures set off by a fault's injection; Retried: erasures
	// that took more than one call.
	AtFaults int `json:"at_faults"`
	Retried  int `json:"retried"`

	// NotErased: victims no gateway answered the erasure ok within
	// eraseWithin, however often it was retried.
	NotErased int `json:"not_erased"`
	// VictimNotOnce: a victim's acked message with no event in the log,
	// two, or one at another seq than its ACK's. VictimOutOfOrder: a
	// victim's message acked with a seq not above the one before it in
	// the same session (each was acked before the next was sent).
	VictimNotOnce    int `json:"victim_not_once"`
	VictimOutOfOrder int `json:"victim_out_of_order"`
	// KeysLeft: rows of seqflow_data_keys a victim still owns.
	// KeysNotRecorded: a victim missing from seqflow_erased_users, or a
	// key of a victim's body missing from seqflow_destroyed_keys (under
	// that victim).
	KeysLeft        int `json:"keys_left"`
	KeysNotRecorded int `json:"keys_not_recorded"`
	// BodiesOpen: a victim's body in the log that is not reported
	// destroyed by the key store (keystore.OpenBody without
	// ErrDestroyed), or is not sealed at all.
	BodiesOpen int `json:"bodies_open"`
	// LeavesMissing: a session a victim was in with no erasure leave
	// (a membership remove of it carrying MembershipChange.erasure) above
	// the victim's last message there.
	LeavesMissing int `json:"leaves_missing"`

	Findings []string `json:"findings,omitempty"`
}

// Harm sums the counters that must be 0.
func (c ErasureChecks) Harm() int {
	return c.NotErased + c.VictimNotOnce + c.VictimOutOfOrder + c.KeysLeft + c.KeysNotRecorded + c.BodiesOpen + c.LeavesMissing
}

func (c *ErasureChecks) finding(format string, args ...any) {
	if len(c.Findings) < 40 {
		c.Findings = append(c.Findings, fmt.Sprintf(format, args...))
	}
}

// victimEvent is what the erasure checks need of an event of the log
// sent by a victim (a victim is the sender of everything it is in: the
// sessions it made, its messages, and its erasure's transfers and leaves).
type victimEvent struct {
	Session, ClientMsgID, Sender string
	Seq                          int64
	// Message: a message event; KeyID its body's data key (0: not
	// sealed), HasBody whether it has a body at all, OpenErr what
	// keystore.OpenBody said of it after the run.
	Message bool
	KeyID   int64
	HasBody bool
	OpenErr error
	// ErasureLeave: a membership remove of Sender carrying an erasure
	// record.
	ErasureLeave bool
}

// keyFacts is what the key store holds of the victims after the run.
type keyFacts struct {
	live      map[string]int   // owner → rows in seqflow_data_keys
	erased    map[string]bool  // owners in seqflow_erased_users
	destroyed map[int64]string // key_id → owner, seqflow_destroyed_keys
}

// checkErasures checks the victims against the events they sent, in log
// order per partition, and the key store.
func checkErasures(victims []Victim, evs []victimEvent, f keyFacts) ErasureChecks {
	c := ErasureChecks{Victims: len(victims)}
	type key struct{ session, id string }
	bySend := map[key][]victimEvent{}
	bySender := map[string][]victimEvent{}
	for _, ev := range evs {
		bySend[key{ev.Session, ev.ClientMsgID}] = append(bySend[key{ev.Session, ev.ClientMsgID}], ev)
		bySender[ev.Sender] = append(bySender[ev.Sender], ev)
	}
	for _, v := range victims {
		c.Attempts += v.Attempts
		c.VictimSends += len(v.Sent)
		c.KeysDestroyed += v.KeysDestroyed
		c.SessionsLeft += v.SessionsLeft
		if v.SetupError != "" {
			c.SetupErrors++
		}
		if v.DuringFault != "" {
			c.AtFaults++
		}
		if v.Attempts > 1 {
			c.Retried++
		}
		if v.Erased {
			c.Erased++
		} else {
			c.NotErased++
			c.finding("%s not erased after %d calls: %s", v.User, v.Attempts, v.EraseError)
		}
		last := map[string]int64{}
		for _, s := range v.Sent {
			got := bySend[key{s.Session, s.ClientMsgID}]
			if len(got) != 1 || got[0].Seq != s.Seq {
				c.VictimNotOnce++
				c.finding("%s's message %s/%s acked with seq %d: %d events in the log", v.User, s.Session, s.ClientMsgID, s.Seq, len(got))
			}
			if s.Seq <= last[s.Session] {
				c.VictimOutOfOrder++
				c.finding("%s's message %s/%s acked with seq %d after %d", v.User, s.Session, s.ClientMsgID, s.Seq, last[s.Session])
			}
			last[s.Session] = s.Seq
		}
		if n := f.live[v.User]; n > 0 {
			c.KeysLeft += n
			c.finding("%s still owns %d data keys", v.User, n)
		}
		if !f.erased[v.User] {
			c.KeysNotRecorded++
			c.finding("%s not in seqflow_erased_users", v.User)
		}
		// The sessions it was in: those it made (as the eraser knows
		// them) and any with an event it sent.
		sessions := map[string]bool{}
		for _, s := range v.Sessions {
			sessions[s] = true
		}
		lastMsg, leave := map[string]int64{}, map[string]int64{}
		keys := map[int64]bool{}
		for _, ev := range bySender[v.User] {
			sessions[ev.Session] = true
			switch {
			case ev.ErasureLeave:
				leave[ev.Session] = max(leave[ev.Session], ev.Seq)
			case ev.Message:
				lastMsg[ev.Session] = max(lastMsg[ev.Session], ev.Seq)
				if !ev.HasBody {
					break
				}
				if ev.KeyID == 0 || !errors.Is(ev.OpenErr, keystore.ErrDestroyed) {
					c.BodiesOpen++
					c.finding("%s's body at %s seq %d (key %d) is not destroyed: %v", v.User, ev.Session, ev.Seq, ev.KeyID, ev.OpenErr)
				}
				if ev.KeyID != 0 && !keys[ev.KeyID] {
					keys[ev.KeyID] = true
					if f.destroyed[ev.KeyID] != v.User {
						c.KeysNotRecorded++
						c.finding("%s's key %d not recorded as destroyed (owner %q)", v.User, ev.KeyID, f.destroyed[ev.KeyID])
					}
				}
			}
		}
		for s := range sessions {
			if leave[s] == 0 || leave[s] <= lastMsg[s] {
				c.LeavesMissing++
				c.finding("%s in %s: erasure leave at seq %d, last message at %d", v.User, s, leave[s], lastMsg[s])
			}
		}
	}
	return c
}

// verifyErasures reads the victims' events from the log and what the key
// store holds of them, and checks them (checkErasures). The last
// victims' leaves may still be on their way through the sequencer: it
// reads again until every leave is there or settle has passed.
func verifyErasures(ctx context.Context, brokers []string, topic string, pool *pgxpool.Pool, keys *keystore.Store,
	victims []Victim, settle time.Duration) (ErasureChecks, error) {
	users := map[string]bool{}
	var names []string
	for _, v := range victims {
		users[v.User] = true
		names = append(names, v.User)
	}
	deadline := time.Now().Add(settle)
	for {
		var evs []victimEvent
		end, err := rebuild.CurrentEnds(ctx, brokers, topic)
		if err != nil {
			return ErasureChecks{}, fmt.Errorf("find the end of the log: %w", err)
		}
		err = rebuild.Scan(ctx, brokers, topic, end, func(r *kgo.Record) error {
			var ev imv1.SequencedEvent
			if err := proto.Unmarshal(r.Value, &ev); err != nil {
				return fmt.Errorf("%s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err)
			}
			if !users[ev.SenderUserId] {
				return nil
			}
			ve := victimEvent{Session: ev.SessionId, ClientMsgID: ev.ClientMsgId, Sender: ev.SenderUserId, Seq: ev.Seq}
			if m := ev.GetMessage(); m != nil {
				ve.Message, ve.KeyID, ve.HasBody = true, m.KeyId, len(m.Body) > 0
				if ve.HasBody {
					_, ve.OpenErr = keys.OpenBody(ctx, m.KeyId, m.Body, ev.SessionId, ev.SenderUserId)
				}
			}
			if mc := ev.GetMembership(); mc != nil && mc.Op == imv1.MembershipChange_OP_REMOVE && mc.Erasure != nil &&
				slices.Contains(mc.UserIds, ev.SenderUserId) {
				ve.ErasureLeave = true
			}
			evs = append(evs, ve)
			return nil
		})
		if err != nil {
			return ErasureChecks{}, fmt.Errorf("read the victims' events: %w", err)
		}
		f, err := readKeyFacts(ctx, pool, names)
		if err != nil {
			return ErasureChecks{}, err
		}
		c := checkErasures(victims, evs, f)
		if c.LeavesMissing == 0 || time.Now().After(deadline) {
			return c, nil
		}
		if err := sleep(ctx, 2*time.Second); err != nil {
			return c, err
		}
	}
}

// readKeyFacts reads what the key store tables hold of users.
func readKeyFacts(ctx context.Context, pool *pgxpool.Pool, users []string) (keyFacts, error) {
	f := keyFacts{live: map[string]int{}, erased: map[string]bool{}, destroyed: map[int64]string{}}
	rows, err := pool.Query(ctx, `SELECT owner_user_id, count(*) FROM seqflow_data_keys WHERE owner_user_id = ANY($1) GROUP BY 1`, users)
	if err != nil {
		return f, fmt.Errorf("read the victims' live keys: %w", err)
	}
	for rows.Next() {
		var u string
		var n int
		if err := rows.Scan(&u, &n); err != nil {
			rows.Close()
			return f, err
		}
		f.live[u] = n
	}
	rows.Close()
	rows, err = pool.Query(ctx, `SELECT user_id FROM seqflow_erased_users WHERE user_id = ANY($1)`, users)
	if err != nil {
		return f, fmt.Errorf("read the erased users: %w", err)
	}
	for rows.Next() {
		var u string
		if err := rows.Scan(&u); err != nil {
			rows.Close()
			return f, err
		}
		f.erased[u] = true
	}
	rows.Close()
	rows, err = pool.Query(ctx, `SELECT key_id, owner_user_id FROM seqflow_destroyed_keys WHERE owner_user_id = ANY($1)`, users)
	if err != nil {
		return f, fmt.Errorf("read the destroyed keys: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var u string
		if err := rows.Scan(&id, &u); err != nil {
			return f, err
		}
		f.destroyed[id] = u
	}
	return f, rows.Err()
}
