package client

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/seqflow/seqflow/internal/wire"
)

func gatewayFrames(t testing.TB) []string {
	ack := wire.Ack{Op: wire.OpAck, ReqID: "q1", ClientMsgID: "0193a0c2-7b6e", SessionID: "g-5b1f", Status: wire.StatusOK,
		Seq: 12, MsgID: "7401234567890123456", ServerTs: 1764670000000, Duplicate: true}
	ev := wire.EventFrame{Op: wire.OpEvent, Event: wire.Message{SessionID: "g-5b1f", Seq: 12, MsgID: "74", ClientMsgID: "c",
		SenderUserID: "ü-user", SenderDeviceID: "d1", ServerTs: 1764670000000, Kind: wire.KindMessage, Type: wire.TypeText,
		Body: wire.BodyJSON(wire.TypeText, []byte(strings.Repeat("x", 200)+"\n<é>")), TargetSeq: 3, SessionKind: "group",
		Title: "t", Action: "add", UserIDs: []string{"a", "b"}, Edited: true, Recalled: true}}
	custom := wire.EventFrame{Op: wire.OpEvent, Event: wire.Message{SessionID: "s", Seq: 1, Kind: wire.KindMessage,
		Type: wire.TypeCustom, Body: json.RawMessage(`{"a":[1,{"b":"}]"}],"c":null,"d":-1.5e3}`)}}
	evb, err := ev.AppendJSON(nil)
	if err != nil {
		t.Fatal(err)
	}
	cb, err := custom.AppendJSON(nil)
	if err != nil {
		t.Fatal(err)
	}
	hello, _ := json.Marshal(wire.Hello{Op: wire.OpHello, ConnID: "c-1", UserID: "u", DeviceID: "d", GatewayID: "gw-1", HeartbeatMs: 15000, MaxFrameBytes: 65536})
	pong, _ := json.Marshal(wire.OK{Op: wire.OpPong, ReqID: "q7"})
	notice := wire.Ack{Op: wire.OpSeqNotice, ClientMsgID: "m", SessionID: "s", Status: wire.StatusOK, Seq: 9, MsgID: "1"}
	return []string{string(ack.AppendJSON(nil)), string(notice.AppendJSON(nil)), string(evb), string(cb), string(hello), string(pong),
		`{"op":"event","event":{"session_id":"s","seq":1,"user_ids":[]}}`, ` { "op" : "ack" , "seq" : -0 } `}
}

// TestDecodeFast: the frames the gateway sends most take the fast path
// and decode to what encoding/json makes of them; the rest fall back.
func TestDecodeFast(t *testing.T) {
	for _, in := range gatewayFrames(t) {
		t.Run("fast "+in[:min(40, len(in))], func(t *testing.T) {
			var got, want serverFrame
			if !decodeFast([]byte(in), &got) {
				t.Fatalf("decodeFast refused a gateway frame: %s", in)
			}
			if err := json.Unmarshal([]byte(in), &want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("decodeFast:\n got %+v\nwant %+v", got, want)
			}
		})
	}
	for _, in := range []string{
		`{"op":"error","error":{"code":1}}`, `{"op":"result","messages":[]}`, `{"op":"a\"b"}`, `{"OP":"ack"}`,
		`{"op":"ack","op":"event"}`, `{"op":null}`, `{"op":"ack","seq":1.0}`, `{"op":"ack","seq":01}`, `{"op":"ack","seq":1e2}`,
		`{"op":"ack","seq":99999999999999999999}`, `{"op":"ack","unknown":1}`, `{"op":"event","event":{"body":null}}`,
		`{"op":"event","event":{"body":tru}}`, `{"op":"ack"} x`, `{"op":"ack",}`, `{"op":"\xff"}`, `[]`, `null`, ``,
		`{"op":"event","event":{"seq":1,"seq":2}}`, "{\"op\":\"a\x01\"}", `{"op":"event","event":{"body":"x"y}}`,
	} {
		t.Run("fallback "+in, func(t *testing.T) {
			var got serverFrame
			if decodeFast([]byte(in), &got) {
				t.Fatalf("decodeFast accepted %q: %+v", in, got)
			}
		})
	}
}

// FuzzDecodeFastMatchesEncodingJSON: whatever decodeFast accepts,
// encoding/json accepts too and decodes to the same frame.
func FuzzDecodeFastMatchesEncodingJSON(f *testing.F) {
	for _, s := range gatewayFrames(f) {
		f.Add([]byte(s))
	}
	f.Add([]byte(`{"op":"event","event":{"body":{"a":"\"}"}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var got serverFrame
		if !decodeFast(b, &got) {
			return
		}
		var want serverFrame
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatalf("decodeFast accepted %q, encoding/json: %v", b, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\n got %+v\nwant %+v", b, got, want)
		}
	})
}

func BenchmarkDecodeFrame_Event200B(b *testing.B) {
	frames := gatewayFrames(b)
	ev := []byte(frames[2])
	b.Run("encoding_json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var f serverFrame
			if err := json.Unmarshal(ev, &f); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeFrame(ev); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestDecodeFastTakesUnreadCounts: an event frame with the unread counts
// the gateway attaches after changes stays on the fast path.
func TestDecodeFastTakesUnreadCounts(t *testing.T) {
	var f serverFrame
	b := []byte(`{"op":"event","event":{"session_id":"g-1","seq":4,"msg_id":"9","sender_user_id":"bob","server_ts":5,"kind":"message","type":"text","body":"hi"},"unread":3,"total_unread":7}`)
	if !decodeFast(b, &f) || f.Unread != 3 || f.TotalUnread != 7 || f.Event == nil || f.Event.Seq != 4 {
		t.Fatalf("decodeFast = %+v", f)
	}
}
