package client

import (
	"github.com/seqflow/seqflow/internal/wire"
)

// decodeFast decodes the frames the gateway sends most (ack, seq_notice,
// event with or without its unread counts, unread, pong/result without a
// body, hello) with wire.Scanner instead of
// encoding/json's reflection, which was most of a client's CPU per
// received message. Errors, sync pages, unknown keys and anything the
// scanner refuses return false, and the caller decodes the frame with
// encoding/json. On true, f is what json.Unmarshal would have made of b
// (FuzzDecodeFastMatchesEncodingJSON holds it to that).
func decodeFast(b []byte, f *serverFrame) bool {
	s := wire.NewScanner(b)
	return s.Object(topKeys, func(n int) bool {
		switch n {
		case 0:
			return s.Str(&f.Op)
		case 1:
			return s.Str(&f.ReqID)
		case 2:
			return s.Str(&f.ClientMsgID)
		case 3:
			return s.Str(&f.SessionID)
		case 4:
			return s.Str(&f.Status)
		case 5:
			return s.Int(&f.Seq)
		case 6:
			return s.Str(&f.MsgID)
		case 7:
			return s.Int(&f.ServerTs)
		case 8:
			return s.Bool(&f.Duplicate)
		case 9:
			return s.Bool(&f.HasMore)
		case 10:
			f.Event = &wire.Message{}
			return decodeMessage(s, f.Event)
		case 11:
			return s.Str(&f.ConnID)
		case 12:
			return s.Str(&f.UserID)
		case 13:
			return s.Str(&f.DeviceID)
		case 14:
			return s.Str(&f.GatewayID)
		case 15:
			return s.Int(&f.HeartbeatMs)
		case 16:
			return s.IntInt(&f.MaxFrameBytes)
		case 17:
			f.Unread = new(int64)
			return s.Int(f.Unread)
		case 18:
			f.TotalUnread = new(int64)
			return s.Int(f.TotalUnread)
		case 19:
			return s.Int(&f.ReadSeq)
		}
		return false
	}) && s.End()
}

// topKeys and messageKeys number the keys decodeFast knows.
var (
	topKeys = map[string]int{"op": 0, "req_id": 1, "client_msg_id": 2, "session_id": 3, "status": 4, "seq": 5, "msg_id": 6,
		"server_ts": 7, "duplicate": 8, "has_more": 9, "event": 10, "conn_id": 11, "user_id": 12, "device_id": 13,
		"gateway_id": 14, "heartbeat_ms": 15, "max_frame_bytes": 16, "unread": 17, "total_unread": 18, "read_seq": 19}
	messageKeys = map[string]int{"session_id": 0, "seq": 1, "msg_id": 2, "client_msg_id": 3, "sender_user_id": 4,
		"sender_device_id": 5, "server_ts": 6, "kind": 7, "type": 8, "body": 9, "target_seq": 10, "session_kind": 11,
		"title": 12, "action": 13, "user_ids": 14, "edited": 15, "recalled": 16, "erased": 17}
)

func decodeMessage(s *wire.Scanner, m *wire.Message) bool {
	return s.Object(messageKeys, func(n int) bool {
		switch n {
		case 0:
			return s.Str(&m.SessionID)
		case 1:
			return s.Int(&m.Seq)
		case 2:
			return s.Str(&m.MsgID)
		case 3:
			return s.Str(&m.ClientMsgID)
		case 4:
			return s.Str(&m.SenderUserID)
		case 5:
			return s.Str(&m.SenderDeviceID)
		case 6:
			return s.Int(&m.ServerTs)
		case 7:
			return s.Str(&m.Kind)
		case 8:
			return s.Str(&m.Type)
		case 9:
			return s.Raw(&m.Body)
		case 10:
			return s.Int(&m.TargetSeq)
		case 11:
			return s.Str(&m.SessionKind)
		case 12:
			return s.Str(&m.Title)
		case 13:
			return s.Str(&m.Action)
		case 14:
			return s.Strings(&m.UserIDs)
		case 15:
			return s.Bool(&m.Edited)
		case 16:
			return s.Bool(&m.Recalled)
		case 17:
			return s.Bool(&m.Erased)
		}
		return false
	})
}
