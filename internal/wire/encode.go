package wire

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// The hot server frames (ack, seq_notice, event) are encoded by hand:
// encoding/json's reflection and its re-validation of the raw body were
// most of the gateway's encoding cost. Each appender writes exactly the
// bytes json.Marshal writes for the same value (field order, omitempty,
// HTML-safe escaping); TestAppendersMatchEncodingJSON and
// FuzzAppendersMatchEncodingJSON hold them to that.

// AppendJSON appends the JSON of a, as json.Marshal writes it.
func (a *Ack) AppendJSON(dst []byte) []byte {
	if a.Error != nil {
		// A refusal: rare, so encoding/json writes it.
		b, err := json.Marshal(a)
		if err != nil { // an Ack has nothing json.Marshal can refuse
			panic(err)
		}
		return append(dst, b...)
	}
	if dst == nil {
		dst = make([]byte, 0, 128+len(a.ReqID)+len(a.ClientMsgID)+len(a.SessionID)+len(a.MsgID))
	}
	dst = append(dst, `{"op":`...)
	dst = appendString(dst, a.Op)
	if a.ReqID != "" {
		dst = append(dst, `,"req_id":`...)
		dst = appendString(dst, a.ReqID)
	}
	dst = append(dst, `,"client_msg_id":`...)
	dst = appendString(dst, a.ClientMsgID)
	dst = append(dst, `,"session_id":`...)
	dst = appendString(dst, a.SessionID)
	dst = append(dst, `,"status":`...)
	dst = appendString(dst, a.Status)
	if a.Seq != 0 {
		dst = append(dst, `,"seq":`...)
		dst = strconv.AppendInt(dst, a.Seq, 10)
	}
	if a.MsgID != "" {
		dst = append(dst, `,"msg_id":`...)
		dst = appendString(dst, a.MsgID)
	}
	if a.ServerTs != 0 {
		dst = append(dst, `,"server_ts":`...)
		dst = strconv.AppendInt(dst, a.ServerTs, 10)
	}
	if a.Duplicate {
		dst = append(dst, `,"duplicate":true`...)
	}
	return append(dst, '}')
}

// AppendJSON appends the JSON of f, as json.Marshal writes it. f.Event.Body
// must be valid JSON (BodyJSON's output is); an invalid one is an error,
// as in json.Marshal.
func (f *EventFrame) AppendJSON(dst []byte) ([]byte, error) {
	if dst == nil {
		m := &f.Event
		n := 256 + len(m.SessionID) + len(m.MsgID) + len(m.ClientMsgID) + len(m.SenderUserID) + len(m.SenderDeviceID) + len(m.Body) + len(m.Title)
		for _, u := range m.UserIDs {
			n += len(u) + 3
		}
		dst = make([]byte, 0, n)
	}
	dst = append(dst, `{"op":`...)
	dst = appendString(dst, f.Op)
	dst = append(dst, `,"event":`...)
	dst, err := f.Event.AppendJSON(dst)
	if err != nil {
		return nil, err
	}
	if f.Unread != nil {
		dst = append(dst, `,"unread":`...)
		dst = strconv.AppendInt(dst, *f.Unread, 10)
	}
	if f.TotalUnread != nil {
		dst = append(dst, `,"total_unread":`...)
		dst = strconv.AppendInt(dst, *f.TotalUnread, 10)
	}
	return append(dst, '}'), nil
}

// AppendUnread appends frame, the JSON of an EventFrame without Unread and
// TotalUnread, with them set to unread and total: the bytes AppendJSON
// writes for it, without encoding the event again for every recipient.
func AppendUnread(dst, frame []byte, unread, total int64) []byte {
	dst = append(dst, frame[:len(frame)-1]...)
	dst = append(dst, `,"unread":`...)
	dst = strconv.AppendInt(dst, unread, 10)
	dst = append(dst, `,"total_unread":`...)
	dst = strconv.AppendInt(dst, total, 10)
	return append(dst, '}')
}

// AppendJSON appends the JSON of m, as json.Marshal writes it; see
// EventFrame.AppendJSON for the body.
func (m *Message) AppendJSON(dst []byte) ([]byte, error) {
	if m.Group != nil {
		// A group event: rare, so encoding/json writes it.
		b, err := json.Marshal(m)
		if err != nil {
			return nil, err
		}
		return append(dst, b...), nil
	}
	dst = append(dst, `{"session_id":`...)
	dst = appendString(dst, m.SessionID)
	dst = append(dst, `,"seq":`...)
	dst = strconv.AppendInt(dst, m.Seq, 10)
	dst = append(dst, `,"msg_id":`...)
	dst = appendString(dst, m.MsgID)
	if m.ClientMsgID != "" {
		dst = append(dst, `,"client_msg_id":`...)
		dst = appendString(dst, m.ClientMsgID)
	}
	dst = append(dst, `,"sender_user_id":`...)
	dst = appendString(dst, m.SenderUserID)
	if m.SenderDeviceID != "" {
		dst = append(dst, `,"sender_device_id":`...)
		dst = appendString(dst, m.SenderDeviceID)
	}
	dst = append(dst, `,"server_ts":`...)
	dst = strconv.AppendInt(dst, m.ServerTs, 10)
	dst = append(dst, `,"kind":`...)
	dst = appendString(dst, m.Kind)
	if m.Type != "" {
		dst = append(dst, `,"type":`...)
		dst = appendString(dst, m.Type)
	}
	if len(m.Body) > 0 {
		dst = append(dst, `,"body":`...)
		var err error
		if dst, err = appendRaw(dst, m.Body); err != nil {
			return nil, err
		}
	}
	if m.TargetSeq != 0 {
		dst = append(dst, `,"target_seq":`...)
		dst = strconv.AppendInt(dst, m.TargetSeq, 10)
	}
	if m.SessionKind != "" {
		dst = append(dst, `,"session_kind":`...)
		dst = appendString(dst, m.SessionKind)
	}
	if m.Title != "" {
		dst = append(dst, `,"title":`...)
		dst = appendString(dst, m.Title)
	}
	if m.Action != "" {
		dst = append(dst, `,"action":`...)
		dst = appendString(dst, m.Action)
	}
	if len(m.UserIDs) > 0 {
		dst = append(dst, `,"user_ids":[`...)
		for i, u := range m.UserIDs {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(dst, u)
		}
		dst = append(dst, ']')
	}
	if m.Edited {
		dst = append(dst, `,"edited":true`...)
	}
	if m.Recalled {
		dst = append(dst, `,"recalled":true`...)
	}
	if m.Erased {
		dst = append(dst, `,"erased":true`...)
	}
	return append(dst, '}'), nil
}

// appendRaw appends a raw JSON value as json.Marshal does (compacted,
// HTML-escaped). A value already in that form, as BodyJSON's text bodies
// are, is copied after a check that it is valid: for a plain string (most
// text bodies, spaces included) one pass of canonicalString.
func appendRaw(dst []byte, raw json.RawMessage) ([]byte, error) {
	if canonicalString(raw) || isCompactSafe(raw) && json.Valid(raw) {
		return append(dst, raw...), nil
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return nil, err
	}
	return append(dst, b...), nil
}

// isCompactSafe: b has nothing json.Marshal would change in a raw value,
// no whitespace, no <, > or &, and no 0xE2 (the first byte of U+2028 and
// U+2029; other runes starting with it take the slow path too).
func isCompactSafe(b []byte) bool {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\r', '\n', '<', '>', '&', 0xE2:
			return false
		}
	}
	return true
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string, escaped as encoding/json does
// by default: control characters, quote, backslash, <, > and &, U+2028
// and U+2029, and invalid UTF-8 as U+FFFD.
func appendString[S []byte | string](dst []byte, s S) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		n := min(len(s)-i, utf8.UTFMax)
		c, size := utf8.DecodeRuneInString(string(s[i : i+n]))
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// AppendJSON appends the JSON of f, as json.Marshal writes it; f.Body must
// be valid JSON, as in json.Marshal. The SDK encodes every frame it sends
// with it.
func (f *ClientFrame) AppendJSON(dst []byte) ([]byte, error) {
	if f.UserID != "" || f.Role != "" || f.MutedUntilMs != 0 || f.Muted != nil || f.InviteCode != "" || f.Settings != nil ||
		f.AfterUserID != "" || f.SinceVersion != 0 || f.DeviceID != "" || f.ReadReceipts != nil {
		// Governance commands, member queries, sign-outs and settings: rare, so
		// encoding/json writes them.
		b, err := json.Marshal(f)
		if err != nil {
			return nil, err
		}
		return append(dst, b...), nil
	}
	if dst == nil {
		dst = make([]byte, 0, 192+len(f.ReqID)+len(f.ClientMsgID)+len(f.SessionID)+len(f.Body)+len(f.Traceparent)+len(f.Title)+32*len(f.Cursors))
	}
	str := func(name, v string) {
		if v != "" {
			dst = append(dst, name...)
			dst = appendString(dst, v)
		}
	}
	num := func(name string, v int64) {
		if v != 0 {
			dst = append(dst, name...)
			dst = strconv.AppendInt(dst, v, 10)
		}
	}
	list := func(name string, vs []string) {
		if len(vs) > 0 {
			dst = append(dst, name...)
			dst = append(dst, '[')
			for i, v := range vs {
				if i > 0 {
					dst = append(dst, ',')
				}
				dst = appendString(dst, v)
			}
			dst = append(dst, ']')
		}
	}
	dst = append(dst, `{"op":`...)
	dst = appendString(dst, f.Op)
	str(`,"req_id":`, f.ReqID)
	str(`,"client_msg_id":`, f.ClientMsgID)
	str(`,"session_id":`, f.SessionID)
	str(`,"type":`, f.Type)
	if len(f.Body) > 0 {
		dst = append(dst, `,"body":`...)
		var err error
		if dst, err = appendRaw(dst, f.Body); err != nil {
			return nil, err
		}
	}
	num(`,"client_ts":`, f.ClientTs)
	str(`,"traceparent":`, f.Traceparent)
	num(`,"target_seq":`, f.TargetSeq)
	str(`,"kind":`, f.Kind)
	str(`,"peer_user_id":`, f.PeerUserID)
	list(`,"member_user_ids":`, f.MemberUserIDs)
	str(`,"title":`, f.Title)
	str(`,"action":`, f.Action)
	list(`,"user_ids":`, f.UserIDs)
	num(`,"after_seq":`, f.AfterSeq)
	num(`,"before_seq":`, f.BeforeSeq)
	num(`,"around_seq":`, f.AroundSeq)
	num(`,"limit":`, int64(f.Limit))
	num(`,"seq":`, f.Seq)
	if len(f.Cursors) > 0 {
		dst = append(dst, `,"cursors":[`...)
		for i, c := range f.Cursors {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"session_id":`...)
			dst = appendString(dst, c.SessionID)
			dst = append(dst, `,"seq":`...)
			dst = strconv.AppendInt(dst, c.Seq, 10)
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	if f.Active {
		dst = append(dst, `,"active":true`...)
	}
	return append(dst, '}'), nil
}
