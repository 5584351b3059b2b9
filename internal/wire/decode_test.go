package wire

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/seqflow/seqflow/internal/apierr"
	"github.com/seqflow/seqflow/schemas/imv1"
)

func TestDecode(t *testing.T) {
	l := DefaultLimits
	big := strings.Repeat("x", l.MaxBodyBytes+1)
	many := `["` + strings.Repeat(`u","`, l.MaxMembers) + `u"]`
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	cases := []struct {
		name  string
		frame string
		code  imv1.ErrorCode // 0 = valid
	}{
		{"send text", `{"op":"send","client_msg_id":"c1","session_id":"s1","type":"text","body":"hi"}`, 0},
		{"send with traceparent", `{"op":"send","client_msg_id":"c1","session_id":"s1","type":"text","body":"hi","traceparent":"` + tp + `"}`, 0},
		{"send custom object", `{"op":"send","client_msg_id":"c1","session_id":"s1","type":"custom","body":{"a":1}}`, 0},
		{"unknown fields ignored", `{"op":"send","client_msg_id":"c1","session_id":"s1","type":"text","body":"hi","future":true}`, 0},
		{"not json", `hello`, imv1.ErrorCode_ERROR_CODE_BAD_FRAME},
		{"array", `[1]`, imv1.ErrorCode_ERROR_CODE_BAD_FRAME},
		{"trailing", `{"op":"ping"}{"op":"ping"}`, imv1.ErrorCode_ERROR_CODE_BAD_FRAME},
		{"wrong field type", `{"op":"send","client_msg_id":7}`, imv1.ErrorCode_ERROR_CODE_BAD_FRAME},
		{"invalid utf8", "{\"op\":\"send\",\"body\":\"\xff\"}", imv1.ErrorCode_ERROR_CODE_INVALID_UTF8},
		{"too large", `{"op":"ping","x":"` + strings.Repeat("a", l.MaxFrameBytes) + `"}`, imv1.ErrorCode_ERROR_CODE_FRAME_TOO_LARGE},
		{"no op", `{}`, imv1.ErrorCode_ERROR_CODE_MISSING_FIELD},
		{"unknown op", `{"op":"teleport"}`, imv1.ErrorCode_ERROR_CODE_UNKNOWN_TYPE},
		{"missing client_msg_id", `{"op":"send","session_id":"s1","type":"text","body":"hi"}`, imv1.ErrorCode_ERROR_CODE_MISSING_FIELD},
		{"bad session alphabet", `{"op":"send","client_msg_id":"c1","session_id":"s 1","type":"text","body":"hi"}`, imv1.ErrorCode_ERROR_CODE_INVALID_FIELD},
		{"session too long", `{"op":"send","client_msg_id":"c1","session_id":"` + strings.Repeat("s", 65) + `","type":"text","body":"hi"}`, imv1.ErrorCode_ERROR_CODE_TOO_LARGE},
		{"unknown type", `{"op":"send","client_msg_id":"c1","session_id":"s1","type":"video","body":"hi"}`, imv1.ErrorCode_ERROR_CODE_UNKNOWN_TYPE},
		{"missing type", `{"op":"send","client_msg_id":"c1","session_id":"s1","body":"hi"}`, imv1.ErrorCode_ERROR_CODE_MISSING_FIELD},
		{"missing body", `{"op":"send","client_msg_id":"c1","session_id":"s1","type":"text"}`, imv1.ErrorCode_ERROR_CODE_MISSING_FIELD},
		{"empty text", `{"op":"send","client_msg_id":"c1","session_id":"s1","type":"text","body":""}`, imv1.ErrorCode_ERROR_CODE_MISSING_FIELD},
		{"text body not string", `{"op":"send","client_msg_id":"c1","session_id":"s1","type":"text","body":{"a":1}}`, imv1.ErrorCode_ERROR_CODE_INVALID_FIELD},
		{"image body not object", `{"op":"send","client_msg_id":"c1","session_id":"s1","type":"image","body":"x"}`, imv1.ErrorCode_ERROR_CODE_INVALID_FIELD},
		{"body too large", `{"op":"send","client_msg_id":"c1","session_id":"s1","type":"text","body":"` + big + `"}`, imv1.ErrorCode_ERROR_CODE_TOO_LARGE},
		{"bad traceparent", `{"op":"send","client_msg_id":"c1","session_id":"s1","type":"text","body":"hi","traceparent":"nope"}`, imv1.ErrorCode_ERROR_CODE_INVALID_FIELD},
		{"edit", `{"op":"edit","client_msg_id":"c2","session_id":"s1","target_seq":3,"type":"text","body":"fixed"}`, 0},
		{"edit no target", `{"op":"edit","client_msg_id":"c2","session_id":"s1","type":"text","body":"fixed"}`, imv1.ErrorCode_ERROR_CODE_INVALID_FIELD},
		{"recall", `{"op":"recall","client_msg_id":"c3","session_id":"s1","target_seq":3}`, 0},
		{"recall negative", `{"op":"recall","client_msg_id":"c3","session_id":"s1","target_seq":-1}`, imv1.ErrorCode_ERROR_CODE_INVALID_FIELD},
		{"create direct", `{"op":"create_session","client_msg_id":"c4","kind":"direct","peer_user_id":"bob"}`, 0},
		{"create direct with session_id", `{"op":"create_session","client_msg_id":"c4","kind":"direct","peer_user_id":"bob","session_id":"x"}`, imv1.ErrorCode_ERROR_CODE_INVALID_FIELD},
		{"create group", `{"op":"create_session","client_msg_id":"c4","kind":"group","member_user_ids":["bob","carol"],"title":"t"}`, 0},
		{"create group too many", `{"op":"create_session","client_msg_id":"c4","kind":"group","member_user_ids":` + many + `}`, imv1.ErrorCode_ERROR_CODE_TOO_LARGE},
		{"create bad kind", `{"op":"create_session","client_msg_id":"c4","kind":"channel"}`, imv1.ErrorCode_ERROR_CODE_INVALID_FIELD},
		{"members add", `{"op":"members","client_msg_id":"c5","session_id":"g1","action":"add","user_ids":["dave"]}`, 0},
		{"members bad action", `{"op":"members","client_msg_id":"c5","session_id":"g1","action":"kick","user_ids":["dave"]}`, imv1.ErrorCode_ERROR_CODE_INVALID_FIELD},
		{"members empty", `{"op":"members","client_msg_id":"c5","session_id":"g1","action":"add"}`, imv1.ErrorCode_ERROR_CODE_MISSING_FIELD},
		{"members bad user", `{"op":"members","client_msg_id":"c5","session_id":"g1","action":"add","user_ids":["a|b"]}`, imv1.ErrorCode_ERROR_CODE_INVALID_FIELD},
		{"sync", `{"op":"sync","session_id":"s1","after_seq":0}`, 0},
		{"sync limit too high", `{"op":"sync","session_id":"s1","limit":100000}`, imv1.ErrorCode_ERROR_CODE_INVALID_FIELD},
		{"sync negative after", `{"op":"sync","session_id":"s1","after_seq":-5}`, imv1.ErrorCode_ERROR_CODE_INVALID_FIELD},
		{"read", `{"op":"read","session_id":"s1","seq":9}`, 0},
		{"read zero", `{"op":"read","session_id":"s1","seq":0}`, imv1.ErrorCode_ERROR_CODE_INVALID_FIELD},
		{"delivered", `{"op":"delivered","cursors":[{"session_id":"s1","seq":4}]}`, 0},
		{"delivered empty", `{"op":"delivered","cursors":[]}`, imv1.ErrorCode_ERROR_CODE_MISSING_FIELD},
		{"changes", `{"op":"changes","req_id":"r1"}`, 0},
		{"req_id too long", `{"op":"ping","req_id":"` + strings.Repeat("r", 65) + `"}`, imv1.ErrorCode_ERROR_CODE_TOO_LARGE},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := Decode([]byte(c.frame), l)
			if c.code == 0 {
				if err != nil {
					t.Fatalf("Decode: %v", err)
				}
				if f.Op == OpSync && f.Limit != l.DefaultSyncLimit {
					t.Fatalf("sync limit = %d, want default %d", f.Limit, l.DefaultSyncLimit)
				}
				return
			}
			if err == nil || err.Code != c.code {
				t.Fatalf("Decode error = %v, want code %v", err, c.code)
			}
		})
	}
}

func TestContentRoundTrip(t *testing.T) {
	for _, c := range []struct {
		typ, body, want string
	}{
		{TypeText, `"héllo \"q\""`, `"héllo \"q\""`},
		{TypeCustom, `{ "a" : [1, 2] }`, `{"a":[1,2]}`},
	} {
		t.Run(c.typ, func(t *testing.T) {
			b, err := ContentBytes(c.typ, json.RawMessage(c.body), 1024)
			if err != nil {
				t.Fatal(err)
			}
			if got := string(BodyJSON(c.typ, b)); got != c.want {
				t.Fatalf("round trip = %s, want %s", got, c.want)
			}
		})
	}
}

func TestTraceparent(t *testing.T) {
	for _, c := range []struct {
		s  string
		ok bool
	}{
		{"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", true},
		{"00-00000000000000000000000000000000-b7ad6b7169203331-01", false},
		{"00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01", false},
		{"ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", false},
		{"00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01", false},
		{"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331", false},
	} {
		t.Run(c.s, func(t *testing.T) {
			if got := ValidTraceparent(c.s); got != c.ok {
				t.Fatalf("ValidTraceparent = %v, want %v", got, c.ok)
			}
		})
	}
}

// FuzzDecode feeds arbitrary bytes to the frame decoder: it must never
// panic, every rejection must be a registry error, and an accepted frame
// must survive a JSON round trip unchanged in meaning.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"op":"send","client_msg_id":"c1","session_id":"s1","type":"text","body":"hi"}`,
		`{"op":"create_session","client_msg_id":"c4","kind":"group","member_user_ids":["bob"]}`,
		`{"op":"delivered","cursors":[{"session_id":"s1","seq":4}]}`,
		`{"op":"sync","session_id":"s1","after_seq":3,"limit":10}`,
		`{"op":"send","type":"custom","body":{"a":[1,{"b":null}]}}`,
		"{\"op\":\"\xff\"}", `[]`, `null`, `{"op":"ping"} x`,
	} {
		f.Add([]byte(s))
	}
	l := DefaultLimits
	l.MaxFrameBytes = 4096
	f.Fuzz(func(t *testing.T, data []byte) {
		if fa, err := DecodeAs(data, OpSend, l); err == nil && fa.Op != OpSend {
			t.Fatalf("DecodeAs(send) accepted op %q", fa.Op)
		}
		fr, err := Decode(data, l)
		if err != nil {
			if _, ok := apierr.Lookup(err.Code); !ok || err.Code == imv1.ErrorCode_ERROR_CODE_UNSPECIFIED {
				t.Fatalf("unregistered error code %v", err.Code)
			}
			return
		}
		again, merr := json.Marshal(fr)
		if merr != nil {
			t.Fatalf("marshal accepted frame: %v", merr)
		}
		fr2, err2 := Decode(again, Limits{MaxFrameBytes: 1 << 20, MaxBodyBytes: l.MaxBodyBytes, MaxMembers: l.MaxMembers,
			MaxSyncLimit: l.MaxSyncLimit, DefaultSyncLimit: l.DefaultSyncLimit, MaxTitleBytes: l.MaxTitleBytes, MaxCursors: l.MaxCursors})
		if err2 != nil {
			t.Fatalf("re-encoded frame %s rejected: %v", again, err2)
		}
		if fr2.Op != fr.Op || fr2.ClientMsgID != fr.ClientMsgID || fr2.SessionID != fr.SessionID {
			t.Fatalf("round trip changed the frame: %+v vs %+v", fr, fr2)
		}
		if fr.Op == OpSend {
			if _, err := ContentBytes(fr.Type, fr.Body, l.MaxBodyBytes); err != nil {
				t.Fatalf("accepted send has bad content: %v", err)
			}
		}
	})
}

// FuzzPlainStrings: the fast paths for plain JSON strings agree with
// encoding/json: what unescapedString accepts json.Unmarshal decodes to
// the same bytes, and what canonicalString accepts json.Marshal writes
// unchanged as a raw value.
func FuzzPlainStrings(f *testing.F) {
	for _, s := range []string{`"hello world"`, `"héllo"`, `"a\"b"`, `"<b>"`, `"fish & chips"`, "\"\xff\"", `"`, `""`, "\"\u2028\"", "\"tab\t\"", `x"y"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if inner, ok := unescapedString(raw); ok {
			var s string
			if err := json.Unmarshal(raw, &s); err != nil || s != string(inner) {
				t.Fatalf("unescapedString(%q) = %q, json.Unmarshal gives %q, %v", raw, inner, s, err)
			}
		}
		if canonicalString(raw) {
			b, err := json.Marshal(json.RawMessage(raw))
			if err != nil || string(b) != string(raw) {
				t.Fatalf("canonicalString(%q), but json.Marshal writes %q, %v", raw, b, err)
			}
		}
	})
}
