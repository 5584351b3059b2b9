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
	counted := wire.AppendUnread(nil, evb, 3, 7)
	zero := wire.AppendUnread(nil, cb, 0, 0)
	read, _ := json.Marshal(wire.UnreadFrame{Op: wire.OpUnread, SessionID: "g-5b1f", ReadSeq: 43, Unread: 0, TotalUnread: 2})
	return []string{string(ack.AppendJSON(nil)), string(notice.AppendJSON(nil)), string(evb), string(cb), string(hello), string(pong),
		`{"op":"event","event":{"session_id":"s","seq":1,"user_ids":[]}}`, ` { "op" : "ack" , "seq" : -0 } `,
		string(counted), string(zero), string(read)}
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

// TestDecodeUnreadCounts: the unread counts decode the same on the fast
// path and through encoding/json, a count of 0 is not an absent count,
// and only frames that carry both counts (or a changes result) make an
// UnreadUpdate.
func TestDecodeUnreadCounts(t *testing.T) {
	ev := `"event":{"session_id":"g-1","seq":4,"msg_id":"9","sender_user_id":"bob","server_ts":5,"kind":"message","type":"text","body":"hi"}`
	for _, tc := range []struct {
		name, in string
		fast     bool // takes the fast path
		want     *UnreadUpdate
	}{
		{"event counted", `{"op":"event",` + ev + `,"unread":3,"total_unread":7}`, true,
			&UnreadUpdate{Cause: UnreadEvent, SessionID: "g-1", Unread: 3, Seq: 4, TotalUnread: 7}},
		{"event counted 0", `{"op":"event",` + ev + `,"unread":0,"total_unread":0}`, true,
			&UnreadUpdate{Cause: UnreadEvent, SessionID: "g-1", Seq: 4}},
		{"event not counted", `{"op":"event",` + ev + `}`, true, nil},
		{"event with null counts", `{"op":"event",` + ev + `,"unread":null,"total_unread":null}`, false, nil},
		{"event with a total only", `{"op":"event",` + ev + `,"total_unread":2}`, true, nil},
		{"unread frame", `{"op":"unread","session_id":"g-1","read_seq":43,"unread":0,"total_unread":5}`, true,
			&UnreadUpdate{Cause: UnreadRead, SessionID: "g-1", ReadSeq: 43, TotalUnread: 5}},
		{"unread frame without session", `{"op":"unread","read_seq":43,"unread":0,"total_unread":5}`, true, nil},
		{"changes result", `{"op":"result","req_id":"q1","sessions":[{"session_id":"a","max_seq":9,"read_seq":2,"unread":0},{"session_id":"b","max_seq":3,"read_seq":0,"unread":2}],"total_unread":2}`, false,
			&UnreadUpdate{Cause: UnreadChanges, TotalUnread: 2, Sessions: map[string]int64{"a": 0, "b": 2}}},
		{"changes result, no sessions", `{"op":"result","req_id":"q1","sessions":[],"total_unread":0}`, false,
			&UnreadUpdate{Cause: UnreadChanges, Sessions: map[string]int64{}}},
		{"sync result", `{"op":"result","req_id":"q1","session_id":"a","messages":[],"has_more":false}`, false, nil},
		{"pong", `{"op":"pong","req_id":"q1"}`, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fast, slow serverFrame
			if got := decodeFast([]byte(tc.in), &fast); got != tc.fast {
				t.Fatalf("decodeFast took it: %v, want %v", got, tc.fast)
			}
			if err := json.Unmarshal([]byte(tc.in), &slow); err != nil {
				t.Fatal(err)
			}
			if tc.fast && !reflect.DeepEqual(fast, slow) {
				t.Fatalf("decodeFast:\n got %+v\nwant %+v", fast, slow)
			}
			f, err := decodeFrame([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			u, ok := unreadUpdate(&f)
			switch {
			case tc.want == nil && ok:
				t.Fatalf("update %+v from a frame without counts", u)
			case tc.want != nil && !ok:
				t.Fatalf("no update, want %+v (frame %+v)", *tc.want, f)
			case tc.want != nil && !reflect.DeepEqual(u, *tc.want):
				t.Fatalf("update:\n got %+v\nwant %+v", u, *tc.want)
			}
		})
	}
}
