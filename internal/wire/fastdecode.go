package wire

// clientKeys numbers the keys of a ClientFrame for decodeFast.
var clientKeys = map[string]int{"op": 0, "req_id": 1, "client_msg_id": 2, "session_id": 3, "type": 4, "body": 5,
	"client_ts": 6, "traceparent": 7, "target_seq": 8, "kind": 9, "peer_user_id": 10, "member_user_ids": 11,
	"title": 12, "action": 13, "user_ids": 14, "after_seq": 15, "limit": 16, "seq": 17, "cursors": 18}

var cursorKeys = map[string]int{"session_id": 0, "seq": 1}

// decodeFast decodes a client frame with Scanner instead of encoding/json's
// reflection (the gateway's cost per send). Anything the scanner refuses
// (unknown keys, escapes, null, malformed input) returns false and parse
// uses encoding/json, so what it accepts decodes exactly as before
// (FuzzDecodeFastMatchesDecoder).
func decodeFast(b []byte, f *ClientFrame) bool {
	s := NewScanner(b)
	return s.Object(clientKeys, func(n int) bool {
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
			return s.Str(&f.Type)
		case 5:
			return s.Raw(&f.Body)
		case 6:
			return s.Int(&f.ClientTs)
		case 7:
			return s.Str(&f.Traceparent)
		case 8:
			return s.Int(&f.TargetSeq)
		case 9:
			return s.Str(&f.Kind)
		case 10:
			return s.Str(&f.PeerUserID)
		case 11:
			return s.Strings(&f.MemberUserIDs)
		case 12:
			return s.Str(&f.Title)
		case 13:
			return s.Str(&f.Action)
		case 14:
			return s.Strings(&f.UserIDs)
		case 15:
			return s.Int(&f.AfterSeq)
		case 16:
			return s.IntInt(&f.Limit)
		case 17:
			return s.Int(&f.Seq)
		case 18:
			cs := []Cursor{}
			ok := s.Array(func() bool {
				var c Cursor
				if !s.Object(cursorKeys, func(n int) bool {
					if n == 0 {
						return s.Str(&c.SessionID)
					}
					return s.Int(&c.Seq)
				}) {
					return false
				}
				cs = append(cs, c)
				return true
			})
			f.Cursors = cs
			return ok
		}
		return false
	}) && s.End()
}
