// Package logcheck reads seqflow's committed logs back and checks the
// sequencer's guarantees against what producers sent:
//
//	G1 unique     no two events of a session share a seq
//	G2 increasing seq strictly grows in log order within a session;
//	              gaps are at most one segment step
//	G3 once       a client message has one event; every duplicate ACK
//	              repeats that event's seq and message ID
//	G4 order      a session's events keep the order of their first uplinks
//	G5 no loss    every sent message has an event (or a dead letter, or
//	              a refusal by the session's rules)
//	G6 rules      every event was allowed by its session's rules at its
//	              seq (internal/groups, replayed over the log in order)
//
// Tests, the chaos suite and operators (seqflow verify) share it.
package logcheck

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/groups"
	"github.com/seqflow/seqflow/schemas"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// Event is one committed sequenced event, as read back.
type Event struct {
	Partition    int32
	Offset       int64
	SessionID    string
	Seq          int64
	MsgID        int64
	ClientMsgID  string
	UplinkOffset int64
}

// Log is what the committed topics hold.
type Log struct {
	Events      []Event // log order within each partition
	Duplicates  []*imv1.DuplicateAck
	Refusals    []*imv1.Refusal
	DeadLetters []*imv1.DeadLetter
	// NotAllowed lists the events the session's rules refuse at their
	// place in the log (G6): each partition's events replayed in order
	// through internal/groups, Check before Replay.
	NotAllowed []string
}

// Read reads every committed record of the sequenced, duplicates and dead
// letter topics of t up to their current end, read_committed.
func Read(ctx context.Context, brokers []string, t eventlog.Topics) (*Log, error) {
	l := &Log{}
	rules := map[int32]*groups.Partition{}
	err := readTopic(ctx, brokers, t.Sequenced, func(r *kgo.Record) error {
		var ev imv1.SequencedEvent
		if err := proto.Unmarshal(r.Value, &ev); err != nil {
			return fmt.Errorf("%s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err)
		}
		gp := rules[r.Partition]
		if gp == nil {
			gp = groups.NewPartition(0)
			rules[r.Partition] = gp
		}
		if no := gp.Check(&ev); no != nil {
			l.NotAllowed = append(l.NotAllowed, fmt.Sprintf("%s seq %d (%s by %s, offset %d/%d): %v",
				ev.SessionId, ev.Seq, eventlog.Header(r, schemas.HeaderEventType), ev.SenderUserId, r.Partition, r.Offset, no))
		}
		gp.Replay(&ev)
		l.Events = append(l.Events, Event{Partition: r.Partition, Offset: r.Offset, SessionID: ev.SessionId, Seq: ev.Seq,
			MsgID: ev.MsgId, ClientMsgID: ev.ClientMsgId, UplinkOffset: ev.UplinkOffset})
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = readTopic(ctx, brokers, t.Duplicates, func(r *kgo.Record) error {
		if eventlog.Header(r, schemas.HeaderEventType) == "refusal" {
			rf := &imv1.Refusal{}
			if err := proto.Unmarshal(r.Value, rf); err != nil {
				return err
			}
			l.Refusals = append(l.Refusals, rf)
			return nil
		}
		d := &imv1.DuplicateAck{}
		if err := proto.Unmarshal(r.Value, d); err != nil {
			return err
		}
		l.Duplicates = append(l.Duplicates, d)
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = readTopic(ctx, brokers, t.DeadLetter, func(r *kgo.Record) error {
		d := &imv1.DeadLetter{}
		if err := proto.Unmarshal(r.Value, d); err != nil {
			return err
		}
		l.DeadLetters = append(l.DeadLetters, d)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}

// readTopic calls fn for every committed record of topic below the last
// stable offset at the time of the call.
func readTopic(ctx context.Context, brokers []string, topic string, fn func(*kgo.Record) error) error {
	cl, err := kgo.NewClient(eventlog.ClientOpts(brokers, "seqflow-audit")...)
	if err != nil {
		return err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, topic)
	if err != nil {
		return fmt.Errorf("list stable offsets of %s: %w", topic, err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil && o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	if len(want) == 0 {
		return nil
	}
	parts := map[int32]kgo.Offset{}
	for p := range want {
		parts[p] = kgo.NewOffset().AtStart()
	}
	rd, err := kgo.NewClient(append(eventlog.ClientOpts(brokers, "seqflow-audit"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords(),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: parts}))...)
	if err != nil {
		return err
	}
	defer rd.Close()
	seen := map[int32]int64{}
	for len(want) > 0 {
		fs := rd.PollFetches(ctx)
		if ctx.Err() != nil {
			return fmt.Errorf("read %s: %w; partitions not read to their stable offset: %s", topic, ctx.Err(), behind(want, seen))
		}
		if err := fs.Err0(); err != nil {
			return fmt.Errorf("read %s: %w", topic, err)
		}
		var ferr error
		fs.EachRecord(func(r *kgo.Record) {
			seen[r.Partition] = r.Offset
			end, ok := want[r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			if !r.Attrs.IsControl() && ferr == nil {
				ferr = fn(r)
			}
			if r.Offset >= end-1 {
				delete(want, r.Partition)
			}
		})
		if ferr != nil {
			return ferr
		}
	}
	return nil
}

// behind describes, for an error, where each unfinished partition stands.
func behind(want, seen map[int32]int64) string {
	parts := make([]int32, 0, len(want))
	for p := range want {
		parts = append(parts, p)
	}
	slices.Sort(parts)
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteString(", ")
		}
		last, ok := seen[p]
		if !ok {
			last = -1
		}
		fmt.Fprintf(&b, "%d (stable offset %d, last read %d)", p, want[p], last)
	}
	return b.String()
}

// Sent is what producers sent for one session, in the order they sent it
// (a retry repeats an ID; the first send fixes the message's place).
type Sent struct {
	SessionID    string
	ClientMsgIDs []string
}

// Report is the outcome of Check. Each slice holds human-readable
// findings; OK means all are empty.
type Report struct {
	Events, Sessions, Duplicates, DeadLetters, Refusals int
	MaxGap                                              int64
	SeqReused, SeqRegressions, Duplicated               []string
	OrderViolations, Lost, BadDuplicateAcks             []string
	Unexpected                                          []string
	// NotAllowed: events the session's rules refuse at their seq (G6),
	// e.g. a send accepted from a member who was muted or removed.
	NotAllowed []string
}

// OK reports whether no guarantee was broken.
func (r *Report) OK() bool {
	return len(r.SeqReused)+len(r.SeqRegressions)+len(r.Duplicated)+len(r.OrderViolations)+
		len(r.Lost)+len(r.BadDuplicateAcks)+len(r.Unexpected)+len(r.NotAllowed) == 0
}

func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "events=%d sessions=%d duplicate_acks=%d dead_letters=%d refusals=%d max_gap=%d\n", r.Events, r.Sessions, r.Duplicates, r.DeadLetters, r.Refusals, r.MaxGap)
	for _, f := range []struct {
		name string
		v    []string
	}{{"seq_reused", r.SeqReused}, {"seq_regressions", r.SeqRegressions}, {"duplicated", r.Duplicated},
		{"order_violations", r.OrderViolations}, {"lost", r.Lost}, {"bad_duplicate_acks", r.BadDuplicateAcks}, {"unexpected", r.Unexpected},
		{"accepted_not_allowed", r.NotAllowed}} {
		fmt.Fprintf(&b, "%s=%d", f.name, len(f.v))
		for i, s := range f.v {
			if i == 5 {
				fmt.Fprintf(&b, " ...")
				break
			}
			fmt.Fprintf(&b, "\n  %s", s)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// Check verifies G1–G5 for the sessions in sent against l. maxGap is the
// largest gap allowed between consecutive seqs (the segment step).
// deadLettered names client messages expected to be dead-lettered instead.
func Check(l *Log, sent []Sent, maxGap int64) *Report {
	r := &Report{Events: len(l.Events), Duplicates: len(l.Duplicates), DeadLetters: len(l.DeadLetters), Refusals: len(l.Refusals),
		NotAllowed: l.NotAllowed}
	type key struct{ s, c string }
	want := map[string]bool{}
	rank := map[key]int{} // a client message's place in its session's send order
	for _, s := range sent {
		want[s.SessionID] = true
		for _, c := range s.ClientMsgIDs {
			if _, ok := rank[key{s.SessionID, c}]; !ok {
				rank[key{s.SessionID, c}] = len(rank)
			}
		}
	}
	got := map[key]Event{}
	type last struct {
		seq   int64
		rank  int
		upOff int64
	}
	prev := map[string]*last{}
	seqs := map[string]map[int64]string{}
	sessions := map[string]bool{}
	for _, ev := range l.Events {
		if !want[ev.SessionID] {
			continue
		}
		sessions[ev.SessionID] = true
		k := key{ev.SessionID, ev.ClientMsgID}
		if first, dup := got[k]; dup {
			r.Duplicated = append(r.Duplicated, fmt.Sprintf("%s/%s has seq %d and %d", ev.SessionID, ev.ClientMsgID, first.Seq, ev.Seq))
		} else {
			got[k] = ev
		}
		if seqs[ev.SessionID] == nil {
			seqs[ev.SessionID] = map[int64]string{}
		}
		if other, used := seqs[ev.SessionID][ev.Seq]; used {
			r.SeqReused = append(r.SeqReused, fmt.Sprintf("%s seq %d given to %s and %s", ev.SessionID, ev.Seq, other, ev.ClientMsgID))
		}
		seqs[ev.SessionID][ev.Seq] = ev.ClientMsgID
		rk, known := rank[k]
		if !known {
			r.Unexpected = append(r.Unexpected, fmt.Sprintf("%s/%s was never sent", ev.SessionID, ev.ClientMsgID))
		}
		if p := prev[ev.SessionID]; p != nil {
			if ev.Seq <= p.seq {
				r.SeqRegressions = append(r.SeqRegressions, fmt.Sprintf("%s seq %d after %d (offset %d)", ev.SessionID, ev.Seq, p.seq, ev.Offset))
			} else if gap := ev.Seq - p.seq - 1; gap > r.MaxGap {
				r.MaxGap = gap
			}
			if known && rk < p.rank {
				r.OrderViolations = append(r.OrderViolations, fmt.Sprintf("%s %s (sent #%d) sequenced after sent #%d", ev.SessionID, ev.ClientMsgID, rk, p.rank))
			}
			if ev.UplinkOffset <= p.upOff {
				r.OrderViolations = append(r.OrderViolations, fmt.Sprintf("%s uplink offset %d after %d", ev.SessionID, ev.UplinkOffset, p.upOff))
			}
		} else if gap := ev.Seq - 1; gap > r.MaxGap {
			r.MaxGap = gap
		}
		prev[ev.SessionID] = &last{seq: ev.Seq, rank: rk, upOff: ev.UplinkOffset}
	}
	r.Sessions = len(sessions)
	if maxGap > 0 && r.MaxGap > maxGap {
		r.SeqRegressions = append(r.SeqRegressions, fmt.Sprintf("gap of %d seqs exceeds one segment step (%d)", r.MaxGap, maxGap))
	}
	dead := map[key]bool{}
	for _, d := range l.DeadLetters {
		var u imv1.Uplink
		if proto.Unmarshal(d.OriginalValue, &u) == nil {
			dead[key{u.SessionId, u.ClientMsgId}] = true
		}
	}
	// A refused message is not lost while it stays refused; a retry of it
	// that was accepted later has its event.
	for _, rf := range l.Refusals {
		dead[key{rf.SessionId, rf.ClientMsgId}] = true
	}
	var lost []string
	for k := range rank {
		if _, ok := got[k]; !ok && !dead[k] {
			lost = append(lost, k.s+"/"+k.c)
		}
	}
	sort.Strings(lost)
	r.Lost = lost
	for _, d := range l.Duplicates {
		if !want[d.SessionId] {
			continue
		}
		ev, ok := got[key{d.SessionId, d.ClientMsgId}]
		if !ok || ev.Seq != d.Seq || ev.MsgID != d.MsgId {
			r.BadDuplicateAcks = append(r.BadDuplicateAcks, fmt.Sprintf("%s/%s ack seq %d msg %d, event seq %d msg %d", d.SessionId, d.ClientMsgId, d.Seq, d.MsgId, ev.Seq, ev.MsgID))
		}
	}
	return r
}
