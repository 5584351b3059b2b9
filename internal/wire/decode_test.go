package wire

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

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
		{"null body", `{"op":"send","client_msg_id":"c1","session_id":"s1","type":"text","body":null}`, imv1.ErrorCode_ERROR_CODE_MISSING_FIELD},
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
		{"sync before", `{"op":"sync","session_id":"s1","before_seq":40}`, 0},
		{"sync around", `{"op":"sync","session_id":"s1","around_seq":40}`, 0},
		{"sync negative before", `{"op":"sync","session_id":"s1","before_seq":-1}`, imv1.ErrorCode_ERROR_CODE_INVALID_FIELD},
		{"sync negative around", `{"op":"sync","session_id":"s1","around_seq":-1}`, imv1.ErrorCode_ERROR_CODE_INVALID_FIELD},
		{"sync after and before", `{"op":"sync","session_id":"s1","after_seq":3,"before_seq":9}`, imv1.ErrorCode_ERROR_CODE_INVALID_FIELD},
		{"sync before and around", `{"op":"sync","session_id":"s1","before_seq":3,"around_seq":9}`, imv1.ErrorCode_ERROR_CODE_INVALID_FIELD},
		{"sync before limit too high", `{"op":"sync","session_id":"s1","before_seq":3,"limit":201}`, imv1.ErrorCode_ERROR_CODE_INVALID_FIELD},
		{"read", `{"op":"read","session_id":"s1","seq":9}`, 0},
		{"read zero", `{"op":"read","session_id":"s1","seq":0}`, imv1.ErrorCode_ERROR_CODE_INVALID_FIELD},
		{"delivered", `{"op":"delivered","cursors":[{"session_id":"s1","seq":4}]}`, 0},
		{"delivered empty", `{"op":"delivered","cursors":[]}`, imv1.ErrorCode_ERROR_CODE_MISSING_FIELD},
		{"changes", `{"op":"changes","req_id":"r1"}`, 0},
		{"devices", `{"op":"devices","req_id":"r1"}`, 0},
		{"settings", `{"op":"settings","read_receipts":false}`, 0},
		{"sign_out", `{"op":"sign_out","device_id":"phone"}`, 0},
		{"sign_out without device", `{"op":"sign_out"}`, imv1.ErrorCode_ERROR_CODE_MISSING_FIELD},
		{"sign_out bad device", `{"op":"sign_out","device_id":"a|b"}`, imv1.ErrorCode_ERROR_CODE_INVALID_FIELD},
		{"sign_out DEVICE_ID", `{"op":"sign_out","device_id":"a","DEVICE_ID":"b"}`, imv1.ErrorCode_ERROR_CODE_AMBIGUOUS_JSON},
		{"presence", `{"op":"presence","user_ids":["bob","carol"]}`, 0},
		{"presence empty", `{"op":"presence","user_ids":[]}`, imv1.ErrorCode_ERROR_CODE_MISSING_FIELD},
		{"presence too many", `{"op":"presence","user_ids":["` + strings.Repeat(`u","`, MaxPresenceUsers) + `u"]}`, imv1.ErrorCode_ERROR_CODE_TOO_LARGE},
		{"req_id too long", `{"op":"ping","req_id":"` + strings.Repeat("r", 65) + `"}`, imv1.ErrorCode_ERROR_CODE_TOO_LARGE},
		{"sync limit negative", `{"op":"sync","session_id":"s1","limit":-1}`, imv1.ErrorCode_ERROR_CODE_INVALID_FIELD},
		{"escaped strings", `{"op":"send","client_msg_id":"c\u0031","session_id":"s1","type":"text","body":"\ud83d\ude00 \"q\""}`, 0},
		{"unknown field of another case than any protocol field", `{"op":"ping","opx":1,"Future":2}`, 0},

		// Ambiguous JSON: parsers disagree on what these say.
		{"duplicate op", `{"op":"ping","op":"sync","session_id":"s1"}`, imv1.ErrorCode_ERROR_CODE_AMBIGUOUS_JSON},
		{"duplicate session_id", `{"op":"send","client_msg_id":"c1","session_id":"s1","session_id":"s2","type":"text","body":"hi"}`, imv1.ErrorCode_ERROR_CODE_AMBIGUOUS_JSON},
		{"duplicate unknown field", `{"op":"ping","x":1,"x":2}`, imv1.ErrorCode_ERROR_CODE_AMBIGUOUS_JSON},
		{"duplicate inside a custom body", `{"op":"send","client_msg_id":"c1","session_id":"s1","type":"custom","body":{"a":{"b":1,"b":2}}}`, imv1.ErrorCode_ERROR_CODE_AMBIGUOUS_JSON},
		{"duplicate inside an unknown field", `{"op":"ping","x":[{"y":1,"y":2}]}`, imv1.ErrorCode_ERROR_CODE_AMBIGUOUS_JSON},
		{"duplicate in a cursor", `{"op":"delivered","cursors":[{"session_id":"s1","seq":4,"seq":9}]}`, imv1.ErrorCode_ERROR_CODE_AMBIGUOUS_JSON},
		{"duplicate spelled with an escape", `{"op":"ping","\u006fp":"sync"}`, imv1.ErrorCode_ERROR_CODE_AMBIGUOUS_JSON},
		{"op and Op", `{"op":"ping","Op":"sync","session_id":"s1"}`, imv1.ErrorCode_ERROR_CODE_AMBIGUOUS_JSON},
		{"Op alone", `{"Op":"ping"}`, imv1.ErrorCode_ERROR_CODE_AMBIGUOUS_JSON},
		{"SESSION_ID", `{"op":"send","client_msg_id":"c1","session_id":"s1","SESSION_ID":"s2","type":"text","body":"hi"}`, imv1.ErrorCode_ERROR_CODE_AMBIGUOUS_JSON},
		{"Kelvin sign for k", `{"op":"create_session","client_msg_id":"c4","kind":"group","\u212aind":"direct"}`, imv1.ErrorCode_ERROR_CODE_AMBIGUOUS_JSON},
		{"Seq in a cursor", `{"op":"delivered","cursors":[{"session_id":"s1","seq":4,"Seq":9}]}`, imv1.ErrorCode_ERROR_CODE_AMBIGUOUS_JSON},
		{"lone surrogate in op", `{"op":"ping\ud800"}`, imv1.ErrorCode_ERROR_CODE_AMBIGUOUS_JSON},
		{"lone surrogate in the body", `{"op":"send","client_msg_id":"c1","session_id":"s1","type":"text","body":"a\udc00b"}`, imv1.ErrorCode_ERROR_CODE_AMBIGUOUS_JSON},
		{"reversed surrogate pair", `{"op":"send","client_msg_id":"c1","session_id":"s1","type":"text","body":"\ude00\ud83d"}`, imv1.ErrorCode_ERROR_CODE_AMBIGUOUS_JSON},
		{"invalid utf8 in a key", "{\"op\":\"ping\",\"\xc3\x28\":1}", imv1.ErrorCode_ERROR_CODE_INVALID_UTF8},
		{"invalid utf8 in a custom body", "{\"op\":\"send\",\"client_msg_id\":\"c1\",\"session_id\":\"s1\",\"type\":\"custom\",\"body\":{\"a\":\"\xed\xa0\x80\"}}", imv1.ErrorCode_ERROR_CODE_INVALID_UTF8},
		{"trailing comma", `{"op":"ping",}`, imv1.ErrorCode_ERROR_CODE_BAD_FRAME},
		{"byte order mark", "\ufeff{\"op\":\"ping\"}", imv1.ErrorCode_ERROR_CODE_BAD_FRAME},
		{"fraction for an integer", `{"op":"sync","session_id":"s1","limit":1.0}`, imv1.ErrorCode_ERROR_CODE_BAD_FRAME},
		{"integer over int64", `{"op":"read","session_id":"s1","seq":9223372036854775808}`, imv1.ErrorCode_ERROR_CODE_BAD_FRAME},
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

// TestSyncLimit: 1-200 is a page size, 0 or absent the default; the
// error says so in the words of docs/protocol.md.
func TestSyncLimit(t *testing.T) {
	l := DefaultLimits
	for _, c := range []struct {
		in   string
		want int // -1: refused
	}{{``, 50}, {`,"limit":0`, 50}, {`,"limit":1`, 1}, {`,"limit":200`, 200}, {`,"limit":201`, -1}, {`,"limit":-1`, -1}} {
		t.Run(c.in, func(t *testing.T) {
			f, err := Decode([]byte(`{"op":"sync","session_id":"s1"`+c.in+`}`), l)
			if c.want < 0 {
				const msg = "limit must be 1-200 (absent or 0: the default, 50)"
				if err == nil || err.Code != imv1.ErrorCode_ERROR_CODE_INVALID_FIELD || err.Message() != msg {
					t.Fatalf("Decode error = %v, want invalid_field %q", err, msg)
				}
				return
			}
			if err != nil || f.Limit != c.want {
				t.Fatalf("Decode = %+v, %v; want limit %d", f, err, c.want)
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
		`{"op":"sync","session_id":"s1","before_seq":3,"limit":10}`,
		`{"op":"sync","session_id":"s1","around_seq":7}`,
		`{"op":"send","type":"custom","body":{"a":[1,{"b":null}]}}`,
		"{\"op\":\"\xff\"}", `[]`, `null`, `{"op":"ping"} x`,
	} {
		f.Add([]byte(s))
	}
	for _, s := range ambiguousFrames {
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

// ambiguousFrames are frames that JSON parsers read differently; the
// fuzz targets start from them.
var ambiguousFrames = []string{
	`{"op":"ping","op":"sync","session_id":"s1"}`,
	`{"op":"send","client_msg_id":"c1","session_id":"s1","session_id":"s2","type":"text","body":"hi"}`,
	`{"op":"send","client_msg_id":"c1","session_id":"s1","type":"custom","body":{"a":1,"a":2}}`,
	`{"op":"delivered","cursors":[{"session_id":"s1","seq":4,"seq":9}]}`,
	`{"op":"delivered","cursors":[{"session_id":"s1","seq":4,"SEQ":9}]}`,
	`{"op":"ping","\u006fp":"sync"}`,
	`{"op":"ping","Op":"sync"}`,
	`{"op":"ping","\u212aind":"x"}`,
	`{"op":"send","client_msg_id":"c1","session_id":"s1","type":"text","body":"\ud800"}`,
	`{"op":"send","client_msg_id":"c1","session_id":"s1","type":"text","body":"\ud83d\ude00"}`,
	"{\"op\":\"send\",\"client_msg_id\":\"c1\",\"session_id\":\"s1\",\"type\":\"text\",\"body\":\"\xed\xa0\x80\"}",
	`{"op":"ping","x":{"y":[{"z":1,"z":1}]}}`,
}

// FuzzDecodeIsUnambiguous: a frame Decode accepts has no name twice in
// any object (counted by encoding/json's tokenizer, not the decoder under
// test), is valid UTF-8, and encoding/json reads it (last name wins, names
// matched case-insensitively, lone surrogates made U+FFFD) as the same
// frame; a frame it refuses for ambiguity is one encoding/json reads.
func FuzzDecodeIsUnambiguous(f *testing.F) {
	for _, s := range ambiguousFrames {
		f.Add([]byte(s))
	}
	f.Add([]byte(`{"op":"send","client_msg_id":"c1","session_id":"s1","type":"custom","body":{"a":[1,{"b":"]}"}],"n":null}}`))
	f.Add([]byte(`{"op":"create_session","client_msg_id":"c4","kind":"group","member_user_ids":["bob"],"title":"t\u00e9"}`))
	f.Add([]byte(`{"op":"sync","session_id":"s1","after_seq":3,"limit":10,"future":{"op":1}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var got ClientFrame
		err := unmarshalFrame(data, &got, "frame")
		if err != nil {
			if err.Code == imv1.ErrorCode_ERROR_CODE_AMBIGUOUS_JSON && !json.Valid(data) {
				t.Fatalf("%q refused as ambiguous, but encoding/json refuses it too: %v", data, err)
			}
			return
		}
		if !utf8.Valid(data) {
			t.Fatalf("accepted invalid UTF-8 %q", data)
		}
		if name, dup := repeatedName(data); dup {
			t.Fatalf("accepted %q, which repeats %q", data, name)
		}
		var v1 ClientFrame
		if err := json.Unmarshal(data, &v1); err != nil {
			t.Fatalf("accepted %q, which encoding/json refuses: %v", data, err)
		}
		if !reflect.DeepEqual(got, v1) {
			t.Fatalf("%q:\n gateway reads      %+v\n encoding/json reads %+v", data, got, v1)
		}
		if got.Type != "" && len(got.Body) > 0 {
			stored, aerr := ContentBytes(got.Type, got.Body, 1<<20)
			if aerr == nil && got.Type != TypeText {
				var want bytes.Buffer
				if err := json.Compact(&want, got.Body); err != nil || !bytes.Equal(stored, want.Bytes()) {
					t.Fatalf("body %q stored as %q, encoding/json compacts it to %q (%v)", got.Body, stored, want.Bytes(), err)
				}
			}
		}
	})
}

// repeatedName walks data with encoding/json's tokenizer and reports a
// name that appears twice in one object.
func repeatedName(data []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	type level struct {
		names  map[string]bool
		object bool
		key    bool // the next string of an object is a name
	}
	var stack []*level
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		var top *level
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && top.key {
			if d, ok := tok.(json.Delim); !ok || d != '}' {
				name := tok.(string)
				if top.names[name] {
					return name, true
				}
				top.names[name] = true
				top.key = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &level{names: map[string]bool{}, object: true, key: true})
			continue
		case json.Delim('['):
			stack = append(stack, &level{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		if len(stack) > 0 && stack[len(stack)-1].object {
			stack[len(stack)-1].key = true // a value ended
		}
	}
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
