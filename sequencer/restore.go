package main

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/dedup"
	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/groups"
	"github.com/seqflow/seqflow/internal/membership"
	"github.com/seqflow/seqflow/schemas"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// restoreWindow rebuilds partition p's dedup window from the committed
// log: every event of the sequenced topic from (now - window) up to the
// end, then every refusal of the duplicates topic in the same span (a
// retry of a refused command is refused alike). It first waits, on both
// topics, until no transaction is open on the partition (the last stable
// offset reaches the high watermark seen at start), because a previous
// owner's commit may still be writing its markers: reading only up to an
// older stable offset would miss what is committed.
//
// It also returns, per session seen in the window, its last committed seq,
// for the segment book (segment.Book.Resume): the new owner reserves right
// after it, reusing the seqs crashed owners reserved and never committed.
//
// lso is the sequenced partition's last stable offset it read up to, for
// restoreGroups.
func (s *Sequencer) restoreWindow(ctx context.Context, p int32) (*dedup.Window, map[string]int64, int, int64, error) {
	w := dedup.NewWindow(s.cfg.DedupWindow, s.cfg.DedupMaxEntries)
	cl, err := kgo.NewClient(eventlog.ClientOpts(s.cfg.Brokers, "seqflow-sequencer-restore")...)
	if err != nil {
		return nil, nil, 0, 0, fmt.Errorf("restore client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topic, dups := s.cfg.Topics.Sequenced, s.cfg.Topics.Duplicates
	deadline := time.Now().Add(2*s.cfg.TxnTimeout + 15*time.Second)
	lso, err := stableEnd(ctx, adm, topic, p, deadline)
	if err != nil {
		return nil, nil, 0, 0, err
	}
	dupLSO, err := stableEnd(ctx, adm, dups, p, deadline)
	if err != nil {
		return nil, nil, 0, 0, err
	}
	since := time.Now().Add(-s.cfg.DedupWindow).UnixMilli()
	opts := eventlog.ClientOpts(s.cfg.Brokers, "seqflow-sequencer-restore")
	nowMs := time.Now().UnixMilli()
	n := 0
	last := map[string]int64{}
	start, err := offsetAfter(ctx, adm, topic, p, since)
	if err != nil {
		return nil, nil, 0, 0, err
	}
	if start >= 0 && start < lso {
		_, err := eventlog.ReadCommitted(ctx, opts, topic, p, start, lso, membership.DefaultReplayStall, func(r *kgo.Record) {
			var ev imv1.SequencedEvent
			if err := proto.Unmarshal(r.Value, &ev); err != nil {
				return // not ours to judge here; the log only holds what we wrote
			}
			w.Put(ev.SessionId, ev.SenderUserId, ev.ClientMsgId, dedup.Entry{Seq: ev.Seq, MsgID: ev.MsgId, ServerTsMs: ev.ServerTsMs}, nowMs)
			last[ev.SessionId] = max(last[ev.SessionId], ev.Seq)
			n++
		})
		if err != nil {
			return nil, nil, 0, 0, fmt.Errorf("read %s/%d: %w", topic, p, err)
		}
	}
	start, err = offsetAfter(ctx, adm, dups, p, since)
	if err != nil {
		return nil, nil, 0, 0, err
	}
	if start >= 0 && start < dupLSO {
		_, err := eventlog.ReadCommitted(ctx, opts, dups, p, start, dupLSO, membership.DefaultReplayStall, func(r *kgo.Record) {
			if eventlog.Header(r, schemas.HeaderEventType) != "refusal" {
				return
			}
			var rf imv1.Refusal
			if err := proto.Unmarshal(r.Value, &rf); err != nil || rf.Code == imv1.ErrorCode_ERROR_CODE_UNSPECIFIED {
				return
			}
			// An event of the same client message, put first, wins.
			w.Put(rf.SessionId, rf.SenderUserId, rf.ClientMsgId, dedup.Entry{ServerTsMs: rf.ServerTsMs, Refused: rf.Code, Reason: rf.Reason}, nowMs)
			n++
		})
		if err != nil {
			return nil, nil, 0, 0, fmt.Errorf("read %s/%d: %w", dups, p, err)
		}
	}
	return w, last, n, lso, nil
}

// stableEnd waits until partition p of topic has no open transaction (its
// last stable offset reaches the high watermark seen at the start) and
// returns that offset.
func stableEnd(ctx context.Context, adm *kadm.Client, topic string, p int32, deadline time.Time) (int64, error) {
	ends, err := eventlog.StableEnds(ctx, adm, topic, []int32{p}, deadline)
	if err != nil {
		return 0, err
	}
	return ends[p], nil
}

// offsetAfter is the first offset of partition p of topic with a
// timestamp at or after ms; negative when there is none.
func offsetAfter(ctx context.Context, adm *kadm.Client, topic string, p int32, ms int64) (int64, error) {
	from, err := adm.ListOffsetsAfterMilli(ctx, ms, topic)
	if err != nil {
		return 0, fmt.Errorf("find window start of %s: %w", topic, err)
	}
	start, ok := from.Lookup(topic, p)
	if !ok || start.Err != nil {
		return 0, fmt.Errorf("window start of %s/%d: %v", topic, p, start.Err)
	}
	return start.Offset, nil
}

// restoreGroups rebuilds partition p's governed sessions (internal/groups)
// from the committed sequenced log up to lso, the stable offset
// restoreWindow waited for: every event the previous owners committed. It
// starts from the partition's group snapshot when one is stored (and holds
// for an offset at or below lso), else from the partition's start. Only
// records whose event type can change group state are decoded.
func (s *Sequencer) restoreGroups(ctx context.Context, p int32, lso int64) (*groups.Partition, eventlog.ReadStats, bool, error) {
	topic := s.cfg.Topics.Sequenced
	gp, from, fromSnapshot := groups.NewPartition(s.cfg.MaxGroupMembers), int64(-1), false
	if s.snaps != nil && s.cfg.GroupSnapshotInterval > 0 {
		sp, next, found, err := s.snaps.Load(ctx, topic, p, s.cfg.MaxGroupMembers)
		switch {
		case err != nil:
			s.log.Warn("group snapshot unreadable; rebuilding from the partition's start", "partition", p, "err", err)
		case found && next <= lso:
			gp, from, fromSnapshot = sp, next, true
		case found:
			s.log.Warn("group snapshot is ahead of the log; rebuilding from the partition's start", "partition", p, "snapshot_offset", next, "stable_offset", lso)
		}
	}
	st, err := eventlog.ReadCommitted(ctx, eventlog.ClientOpts(s.cfg.Brokers, "seqflow-sequencer-restore"), topic, p, from, lso,
		membership.DefaultReplayStall, func(r *kgo.Record) {
			if !groups.Affects(eventlog.Header(r, schemas.HeaderEventType)) {
				return
			}
			var ev imv1.SequencedEvent
			if err := proto.Unmarshal(r.Value, &ev); err != nil {
				// Only a sequencer writes this log; every other
				// projection skips such a record too, so the rules
				// skip it alike rather than stop the partition.
				s.log.Error("sequenced record does not decode; group state skips it", "partition", p, "offset", r.Offset, "err", err)
				return
			}
			gp.Replay(&ev)
		})
	if err != nil {
		return nil, st, fromSnapshot, fmt.Errorf("rebuild group state: %w", err)
	}
	return gp, st, fromSnapshot, nil
}
