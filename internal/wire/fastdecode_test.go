package wire

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// decodeSlow is parse's encoding/json path, the reference decodeFast must
// agree with.
func decodeSlow(b []byte) (ClientFrame, bool) {
	var f ClientFrame
	dec := json.NewDecoder(bytes.NewReader(b))
	if dec.Decode(&f) != nil || dec.More() {
		return f, false
	}
	return f, true
}

func hotClientFrames(t testing.TB) [][]byte {
	send := ClientFrame{Op: OpSend, ReqID: "q1", ClientMsgID: "0193a0c2-7b6e", SessionID: "g-5b1f", Type: TypeText,
		Body: BodyJSON(TypeText, []byte(strings.Repeat("x", 200)+"é<>")), ClientTs: 1764670000000,
		Traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	custom := ClientFrame{Op: OpSend, ClientMsgID: "c", SessionID: "s", Type: TypeCustom, Body: json.RawMessage(`{"a":[1,{"b":"]}"}],"n":null}`)}
	delivered := ClientFrame{Op: OpDelivered, Cursors: []Cursor{{SessionID: "s1", Seq: 4}, {SessionID: "s2", Seq: 9}}}
	create := ClientFrame{Op: OpCreateSession, ClientMsgID: "c", Kind: KindGroup, MemberUserIDs: []string{"a", "b"}, Title: "t"}
	sync := ClientFrame{Op: OpSync, SessionID: "s", AfterSeq: 3, Limit: 10}
	var out [][]byte
	for _, f := range []ClientFrame{send, custom, delivered, create, sync, {Op: OpPing, ReqID: "q9"}} {
		b, err := f.AppendJSON(nil)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return append(out, []byte(` {"op" : "members","user_ids":[],"cursors":[]} `))
}

// TestDecodeFastClient: the frames clients send most take the fast path
// and decode as encoding/json decodes them; the rest fall back.
func TestDecodeFastClient(t *testing.T) {
	for _, b := range hotClientFrames(t) {
		t.Run("fast "+string(b[:min(30, len(b))]), func(t *testing.T) {
			var got ClientFrame
			if !decodeFast(b, &got) {
				t.Fatalf("decodeFast refused %s", b)
			}
			want, ok := decodeSlow(b)
			if !ok || !reflect.DeepEqual(got, want) {
				t.Fatalf("decodeFast:\n got %+v\nwant %+v (ok %v)", got, want, ok)
			}
		})
	}
	for _, in := range []string{`{"op":"ping","extra":1}`, `{"Op":"ping"}`, `{"op":"ping"}}`, `{"op":"a\u0041"}`,
		`{"op":"ping","op":"send"}`, `{"op":"send","body":null}`, `{"op":"delivered","cursors":[{"seq":1.5}]}`,
		`{"op":"delivered","cursors":[{"seq":1,"seq":2}]}`, `{"op":"sync","limit":1e1}`, `{"op":"ping"`, ``} {
		t.Run("fallback "+in, func(t *testing.T) {
			var got ClientFrame
			if decodeFast([]byte(in), &got) {
				t.Fatalf("decodeFast accepted %q", in)
			}
		})
	}
}

// FuzzDecodeFastMatchesDecoder: whatever decodeFast accepts, the
// encoding/json path accepts too and decodes to the same frame.
func FuzzDecodeFastMatchesDecoder(f *testing.F) {
	for _, b := range hotClientFrames(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var got ClientFrame
		if !decodeFast(b, &got) {
			return
		}
		want, ok := decodeSlow(b)
		if !ok {
			t.Fatalf("decodeFast accepted %q, encoding/json refuses it", b)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\n got %+v\nwant %+v", b, got, want)
		}
	})
}
