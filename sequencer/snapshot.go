package main

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/seqflow/seqflow/internal/groups"
)

// snapshotter saves one partition's group state now and then (README,
// "Group rules"): after a committed batch, when the interval has passed
// and some group changed, the changed states are copied on the loop's
// goroutine and saved by another, one save at a time; a failed save's
// sessions are saved again with the next one, so every stored snapshot
// holds every change before its offset.
type snapshotter struct {
	last time.Time // when the last save started

	mu     sync.Mutex
	busy   bool
	failed []string // sessions of a failed save, to save again
}

// groupSnapshot starts a save of st's group state if one is due.
func (s *Sequencer) groupSnapshot(p int32, st *partState) {
	if s.snaps == nil || s.cfg.GroupSnapshotInterval <= 0 || time.Since(st.snap.last) < s.cfg.GroupSnapshotInterval {
		return
	}
	st.snap.mu.Lock()
	if st.snap.busy {
		st.snap.mu.Unlock()
		return
	}
	st.groups.MarkDirty(st.snap.failed)
	st.snap.failed = nil
	if st.groups.Dirty() == 0 {
		st.snap.mu.Unlock()
		return
	}
	st.snap.busy = true
	st.snap.mu.Unlock()
	states, next := st.groups.TakeDirty(), st.groupsNext
	st.snap.last = time.Now()
	go func() {
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := s.snaps.Save(ctx, s.cfg.Topics.Sequenced, p, next, states)
		cancel()
		s.m.groupSnapSecs.Observe(time.Since(start).Seconds())
		st.snap.mu.Lock()
		defer st.snap.mu.Unlock()
		st.snap.busy = false
		switch {
		case err == nil:
			s.m.groupSnapshots.WithLabelValues("saved").Inc()
		case errors.Is(err, groups.ErrStaleSnapshot):
			// A newer snapshot (another owner's) holds these changes.
			s.m.groupSnapshots.WithLabelValues("stale").Inc()
		default:
			s.m.groupSnapshots.WithLabelValues("failed").Inc()
			s.log.Warn("group snapshot failed; its sessions go with the next one", "partition", p, "sessions", len(states), "err", err)
			for id := range states {
				st.snap.failed = append(st.snap.failed, id)
			}
		}
	}()
}

// lastSequenced returns the highest offset pb's events got in the
// sequenced topic, or -1 when it produced none there.
func (pb *partBatch) lastSequenced(topic string) int64 {
	last := int64(-1)
	for _, r := range pb.out {
		if r.Topic == topic && r.Offset > last {
			last = r.Offset
		}
	}
	return last
}

// idleSnapshots saves the group state of every partition that is due,
// between batches.
func (s *Sequencer) idleSnapshots() {
	s.mu.Lock()
	parts := make(map[int32]*partState, len(s.parts))
	for p, st := range s.parts {
		parts[p] = st
	}
	s.mu.Unlock()
	for p, st := range parts {
		s.groupSnapshot(p, st)
	}
}
