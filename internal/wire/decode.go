package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/seqflow/seqflow/internal/apierr"
	"github.com/seqflow/seqflow/internal/auth"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// Limits bound every client input. The gateway's Config fills them.
type Limits struct {
	// MaxFrameBytes bounds one frame or HTTP body.
	MaxFrameBytes int
	// MaxBodyBytes bounds a message body (as stored: text bytes or JSON).
	MaxBodyBytes int
	// MaxMembers bounds the user IDs of one create_session or members frame.
	MaxMembers int
	// MaxSyncLimit bounds a sync page; DefaultSyncLimit is used for 0.
	MaxSyncLimit, DefaultSyncLimit int
	// MaxTitleBytes bounds a group title.
	MaxTitleBytes int
	// MaxCursors bounds the cursors of one delivered frame.
	MaxCursors int
}

// DefaultLimits are the gateway's defaults; they keep every uplink well
// under the sequencer's 64 KiB dead-letter bound.
var DefaultLimits = Limits{
	MaxFrameBytes: 64 << 10, MaxBodyBytes: 16 << 10, MaxMembers: 500,
	MaxSyncLimit: 200, DefaultSyncLimit: 50, MaxTitleBytes: 256, MaxCursors: 256,
}

// MaxClientMsgIDBytes and MaxSessionIDBytes bound the IDs; both use the
// alphabet of auth.ValidID.
const (
	MaxClientMsgIDBytes = 64
	MaxSessionIDBytes   = 64
	MaxReqIDBytes       = 64
	maxTraceparentBytes = 55
)

// MaxSeq is the largest seq a frame may name: 2^53-1, the largest integer a
// JSON number keeps exactly in JavaScript, far beyond any seq the sequencer
// hands out, and far enough below 2^63 that seq+1 never overflows.
const MaxSeq = 1<<53 - 1

// Decode parses and validates one client frame. Errors are registry
// errors: FRAME_TOO_LARGE, INVALID_UTF8, AMBIGUOUS_JSON, BAD_FRAME (see
// strict.go), then whatever Validate finds (with the parsed frame, so a
// reply can carry its IDs).
func Decode(data []byte, l Limits) (*ClientFrame, *apierr.Error) {
	f, err := parse(data, l, "frame")
	if err != nil {
		return f, err
	}
	return f, f.Validate(l)
}

// DecodeAs is Decode for an HTTP body whose op is named by the URL: the
// body's "op" may be absent or must equal op. An empty body is "{}".
func DecodeAs(data []byte, op string, l Limits) (*ClientFrame, *apierr.Error) {
	if len(bytes.TrimSpace(data)) == 0 {
		data = []byte("{}")
	}
	f, err := parse(data, l, "body")
	if err != nil {
		return f, err
	}
	if f.Op != "" && f.Op != op {
		return f, apierr.Newf(imv1.ErrorCode_ERROR_CODE_BAD_FRAME, "body op %q does not match the URL's %q", clip(f.Op), op)
	}
	f.Op = op
	return f, f.Validate(l)
}

func parse(data []byte, l Limits, what string) (*ClientFrame, *apierr.Error) {
	if len(data) > l.MaxFrameBytes {
		return nil, apierr.Newf(imv1.ErrorCode_ERROR_CODE_FRAME_TOO_LARGE, "%s is %d bytes, limit %d", what, len(data), l.MaxFrameBytes)
	}
	var f ClientFrame
	if err := unmarshalFrame(data, &f, what); err != nil {
		return nil, err
	}
	return &f, nil
}

// Validate checks the fields Op needs. On success the frame is safe to
// turn into an uplink: IDs are in their alphabet, sizes within l.
func (f *ClientFrame) Validate(l Limits) *apierr.Error {
	if len(f.ReqID) > MaxReqIDBytes {
		return apierr.Newf(imv1.ErrorCode_ERROR_CODE_TOO_LARGE, "req_id over %d bytes", MaxReqIDBytes)
	}
	switch f.Op {
	case OpSend:
		return firstErr(f.command(), f.content(l))
	case OpEdit:
		return firstErr(f.command(), f.target(), f.content(l))
	case OpRecall:
		return firstErr(f.command(), f.target())
	case OpCreateSession:
		return firstErr(idField("client_msg_id", f.ClientMsgID, MaxClientMsgIDBytes), f.create(l))
	case OpMembers:
		return firstErr(f.command(), f.members(l))
	case OpGroup:
		return firstErr(f.command(), f.group(l))
	case OpSync:
		if err := idField("session_id", f.SessionID, MaxSessionIDBytes); err != nil {
			return err
		}
		if err := f.syncPosition(); err != nil {
			return err
		}
		if f.Limit < 0 || f.Limit > l.MaxSyncLimit {
			return SyncLimitError(l)
		}
		if f.Limit == 0 {
			f.Limit = l.DefaultSyncLimit
		}
	case OpMemberList, OpMemberChanges:
		if err := idField("session_id", f.SessionID, MaxSessionIDBytes); err != nil {
			return err
		}
		if f.SinceVersion < 0 {
			return apierr.New(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "since_version must be >= 0")
		}
		if f.Limit < 0 || f.Limit > l.MaxSyncLimit {
			return SyncLimitError(l)
		}
		if f.Limit == 0 {
			f.Limit = l.MaxSyncLimit
		}
	case OpRead, OpSeenBy:
		if err := idField("session_id", f.SessionID, MaxSessionIDBytes); err != nil {
			return err
		}
		if f.Seq <= 0 || f.Seq > MaxSeq {
			return apierr.Newf(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "seq must be 1-%d", int64(MaxSeq))
		}
	case OpDelivered:
		if len(f.Cursors) == 0 {
			return apierr.New(imv1.ErrorCode_ERROR_CODE_MISSING_FIELD, "cursors is empty")
		}
		if len(f.Cursors) > l.MaxCursors {
			return apierr.Newf(imv1.ErrorCode_ERROR_CODE_TOO_LARGE, "over %d cursors", l.MaxCursors)
		}
		for _, c := range f.Cursors {
			if err := idField("cursors.session_id", c.SessionID, MaxSessionIDBytes); err != nil {
				return err
			}
			if c.Seq <= 0 || c.Seq > MaxSeq {
				return apierr.Newf(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "cursors.seq must be 1-%d", int64(MaxSeq))
			}
		}
	case OpTyping:
		return idField("session_id", f.SessionID, MaxSessionIDBytes)
	case OpSignOut, OpPresence:
		return f.devices()
	case OpChanges, OpPing, OpDevices, OpSettings:
	case "":
		return apierr.New(imv1.ErrorCode_ERROR_CODE_MISSING_FIELD, "op is missing")
	default:
		return apierr.Newf(imv1.ErrorCode_ERROR_CODE_UNKNOWN_TYPE, "unknown op %q", clip(f.Op))
	}
	return nil
}

func (f *ClientFrame) command() *apierr.Error {
	if err := idField("client_msg_id", f.ClientMsgID, MaxClientMsgIDBytes); err != nil {
		return err
	}
	if err := idField("session_id", f.SessionID, MaxSessionIDBytes); err != nil {
		return err
	}
	if f.Traceparent != "" && !ValidTraceparent(f.Traceparent) {
		return apierr.New(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "traceparent is not a W3C trace context (00-<32 hex>-<16 hex>-<2 hex>)")
	}
	return nil
}

func (f *ClientFrame) target() *apierr.Error {
	if f.TargetSeq <= 0 {
		return apierr.New(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "target_seq must be > 0")
	}
	return nil
}

func (f *ClientFrame) content(l Limits) *apierr.Error {
	if f.Type == "" {
		return apierr.New(imv1.ErrorCode_ERROR_CODE_MISSING_FIELD, "type is missing")
	}
	if len(f.Body) == 0 || string(f.Body) == "null" { // null is absent, as for every other field
		return apierr.New(imv1.ErrorCode_ERROR_CODE_MISSING_FIELD, "body is missing")
	}
	_, err := ContentBytes(f.Type, f.Body, l.MaxBodyBytes)
	return err
}

func (f *ClientFrame) create(l Limits) *apierr.Error {
	if len(f.Title) > l.MaxTitleBytes {
		return apierr.Newf(imv1.ErrorCode_ERROR_CODE_TOO_LARGE, "title over %d bytes", l.MaxTitleBytes)
	}
	switch f.Kind {
	case KindDirect:
		if f.SessionID != "" || len(f.MemberUserIDs) > 0 || f.Settings != nil {
			return apierr.New(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "a direct session takes peer_user_id only; its session_id is derived from the pair")
		}
		if err := userID("peer_user_id", f.PeerUserID); err != nil {
			return err
		}
	case KindGroup:
		if f.SessionID != "" || f.PeerUserID != "" {
			return apierr.New(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "a group takes member_user_ids; the gateway picks its session_id")
		}
		if f.Settings != nil {
			if err := f.Settings.validate(l, false); err != nil {
				return err
			}
		}
		return userIDs("member_user_ids", f.MemberUserIDs, l.MaxMembers, true)
	case "":
		return apierr.New(imv1.ErrorCode_ERROR_CODE_MISSING_FIELD, "kind is missing (direct or group)")
	default:
		return apierr.Newf(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "kind %q: want direct or group", clip(f.Kind))
	}
	return nil
}

func (f *ClientFrame) members(l Limits) *apierr.Error {
	if f.Action == ActionLeave {
		if len(f.UserIDs) > 0 {
			return apierr.New(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "leave takes no user_ids: it removes you")
		}
		return nil
	}
	if f.Action != ActionAdd && f.Action != ActionRemove {
		return apierr.Newf(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "action %q: want add, remove or leave", clip(f.Action))
	}
	return userIDs("user_ids", f.UserIDs, l.MaxMembers, false)
}

func userIDs(name string, ids []string, max int, allowEmpty bool) *apierr.Error {
	if len(ids) == 0 && !allowEmpty {
		return apierr.Newf(imv1.ErrorCode_ERROR_CODE_MISSING_FIELD, "%s is empty", name)
	}
	if len(ids) > max {
		return apierr.Newf(imv1.ErrorCode_ERROR_CODE_TOO_LARGE, "%s has %d entries, limit %d", name, len(ids), max)
	}
	for _, id := range ids {
		if err := userID(name, id); err != nil {
			return err
		}
	}
	return nil
}

func userID(name, id string) *apierr.Error {
	if id == "" {
		return apierr.Newf(imv1.ErrorCode_ERROR_CODE_MISSING_FIELD, "%s is missing", name)
	}
	if err := auth.ValidID(id); err != nil {
		return apierr.Newf(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "%s: %v", name, err)
	}
	return nil
}

func idField(name, v string, max int) *apierr.Error {
	if v == "" {
		return apierr.Newf(imv1.ErrorCode_ERROR_CODE_MISSING_FIELD, "%s is missing", name)
	}
	if len(v) > max {
		return apierr.Newf(imv1.ErrorCode_ERROR_CODE_TOO_LARGE, "%s over %d bytes", name, max)
	}
	if err := auth.ValidID(v); err != nil {
		return apierr.Newf(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "%s: %v", name, err)
	}
	return nil
}

// syncPosition checks a sync's starting point: after_seq, before_seq or
// around_seq, none negative, at most one of them set (0 is unset: no
// message has seq 0).
func (f *ClientFrame) syncPosition() *apierr.Error {
	set := 0
	for _, p := range []struct {
		name string
		v    int64
	}{{"after_seq", f.AfterSeq}, {"before_seq", f.BeforeSeq}, {"around_seq", f.AroundSeq}} {
		if p.v < 0 || p.v > MaxSeq {
			return apierr.Newf(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "%s must be 0-%d", p.name, int64(MaxSeq))
		}
		if p.v > 0 {
			set++
		}
	}
	if set > 1 {
		return apierr.New(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "give at most one of after_seq, before_seq and around_seq")
	}
	return nil
}

// SyncLimitError is the error for a sync limit out of range, the same on
// WebSocket and HTTP.
func SyncLimitError(l Limits) *apierr.Error {
	return apierr.Newf(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "limit must be 1-%d (absent or 0: the default, %d)", l.MaxSyncLimit, l.DefaultSyncLimit)
}

// ContentBytes returns the stored form of a message body: the UTF-8 text
// of a JSON string for "text", the compacted JSON object otherwise. It
// refuses what parse refuses in a body (repeated names, invalid UTF-8).
func ContentBytes(typ string, body json.RawMessage, maxBytes int) ([]byte, *apierr.Error) {
	switch typ {
	case TypeText:
		s, ok := unescapedString(body)
		if !ok {
			var err error
			if s, err = jsontext.AppendUnquote(nil, body); err != nil {
				if !utf8.Valid(body) {
					return nil, apierr.New(imv1.ErrorCode_ERROR_CODE_INVALID_UTF8, "body is not valid UTF-8")
				}
				return nil, apierr.New(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "a text body must be a JSON string")
			}
		}
		if len(s) == 0 {
			return nil, apierr.New(imv1.ErrorCode_ERROR_CODE_MISSING_FIELD, "body is empty")
		}
		if len(s) > maxBytes {
			return nil, apierr.Newf(imv1.ErrorCode_ERROR_CODE_TOO_LARGE, "body is %d bytes, limit %d", len(s), maxBytes)
		}
		return bytes.Clone(s), nil
	case TypeImage, TypeFile, TypeCustom:
		// Compact keeps strings and numbers as they are written, as
		// encoding/json's Compact does; with these options it also
		// validates, strictly.
		v := jsontext.Value(bytes.Clone(body))
		if err := v.Compact(jsontext.AllowDuplicateNames(false), jsontext.AllowInvalidUTF8(false)); err != nil {
			if e := jsonError(body, "body", err); e.Code != imv1.ErrorCode_ERROR_CODE_BAD_FRAME {
				return nil, e
			}
			return nil, apierr.Newf(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "a %s body must be a JSON object", typ)
		}
		if v.Kind() != '{' {
			return nil, apierr.Newf(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "a %s body must be a JSON object", typ)
		}
		if len(v) > maxBytes {
			return nil, apierr.Newf(imv1.ErrorCode_ERROR_CODE_TOO_LARGE, "body is %d bytes, limit %d", len(v), maxBytes)
		}
		return v, nil
	}
	return nil, apierr.Newf(imv1.ErrorCode_ERROR_CODE_UNKNOWN_TYPE, "message type %q: want text, image, file or custom", clip(typ))
}

// BodyJSON is the inverse of ContentBytes, for frames to clients: a JSON
// string for "text", the stored JSON otherwise (a string again when the
// stored bytes are not JSON, e.g. written by another producer).
func BodyJSON(typ string, stored []byte) json.RawMessage {
	if typ != TypeText && json.Valid(stored) {
		return json.RawMessage(stored)
	}
	return appendString(nil, stored) // what json.Marshal(string(stored)) writes
}

// ValidTraceparent checks the W3C "00-<trace-id>-<parent-id>-<flags>" form.
func ValidTraceparent(s string) bool {
	if len(s) != maxTraceparentBytes || s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return false
	}
	for i, c := range []byte(s) {
		if i == 2 || i == 35 || i == 52 {
			continue
		}
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return s[:2] != "ff" && s[3:35] != "00000000000000000000000000000000" && s[36:52] != "0000000000000000"
}

func firstErr(errs ...*apierr.Error) *apierr.Error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

func clip(s string) string { return clipN(s, 32) }

// clipN cuts s to n runes, marking the cut.
func clipN(s string, n int) string {
	if len(s) > n {
		return fmt.Sprintf("%.*s...", n, s)
	}
	return s
}
