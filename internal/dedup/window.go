// Package dedup remembers, for a time window, which seq and message ID each
// client message (session_id, sender_user_id, client_msg_id) got, so a retry is answered
// with the same ones instead of a new seq; or that the session's rules
// refused it, so a retry is refused alike instead of being decided again
// (two attempts of one client message in flight at once, decided either
// side of a state change, would otherwise tell the client one outcome and
// the log another).
//
// The sender is part of the key: client message IDs are chosen by clients,
// so two users may pick the same one in one session, and each must get its
// own seq, never the other's.
//
// A Window holds only entries whose sequenced event is committed: callers
// stage the entries of a Kafka transaction and Commit them only after the
// transaction committed (or Discard them when it aborted). On a (re)assigned
// partition the window is rebuilt from the committed sequenced log, so a mark
// never outlives a failed write and is never lost for a committed one.
package dedup

import (
	"time"

	"github.com/seqflow/seqflow/schemas/imv1"
)

// Entry is what a client message got: a seq and message ID, or a refusal
// (Refused set, Seq and MsgID zero). ServerTsMs is when it was decided.
type Entry struct {
	Seq        int64
	MsgID      int64
	ServerTsMs int64
	Refused    imv1.ErrorCode
	Reason     string
}

type key struct{ session, sender, clientMsgID string }

type item struct {
	k  key
	ts int64
}

// Window is a bounded, time-limited map of client messages to their Entry.
// Entries expire TTL after their ServerTsMs; when more than Max are held the
// oldest go first. Not safe for concurrent use.
type Window struct {
	ttlMs int64
	max   int
	m     map[key]Entry
	// order is a FIFO of insertions, oldest first, for expiry and eviction.
	order []item
	head  int
	// Evicted counts entries dropped by the size bound before they expired.
	Evicted int64
}

// NewWindow returns a window of ttl holding at most max entries (max <= 0:
// unbounded).
func NewWindow(ttl time.Duration, max int) *Window {
	return &Window{ttlMs: ttl.Milliseconds(), max: max, m: map[key]Entry{}}
}

// Get returns the entry of sender's client message if it is inside the
// window at nowMs.
func (w *Window) Get(session, sender, clientMsgID string, nowMs int64) (Entry, bool) {
	e, ok := w.m[key{session, sender, clientMsgID}]
	if !ok || nowMs-e.ServerTsMs > w.ttlMs {
		return Entry{}, false
	}
	return e, true
}

// Put records e for a client message whose event is committed. A later Put
// of the same key keeps the first entry: the first seq is the one.
func (w *Window) Put(session, sender, clientMsgID string, e Entry, nowMs int64) {
	k := key{session, sender, clientMsgID}
	if old, ok := w.m[k]; ok && nowMs-old.ServerTsMs <= w.ttlMs {
		return
	}
	w.m[k] = e
	w.order = append(w.order, item{k, e.ServerTsMs})
	w.expire(nowMs)
}

// Len returns the number of entries held.
func (w *Window) Len() int { return len(w.m) }

func (w *Window) expire(nowMs int64) {
	for w.head < len(w.order) {
		it := w.order[w.head]
		over := w.max > 0 && len(w.m) > w.max
		if !over && nowMs-it.ts <= w.ttlMs {
			break
		}
		if e, ok := w.m[it.k]; ok && e.ServerTsMs == it.ts {
			delete(w.m, it.k)
			if over && nowMs-it.ts <= w.ttlMs {
				w.Evicted++
			}
		}
		w.head++
	}
	// Compact the FIFO once its dead prefix dominates.
	if w.head > 1024 && w.head*2 > len(w.order) {
		w.order = append(w.order[:0:0], w.order[w.head:]...)
		w.head = 0
	}
}
