package client

import "github.com/seqflow/seqflow/internal/wire"

// UnreadCause says what moved the unread counts of an UnreadUpdate.
type UnreadCause string

const (
	// UnreadChanges: a changes result, the gateway's counts of every
	// session for this connection (asked on every connect and reconnect,
	// RecheckAfter later, every ResyncInterval, and by Changes and
	// Resync). It replaces every count the app holds.
	UnreadChanges UnreadCause = "changes"
	// UnreadEvent: a chat message or a recall pushed to this device, or
	// the membership event of the user's leave or removal (Unread 0), with
	// its session's count and the total after it.
	UnreadEvent UnreadCause = "event"
	// UnreadRead: the user's read cursor of a session moved, by a read on
	// any of their devices, this one included (an unread frame).
	UnreadRead UnreadCause = "read"
)

// UnreadUpdate is the user's unread counts as the gateway pushes them
// (docs/protocol.md, "Sync and "what changed""): the chat messages of
// others above the user's read cursor and join, recalled ones left out.
// Apply updates in the order they come; each is exact when sent, so an app
// never recounts.
type UnreadUpdate struct {
	Cause UnreadCause
	// SessionID and Unread are the session whose count this is and its
	// count (UnreadEvent, UnreadRead); empty and 0 for UnreadChanges.
	SessionID string
	Unread    int64
	// Seq is the pushed event's seq (UnreadEvent); ReadSeq the user's new
	// read cursor (UnreadRead).
	Seq, ReadSeq int64
	// TotalUnread is the sum over all of the user's sessions, always set.
	TotalUnread int64
	// Sessions is, for UnreadChanges only, every session of the user and
	// its count; a session not in it has none (the user left it).
	Sessions map[string]int64
}

// unreadUpdate reads the counts a frame carries, if any: an event frame
// with both counts, an unread frame, or a changes result (the only result
// with total_unread). An event the gateway did not count (not a chat
// message or recall, or no changes asked on the connection) has none.
func unreadUpdate(f *serverFrame) (UnreadUpdate, bool) {
	if f.TotalUnread == nil {
		return UnreadUpdate{}, false
	}
	total := *f.TotalUnread
	switch f.Op {
	case wire.OpEvent:
		if f.Unread == nil || f.Event == nil {
			return UnreadUpdate{}, false
		}
		return UnreadUpdate{Cause: UnreadEvent, SessionID: f.Event.SessionID, Unread: *f.Unread, Seq: f.Event.Seq, TotalUnread: total}, true
	case wire.OpUnread:
		if f.Unread == nil || f.SessionID == "" {
			return UnreadUpdate{}, false
		}
		return UnreadUpdate{Cause: UnreadRead, SessionID: f.SessionID, Unread: *f.Unread, ReadSeq: f.ReadSeq, TotalUnread: total}, true
	case wire.OpResult:
		m := make(map[string]int64, len(f.Sessions))
		for _, s := range f.Sessions {
			m[s.SessionID] = s.Unread
		}
		return UnreadUpdate{Cause: UnreadChanges, TotalUnread: total, Sessions: m}, true
	}
	return UnreadUpdate{}, false
}
