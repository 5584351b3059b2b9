package client

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/seqflow/seqflow/internal/wire"
)

// decodeFast decodes the frames the gateway sends most (ack, seq_notice,
// event, pong/result without a body, hello) without encoding/json's
// reflection, which was most of a client's CPU per received message. It
// accepts only what it fully understands: known keys spelled exactly,
// each once; strings without escapes, in valid UTF-8; integers as plain
// digits; true/false; a body that json.Valid accepts. Anything else (null,
// escapes, unknown or repeated keys, errors, sync pages, malformed input)
// returns false, and the caller decodes the frame with encoding/json. On
// true, f is what json.Unmarshal would have made of b
// (FuzzDecodeFastMatchesEncodingJSON holds it to that).
func decodeFast(b []byte, f *serverFrame) bool {
	s := scanner{b: b}
	var seen uint32
	ok := s.object(func(key []byte, i int) bool {
		if seen&(1<<i) != 0 {
			return false
		}
		seen |= 1 << i
		switch string(key) {
		case "op":
			return s.str(&f.Op)
		case "req_id":
			return s.str(&f.ReqID)
		case "client_msg_id":
			return s.str(&f.ClientMsgID)
		case "session_id":
			return s.str(&f.SessionID)
		case "status":
			return s.str(&f.Status)
		case "seq":
			return s.int(&f.Seq)
		case "msg_id":
			return s.str(&f.MsgID)
		case "server_ts":
			return s.int(&f.ServerTs)
		case "duplicate":
			return s.bool(&f.Duplicate)
		case "has_more":
			return s.bool(&f.HasMore)
		case "event":
			f.Event = &wire.Message{}
			return s.message(f.Event)
		case "conn_id":
			return s.str(&f.ConnID)
		case "user_id":
			return s.str(&f.UserID)
		case "device_id":
			return s.str(&f.DeviceID)
		case "gateway_id":
			return s.str(&f.GatewayID)
		case "heartbeat_ms":
			return s.int(&f.HeartbeatMs)
		case "max_frame_bytes":
			var n int64
			if !s.int(&n) {
				return false
			}
			f.MaxFrameBytes = int(n)
			return true
		}
		return false
	}, topKeys)
	s.space()
	return ok && s.i == len(s.b)
}

// topKeys and messageKeys give each key its bit in the seen mask.
var (
	topKeys = map[string]int{"op": 0, "req_id": 1, "client_msg_id": 2, "session_id": 3, "status": 4, "seq": 5, "msg_id": 6,
		"server_ts": 7, "duplicate": 8, "has_more": 9, "event": 10, "conn_id": 11, "user_id": 12, "device_id": 13,
		"gateway_id": 14, "heartbeat_ms": 15, "max_frame_bytes": 16}
	messageKeys = map[string]int{"session_id": 0, "seq": 1, "msg_id": 2, "client_msg_id": 3, "sender_user_id": 4,
		"sender_device_id": 5, "server_ts": 6, "kind": 7, "type": 8, "body": 9, "target_seq": 10, "session_kind": 11,
		"title": 12, "action": 13, "user_ids": 14, "edited": 15, "recalled": 16}
)

func (s *scanner) message(m *wire.Message) bool {
	var seen uint32
	return s.object(func(key []byte, i int) bool {
		if seen&(1<<i) != 0 {
			return false
		}
		seen |= 1 << i
		switch string(key) {
		case "session_id":
			return s.str(&m.SessionID)
		case "seq":
			return s.int(&m.Seq)
		case "msg_id":
			return s.str(&m.MsgID)
		case "client_msg_id":
			return s.str(&m.ClientMsgID)
		case "sender_user_id":
			return s.str(&m.SenderUserID)
		case "sender_device_id":
			return s.str(&m.SenderDeviceID)
		case "server_ts":
			return s.int(&m.ServerTs)
		case "kind":
			return s.str(&m.Kind)
		case "type":
			return s.str(&m.Type)
		case "body":
			return s.raw(&m.Body)
		case "target_seq":
			return s.int(&m.TargetSeq)
		case "session_kind":
			return s.str(&m.SessionKind)
		case "title":
			return s.str(&m.Title)
		case "action":
			return s.str(&m.Action)
		case "user_ids":
			return s.strings(&m.UserIDs)
		case "edited":
			return s.bool(&m.Edited)
		case "recalled":
			return s.bool(&m.Recalled)
		}
		return false
	}, messageKeys)
}

// scanner reads JSON from b at i; every method returns false on anything
// it does not accept.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) byte(c byte) bool {
	s.space()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// object reads {"key": value, ...}, calling field for each key (with its
// bit from keys) to read the value.
func (s *scanner) object(field func(key []byte, bit int) bool, keys map[string]int) bool {
	if !s.byte('{') {
		return false
	}
	if s.byte('}') {
		return true
	}
	for {
		k, ok := s.plain()
		if !ok || !s.byte(':') {
			return false
		}
		bit, known := keys[string(k)]
		if !known || !field(k, bit) {
			return false
		}
		if s.byte('}') {
			return true
		}
		if !s.byte(',') {
			return false
		}
	}
}

// plain reads a string without escapes or control characters, in valid
// UTF-8 (the only strings encoding/json keeps byte for byte).
func (s *scanner) plain() ([]byte, bool) {
	if !s.byte('"') {
		return nil, false
	}
	start, ascii := s.i, true
	for j := start; j < len(s.b); j++ {
		switch c := s.b[j]; {
		case c == '"':
			v := s.b[start:j]
			if !ascii && !utf8.Valid(v) {
				return nil, false
			}
			s.i = j + 1
			return v, true
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, false
}

func (s *scanner) str(dst *string) bool {
	v, ok := s.plain()
	if ok {
		*dst = string(v)
	}
	return ok
}

func (s *scanner) strings(dst *[]string) bool {
	if !s.byte('[') {
		return false
	}
	out := []string{}
	if !s.byte(']') {
		for {
			var v string
			if !s.str(&v) {
				return false
			}
			out = append(out, v)
			if s.byte(']') {
				break
			}
			if !s.byte(',') {
				return false
			}
		}
	}
	*dst = out
	return true
}

// int reads an integer in JSON's form (no leading zeros, no fraction or
// exponent) that fits an int64.
func (s *scanner) int(dst *int64) bool {
	s.space()
	j := s.i
	if j < len(s.b) && s.b[j] == '-' {
		j++
	}
	d := j
	for j < len(s.b) && s.b[j] >= '0' && s.b[j] <= '9' {
		j++
	}
	if j == d || (s.b[d] == '0' && j-d > 1) {
		return false
	}
	if j < len(s.b) && (s.b[j] == '.' || s.b[j] == 'e' || s.b[j] == 'E') {
		return false
	}
	n, err := strconv.ParseInt(string(s.b[s.i:j]), 10, 64)
	if err != nil {
		return false
	}
	*dst, s.i = n, j
	return true
}

func (s *scanner) bool(dst *bool) bool {
	s.space()
	switch {
	case len(s.b)-s.i >= 4 && string(s.b[s.i:s.i+4]) == "true":
		*dst, s.i = true, s.i+4
	case len(s.b)-s.i >= 5 && string(s.b[s.i:s.i+5]) == "false":
		*dst, s.i = false, s.i+5
	default:
		return false
	}
	return true
}

// raw reads any JSON value except null (json.RawMessage keeps null as
// "null", but the gateway never sends one, so it is left to encoding/json)
// and copies it.
func (s *scanner) raw(dst *json.RawMessage) bool {
	s.space()
	start, depth, j := s.i, 0, s.i
scan:
	for ; j < len(s.b); j++ {
		switch s.b[j] {
		case '"':
			for j++; j < len(s.b) && s.b[j] != '"'; j++ {
				if s.b[j] == '\\' {
					j++
				}
			}
			if depth == 0 {
				j++
				break scan
			}
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth < 0 {
				break scan
			}
			if depth == 0 {
				j++
				break scan
			}
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				break scan
			}
		}
	}
	v := s.b[start:min(j, len(s.b))]
	if len(v) == 0 || string(v) == "null" || !json.Valid(v) {
		return false
	}
	*dst = append(json.RawMessage(nil), v...)
	s.i = start + len(v)
	return true
}
