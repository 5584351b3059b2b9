// Package rebuild compares the message store with the sequenced log it is
// built from, and rebuilds a store from the log (replay). The log is the
// source of truth: what it holds, after the first-wins rule for repeated
// keys, is exactly what the messages table must hold.
package rebuild

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/store"
	"github.com/seqflow/seqflow/schemas"
)

// Log is the committed content of a sequenced topic up to End.
type Log struct {
	Rows    []store.Row // in log order per partition
	Invalid int         // records that cannot be stored (dead-lettered by the persister)
	End     map[int32]int64
}

// Ends returns, per partition of topic, the last stable offset: every
// record before it is committed or aborted, so a read_committed reader can
// read up to it and know it saw everything committed so far.
func Ends(ctx context.Context, cl *kgo.Client, topic string) (map[int32]int64, error) {
	adm := kadm.NewClient(cl)
	stable, err := adm.ListCommittedOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("list stable offsets of %s: %w", topic, err)
	}
	out := map[int32]int64{}
	var first error
	stable.Each(func(o kadm.ListedOffset) {
		if o.Err != nil && first == nil {
			first = fmt.Errorf("stable offset of %s/%d: %w", topic, o.Partition, o.Err)
		}
		out[o.Partition] = o.Offset
	})
	if first != nil {
		return nil, first
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("topic %s has no partitions (does it exist?)", topic)
	}
	return out, nil
}

// Scan reads topic (read committed) from offset 0 up to end, calling fn for
// every committed record in log order per partition, and progress with the
// records read so far.
func Scan(ctx context.Context, brokers []string, topic string, end map[int32]int64, fn func(*kgo.Record) error) error {
	start := map[int32]kgo.Offset{}
	left := 0
	for p, e := range end {
		if e > 0 {
			start[p] = kgo.NewOffset().At(0)
			left++
		}
	}
	if left == 0 {
		return nil
	}
	cl, err := kgo.NewClient(append(eventlog.ClientOpts(brokers, "seqflow-audit"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), // the last offset before the end may be a commit marker
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: start}),
		kgo.FetchMaxBytes(32<<20),
	)...)
	if err != nil {
		return fmt.Errorf("log reader: %w", err)
	}
	defer cl.Close()
	done := map[int32]bool{}
	for left > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := fs.Err0(); err != nil {
			return fmt.Errorf("read %s: %w", topic, err)
		}
		var ferr error
		fs.EachPartition(func(fp kgo.FetchTopicPartition) {
			if fp.Err != nil && ferr == nil {
				ferr = fmt.Errorf("read %s/%d: %w", topic, fp.Partition, fp.Err)
			}
			for _, r := range fp.Records {
				if done[r.Partition] || ferr != nil {
					continue
				}
				if r.Offset >= end[r.Partition]-1 {
					done[r.Partition] = true
					left--
				}
				if r.Attrs.IsControl() || r.Offset >= end[r.Partition] {
					continue
				}
				if err := fn(r); err != nil {
					ferr = err
				}
			}
		})
		if ferr != nil {
			return ferr
		}
		if len(done) > 0 {
			var ps []int32
			for p := range done {
				ps = append(ps, p)
			}
			cl.PauseFetchPartitions(map[string][]int32{topic: ps})
		}
	}
	return nil
}

// CurrentEnds returns Ends of topic with a client of its own.
func CurrentEnds(ctx context.Context, brokers []string, topic string) (map[int32]int64, error) {
	cl, err := kgo.NewClient(eventlog.ClientOpts(brokers, "seqflow-audit-admin")...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	return Ends(ctx, cl, topic)
}

// ReadLog reads the committed events of a sequenced topic up to end per
// partition (nil: its current stable offsets).
func ReadLog(ctx context.Context, brokers []string, topic string, end map[int32]int64) (*Log, error) {
	if end == nil {
		var err error
		if end, err = CurrentEnds(ctx, brokers, topic); err != nil {
			return nil, err
		}
	}
	l := &Log{End: end}
	err := Scan(ctx, brokers, topic, end, func(r *kgo.Record) error {
		it, err := store.Decode(store.FromSequenced, eventlog.Header(r, schemas.HeaderEventType), r.Value, r.Partition, r.Offset)
		if err != nil || it.Row == nil {
			l.Invalid++
			return nil
		}
		l.Rows = append(l.Rows, *it.Row)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}

// SessionDiff is what differs for one session.
type SessionDiff struct {
	SessionID  string
	Missing    []int64  // seqs in the log, not in the store
	Extra      []int64  // seqs in the store, not in the log
	Mismatched []int64  // seqs whose stored row differs from the log's event
	Details    []string // the first differences, in words
}

// Report is the outcome of Compare.
type Report struct {
	LogEvents   int // events expected in the store
	StoreRows   int
	Sessions    int // sessions in the log or the store
	Differences []SessionDiff
	// Taken: sessions clients took without a create (Taken); not a
	// difference between the store and the log, but a finding of its own.
	Taken   []TakenSession
	Elapsed time.Duration
}

// Equal reports whether the store holds exactly the log.
func (r *Report) Equal() bool { return len(r.Differences) == 0 }

// Expected applies the store's first-wins rule to the log: the first event
// of each (session, seq) and of each msg_id is kept; later repeats are
// duplicates, later contradictions are dead-lettered. A message recalled
// by its sender, and every edit aimed at it, keeps no body.
func Expected(rows []store.Row) map[store.Key]store.Row {
	want := make(map[store.Key]store.Row, len(rows))
	ids := make(map[int64]bool, len(rows))
	for _, r := range rows {
		k := store.Key{SessionID: r.SessionID, Seq: r.Seq}
		if _, ok := want[k]; ok || ids[r.MsgID] {
			continue
		}
		want[k], ids[r.MsgID] = r, true
	}
	// A recall by the message's sender scrubs the bodies of the message
	// and of every edit row aimed at it, as the store's writer does.
	recalled := map[store.Key]bool{}
	for _, r := range want {
		if r.Kind != store.KindRecall {
			continue
		}
		t := store.Key{SessionID: r.SessionID, Seq: r.TargetSeq}
		if m, ok := want[t]; ok && m.Kind == store.KindMessage && m.SenderUserID == r.SenderUserID {
			recalled[t] = true
		}
	}
	for k, r := range want {
		if recalled[k] || (r.Kind == store.KindEdit && recalled[store.Key{SessionID: r.SessionID, Seq: r.TargetSeq}]) {
			r.Body = nil
			want[k] = r
		}
	}
	return want
}

// Compare reads every row of schema's messages table and compares it with
// the log: missing, extra and mismatched rows per session. Rows from past
// the log's end (written while the log was read) are left out.
func Compare(ctx context.Context, pool *pgxpool.Pool, schema string, l *Log) (*Report, error) {
	start := time.Now()
	want := Expected(l.Rows)
	rep := &Report{LogEvents: len(want), Taken: Taken(l.Rows)}
	diffs := map[string]*SessionDiff{}
	diff := func(s string) *SessionDiff {
		d := diffs[s]
		if d == nil {
			d = &SessionDiff{SessionID: s}
			diffs[s] = d
		}
		return d
	}
	sessions := map[string]bool{}
	seen := make(map[store.Key]bool, len(want))
	err := store.ScanRows(ctx, pool, schema, func(got store.Row) error {
		if end, ok := l.End[got.Partition]; ok && got.Offset >= end {
			return nil
		}
		rep.StoreRows++
		sessions[got.SessionID] = true
		k := store.Key{SessionID: got.SessionID, Seq: got.Seq}
		exp, ok := want[k]
		if !ok {
			diff(got.SessionID).Extra = append(diff(got.SessionID).Extra, got.Seq)
			return nil
		}
		seen[k] = true
		if d := RowDiff(exp, got); d != "" {
			sd := diff(got.SessionID)
			sd.Mismatched = append(sd.Mismatched, got.Seq)
			if len(sd.Details) < 5 {
				sd.Details = append(sd.Details, fmt.Sprintf("seq %d: %s", got.Seq, d))
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for k := range want {
		sessions[k.SessionID] = true
		if !seen[k] {
			diff(k.SessionID).Missing = append(diff(k.SessionID).Missing, k.Seq)
		}
	}
	rep.Sessions = len(sessions)
	for _, d := range diffs {
		slices.Sort(d.Missing)
		slices.Sort(d.Extra)
		slices.Sort(d.Mismatched)
		rep.Differences = append(rep.Differences, *d)
	}
	sort.Slice(rep.Differences, func(i, j int) bool { return rep.Differences[i].SessionID < rep.Differences[j].SessionID })
	rep.Elapsed = time.Since(start)
	return rep, nil
}

// RowDiff names the first field where got differs from want, or "".
func RowDiff(want, got store.Row) string {
	type f struct {
		name string
		eq   bool
	}
	for _, c := range []f{
		{"msg_id", want.MsgID == got.MsgID}, {"client_msg_id", want.ClientMsgID == got.ClientMsgID},
		{"sender_user_id", want.SenderUserID == got.SenderUserID}, {"sender_device_id", want.SenderDeviceID == got.SenderDeviceID},
		{"kind", want.Kind == got.Kind}, {"content_type", want.ContentType == got.ContentType},
		{"body", bytes.Equal(want.Body, got.Body)}, {"body_key_id", want.BodyKeyID == got.BodyKeyID},
		{"target_seq", want.TargetSeq == got.TargetSeq},
		{"member_op", want.MemberOp == got.MemberOp}, {"member_ids", slices.Equal(want.MemberIDs, got.MemberIDs)},
		{"session_kind", want.SessionKind == got.SessionKind}, {"title", want.Title == got.Title},
		{"server_ts_ms", want.ServerTsMs == got.ServerTsMs}, {"gateway_ts_ms", want.GatewayTsMs == got.GatewayTsMs},
		{"log_partition", want.Partition == got.Partition}, {"log_offset", want.Offset == got.Offset},
	} {
		if !c.eq {
			return c.name + " differs"
		}
	}
	return ""
}
