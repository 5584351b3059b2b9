package wire

// OpUnread tells a connection that asked changes its new unread count of
// a session when the user's read cursor moved (a read on any of their
// devices); chat messages and recalls carry the count in their event
// frame instead (EventFrame.Unread).
const OpUnread = "unread"

// UnreadFrame is the user's unread count of SessionID and their total,
// over every session, after a read.
type UnreadFrame struct {
	Op          string `json:"op"`
	SessionID   string `json:"session_id"`
	ReadSeq     int64  `json:"read_seq"`
	Unread      int64  `json:"unread"`
	TotalUnread int64  `json:"total_unread"`
}
