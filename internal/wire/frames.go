// Package wire defines the client protocol of producer-gw: the JSON frames
// a client sends over WebSocket (and, without "op", as HTTP bodies), the
// frames the gateway answers with, their limits and their decoding. The
// protocol is documented with examples in docs/protocol.md.
package wire

import (
	"encoding/json"
)

// Client operations, the "op" of a client frame.
const (
	OpSend          = "send"
	OpEdit          = "edit"
	OpRecall        = "recall"
	OpCreateSession = "create_session"
	OpMembers       = "members"
	OpSync          = "sync"
	OpChanges       = "changes"
	OpRead          = "read"
	OpDelivered     = "delivered"
	OpPing          = "ping"
	// OpTyping is an ephemeral signal: never sequenced, may be lost.
	OpTyping = "typing"
	// OpSeenBy asks who has read a session up to a seq.
	OpSeenBy = "seen_by"
)

// Server frame ops.
const (
	OpAck       = "ack"
	OpSeqNotice = "seq_notice"
	OpError     = "error"
	OpEvent     = "event"
	OpResult    = "result"
	OpPong      = "pong"
	OpHello     = "hello"
	// OpReceipt tells a device that another member received or read a
	// session up to a seq (ephemeral, coalesced).
	OpReceipt = "receipt"
)

// Receipt kinds in receipt frames.
const (
	ReceiptDelivered = "delivered"
	ReceiptRead      = "read"
)

// Message content types the gateway accepts.
const (
	TypeText   = "text"
	TypeImage  = "image"
	TypeFile   = "file"
	TypeCustom = "custom"
)

// Session kinds in create_session.
const (
	KindDirect = "direct"
	KindGroup  = "group"
)

// Membership actions.
const (
	ActionAdd    = "add"
	ActionRemove = "remove"
)

// ClientFrame is any frame a client sends; which fields matter depends on
// Op (see Validate). Unknown fields are ignored, so clients may be newer
// than the gateway.
type ClientFrame struct {
	Op string `json:"op"`
	// ReqID, when set, is echoed in the reply so a client can match them.
	ReqID string `json:"req_id,omitempty"`

	ClientMsgID string `json:"client_msg_id,omitempty"`
	SessionID   string `json:"session_id,omitempty"`
	// Type is the content type of send and edit ("text", ...).
	Type string `json:"type,omitempty"`
	// Body is a JSON string for "text", a JSON object for other types.
	Body json.RawMessage `json:"body,omitempty"`
	// ClientTs is the client's clock in Unix milliseconds, informative.
	ClientTs int64 `json:"client_ts,omitempty"`
	// Traceparent is an optional W3C trace context for the send.
	Traceparent string `json:"traceparent,omitempty"`

	TargetSeq int64 `json:"target_seq,omitempty"`

	Kind          string   `json:"kind,omitempty"`
	PeerUserID    string   `json:"peer_user_id,omitempty"`
	MemberUserIDs []string `json:"member_user_ids,omitempty"`
	Title         string   `json:"title,omitempty"`
	Action        string   `json:"action,omitempty"`
	UserIDs       []string `json:"user_ids,omitempty"`

	// A sync pages forward from after_seq (the default, from the start),
	// backward from before_seq, or around around_seq: at most one is set.
	AfterSeq  int64 `json:"after_seq,omitempty"`
	BeforeSeq int64 `json:"before_seq,omitempty"`
	AroundSeq int64 `json:"around_seq,omitempty"`
	Limit     int   `json:"limit,omitempty"`
	Seq       int64 `json:"seq,omitempty"`

	Cursors []Cursor `json:"cursors,omitempty"`

	// Active says, in a typing frame, that the user is typing (absent or
	// false: stopped).
	Active bool `json:"active,omitempty"`

	// Group governance (op "group", see GroupChange) and a group's
	// initial settings (create_session).
	UserID       string         `json:"user_id,omitempty"`
	Role         string         `json:"role,omitempty"`
	MutedUntilMs int64          `json:"muted_until_ms,omitempty"`
	Muted        *bool          `json:"muted,omitempty"`
	InviteCode   string         `json:"invite_code,omitempty"`
	Settings     *GroupSettings `json:"settings,omitempty"`

	// member_list pages after AfterUserID; member_changes starts after
	// SinceVersion (0: from the start).
	AfterUserID  string `json:"after_user_id,omitempty"`
	SinceVersion int64  `json:"since_version,omitempty"`

	// DeviceID is the device sign_out signs out.
	DeviceID string `json:"device_id,omitempty"`

	// ReadReceipts, in settings, turns sending read receipts on or off
	// (absent: unchanged).
	ReadReceipts *bool `json:"read_receipts,omitempty"`
}

// Cursor is a (session, seq) position: in delivered frames, the highest
// contiguous seq the device holds for the session.
type Cursor struct {
	SessionID string `json:"session_id"`
	Seq       int64  `json:"seq"`
}

// Ack answers a send, edit, recall, create_session or members frame.
// Status "ok" carries seq, msg_id and server_ts; "accepted" means the
// command is durable in Kafka and its seq will follow in a seq_notice.
type Ack struct {
	Op          string `json:"op"`
	ReqID       string `json:"req_id,omitempty"`
	ClientMsgID string `json:"client_msg_id"`
	SessionID   string `json:"session_id"`
	Status      string `json:"status"`
	Seq         int64  `json:"seq,omitempty"`
	// MsgID is a decimal string: snowflake IDs exceed JavaScript's 2^53.
	MsgID    string `json:"msg_id,omitempty"`
	ServerTs int64  `json:"server_ts,omitempty"`
	// Duplicate is true when this answers a retry of an already sequenced
	// client_msg_id (same seq and msg_id as the first answer).
	Duplicate bool `json:"duplicate,omitempty"`
	// Error is set with status "refused": the sequencer refused the
	// command by the session's rules (a seq_notice after "accepted"; a
	// command still waiting gets an error frame instead).
	Error *ErrorBody `json:"error,omitempty"`
}

// Ack statuses.
const (
	StatusOK       = "ok"
	StatusAccepted = "accepted"
	StatusRefused  = "refused"
)

// ErrorFrame reports a failed client frame; the connection stays open.
type ErrorFrame struct {
	Op          string    `json:"op"`
	ReqID       string    `json:"req_id,omitempty"`
	ClientMsgID string    `json:"client_msg_id,omitempty"`
	Error       ErrorBody `json:"error"`
}

// ErrorBody is a registry error: code, stable name, message, retryable.
type ErrorBody struct {
	Code      int32  `json:"code"`
	Name      string `json:"name"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
}

// Message is one sequenced event as clients see it, pushed in an "event"
// frame or returned by sync (there in its current state: Edited/Recalled).
type Message struct {
	SessionID      string `json:"session_id"`
	Seq            int64  `json:"seq"`
	MsgID          string `json:"msg_id"`
	ClientMsgID    string `json:"client_msg_id,omitempty"`
	SenderUserID   string `json:"sender_user_id"`
	SenderDeviceID string `json:"sender_device_id,omitempty"`
	ServerTs       int64  `json:"server_ts"`
	// Kind is message, session_create, membership, edit or recall.
	Kind string          `json:"kind"`
	Type string          `json:"type,omitempty"`
	Body json.RawMessage `json:"body,omitempty"`
	// TargetSeq is the message an edit or recall applies to.
	TargetSeq int64 `json:"target_seq,omitempty"`
	// Session creation and membership details.
	SessionKind string   `json:"session_kind,omitempty"`
	Title       string   `json:"title,omitempty"`
	Action      string   `json:"action,omitempty"`
	UserIDs     []string `json:"user_ids,omitempty"`
	// Group: a group governance event's details (kind "group", its
	// operation in Action), or a group's settings in its session_create.
	Group *GroupEvent `json:"group,omitempty"`
	// Current state in sync results.
	Edited   bool `json:"edited,omitempty"`
	Recalled bool `json:"recalled,omitempty"`
	// Erased: the body was sealed with a data key that has been destroyed
	// (its sender was erased, or the session's retention expired it); the
	// message keeps its place (seq, sender, time) with no body.
	Erased bool `json:"erased,omitempty"`
}

// TypingFrame tells a device that another member of a session is typing
// (active) or stopped. It is ephemeral: show it for ExpiresInMs at most
// unless a newer one comes; it has no seq and is never synced.
type TypingFrame struct {
	Op          string `json:"op"`
	SessionID   string `json:"session_id"`
	UserID      string `json:"user_id"`
	DeviceID    string `json:"device_id"`
	Active      bool   `json:"active"`
	ExpiresInMs int64  `json:"expires_in_ms"`
}

// ReceiptFrame tells a device that another member has received
// (Kind "delivered", on any of its devices) or read ("read") a session up
// to Seq. It is ephemeral: what a client gathers from these may miss some;
// seen_by gives the exact answer for reads.
type ReceiptFrame struct {
	Op        string `json:"op"`
	SessionID string `json:"session_id"`
	UserID    string `json:"user_id"`
	Kind      string `json:"kind"`
	Seq       int64  `json:"seq"`
}

// SeenByResult answers seen_by: who of the session's current members has
// read it up to Seq, the sender of Seq left out. Users is listed for
// sessions of up to 500 members; Count always.
type SeenByResult struct {
	Op        string   `json:"op"`
	ReqID     string   `json:"req_id,omitempty"`
	SessionID string   `json:"session_id"`
	Seq       int64    `json:"seq"`
	Users     []string `json:"users,omitempty"`
	Count     int64    `json:"count"`
	Members   int64    `json:"members"`
}

// EventFrame pushes one event to a device.
type EventFrame struct {
	Op    string  `json:"op"`
	Event Message `json:"event"`
	// Unread and TotalUnread are, on a chat message or a recall pushed to
	// a connection that asked changes, the user's unread count of the
	// event's session and over all sessions, after the event (see
	// UnreadFrame).
	Unread      *int64 `json:"unread,omitempty"`
	TotalUnread *int64 `json:"total_unread,omitempty"`
}

// SyncResult answers sync. After after_seq, and around around_seq, the
// messages come in seq order; before before_seq, newest first.
type SyncResult struct {
	Op        string    `json:"op"`
	ReqID     string    `json:"req_id,omitempty"`
	SessionID string    `json:"session_id"`
	Messages  []Message `json:"messages"`
	// HasMore says another page follows in the direction of the sync: newer
	// messages after the last one (after_seq, around_seq), older ones
	// before the last one (before_seq).
	HasMore bool `json:"has_more"`
	// HasMoreBefore says, for around_seq, that older messages precede the
	// first one.
	HasMoreBefore bool `json:"has_more_before,omitempty"`
}

// SessionChange is one session of the user in a changes result.
type SessionChange struct {
	SessionID string `json:"session_id"`
	MaxSeq    int64  `json:"max_seq"`
	ReadSeq   int64  `json:"read_seq"`
	Preview   string `json:"preview,omitempty"`
	// Unread counts the chat messages of others after read_seq (and after
	// the user joined), recalled ones left out; other events never count.
	Unread int64 `json:"unread"`
	// MemberVersion is the seq of the latest membership or governance
	// event; a client holding an older member list asks member_changes.
	MemberVersion int64 `json:"member_version"`
	// Role is the user's role in the session: owner, admin or member.
	Role string `json:"role,omitempty"`
}

// ChangesResult answers changes: every session of the user.
type ChangesResult struct {
	Op       string          `json:"op"`
	ReqID    string          `json:"req_id,omitempty"`
	Sessions []SessionChange `json:"sessions"`
	// TotalUnread is the sum of the sessions' unread counts.
	TotalUnread int64 `json:"total_unread"`
}

// OK answers read, delivered and ping-less requests that return nothing.
type OK struct {
	Op    string `json:"op"`
	ReqID string `json:"req_id,omitempty"`
}

// Hello is the first frame on a new connection.
type Hello struct {
	Op        string `json:"op"`
	ConnID    string `json:"conn_id"`
	UserID    string `json:"user_id"`
	DeviceID  string `json:"device_id"`
	GatewayID string `json:"gateway_id"`
	// Platform is the connection's platform (token claim, else the
	// connect's platform parameter), absent when neither gave one.
	Platform string `json:"platform,omitempty"`
	// HeartbeatMs is how often the gateway pings; a client that hears
	// nothing for twice that should reconnect.
	HeartbeatMs int64 `json:"heartbeat_ms"`
	// MaxFrameBytes is the largest frame the gateway accepts.
	MaxFrameBytes int `json:"max_frame_bytes"`
}
