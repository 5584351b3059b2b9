package client

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/seqflow/seqflow/internal/wire"
)

// maxServerFrame bounds one frame read from the gateway: a full sync page
// (200 messages of up to 16 KiB bodies, escaped) fits with room to spare.
const maxServerFrame = 8 << 20

// serverFrame is any gateway frame, decoded loosely: which fields are set
// depends on Op (docs/protocol.md, "Frames").
type serverFrame struct {
	Op          string          `json:"op"`
	ReqID       string          `json:"req_id"`
	ClientMsgID string          `json:"client_msg_id"`
	SessionID   string          `json:"session_id"`
	Status      string          `json:"status"`
	Seq         int64           `json:"seq"`
	MsgID       string          `json:"msg_id"`
	ServerTs    int64           `json:"server_ts"`
	Duplicate   bool            `json:"duplicate"`
	Error       *wire.ErrorBody `json:"error"`
	Event       *wire.Message   `json:"event"`
	Messages    []wire.Message  `json:"messages"`
	HasMore     bool            `json:"has_more"`
	// HasMoreBefore: older messages precede an around_seq page.
	HasMoreBefore bool                 `json:"has_more_before"`
	Sessions      []wire.SessionChange `json:"sessions"`
	// Unread counts: on chat and recall events after changes, in unread
	// frames, and the total in changes results. Pointers, because an
	// event without them (not counted) is not an event with a count of 0.
	Unread      *int64 `json:"unread"`
	TotalUnread *int64 `json:"total_unread"`
	// ReadSeq: the user's read cursor, in unread frames.
	ReadSeq int64 `json:"read_seq"`

	ConnID        string `json:"conn_id"`
	UserID        string `json:"user_id"`
	DeviceID      string `json:"device_id"`
	GatewayID     string `json:"gateway_id"`
	HeartbeatMs   int64  `json:"heartbeat_ms"`
	MaxFrameBytes int    `json:"max_frame_bytes"`

	// Typing and receipt frames.
	Kind        string `json:"kind"`
	Active      bool   `json:"active"`
	ExpiresInMs int64  `json:"expires_in_ms"`

	// seen_by results (members: a count), member_list results (members:
	// a list) and member_changes results.
	Users         []string            `json:"users"`
	Count         int64               `json:"count"`
	Members       json.RawMessage     `json:"members"`
	MemberVersion int64               `json:"member_version"`
	Changes       []wire.MemberChange `json:"changes"`

	// devices, sign_out and presence results.
	Devices     []wire.DeviceInfo   `json:"devices"`
	SignedOutAt int64               `json:"signed_out_at"`
	Presence    []wire.UserPresence `json:"presence"`
	NotVisible  []string            `json:"not_visible"`

	// settings results.
	ReadReceipts bool `json:"read_receipts"`
}

var errBadFrame = errors.New("bad server frame")

// decodeFrame parses one gateway frame and checks what the client relies
// on: an op, an event with a session and a positive seq, an error body on
// error frames, ACK fields on ok ACKs.
func decodeFrame(b []byte) (serverFrame, error) {
	var f serverFrame
	if len(b) > maxServerFrame {
		return f, fmt.Errorf("%w: %d bytes", errBadFrame, len(b))
	}
	if !decodeFast(b, &f) {
		f = serverFrame{}
		if err := json.Unmarshal(b, &f); err != nil {
			return f, fmt.Errorf("%w: %v", errBadFrame, err)
		}
	}
	switch f.Op {
	case "":
		return f, fmt.Errorf("%w: no op", errBadFrame)
	case wire.OpEvent:
		if f.Event == nil || f.Event.SessionID == "" || f.Event.Seq <= 0 {
			return f, fmt.Errorf("%w: event without session or seq", errBadFrame)
		}
	case wire.OpError:
		if f.Error == nil {
			return f, fmt.Errorf("%w: error frame without error", errBadFrame)
		}
	case wire.OpAck, wire.OpSeqNotice:
		if f.ClientMsgID == "" {
			return f, fmt.Errorf("%w: %s without client_msg_id", errBadFrame, f.Op)
		}
		if f.Status == wire.StatusOK && f.Seq <= 0 {
			return f, fmt.Errorf("%w: ok %s without seq", errBadFrame, f.Op)
		}
	case wire.OpResult:
		for _, m := range f.Messages {
			if m.Seq <= 0 {
				return f, fmt.Errorf("%w: sync result with seq %d", errBadFrame, m.Seq)
			}
		}
	}
	return f, nil
}
