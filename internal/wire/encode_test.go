package wire

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

var tricky = []string{"", "plain", `quote " and \ backslash`, "<script>&amp;</script>", "tab\tnl\ncr\rbs\bff\f",
	"\x00\x01\x1f\x7f", "ünïcødé 日本語 🎉", "\u2028\u2029", "bad utf8 \xff\xfe \xe2\x80", "\xe2\x82\xac euro"}

func TestAppendersMatchEncodingJSON(t *testing.T) {
	for _, s := range tricky {
		t.Run(s, func(t *testing.T) { checkAppenders(t, s, 42) })
	}
	t.Run("zero values", func(t *testing.T) {
		for _, v := range []any{&Ack{}, &EventFrame{}, &ClientFrame{}, &ClientFrame{Op: OpDelivered, Cursors: []Cursor{}, UserIDs: []string{}}} {
			checkValue(t, v)
		}
	})
	t.Run("raw bodies", func(t *testing.T) {
		for _, body := range []string{`"x"`, `{"a": 1}`, `{"a":"<b>"}`, "[1,\n2]", `{"k":"\u2028"}`, `{"€":1}`, `null`, `12.5e3`} {
			checkValue(t, &EventFrame{Op: OpEvent, Event: Message{SessionID: "s", Seq: 1, Kind: KindMessage, Type: TypeCustom, Body: json.RawMessage(body)}})
		}
	})
	t.Run("invalid raw body is an error", func(t *testing.T) {
		f := &EventFrame{Op: OpEvent, Event: Message{Body: json.RawMessage(`{"a":`)}}
		if _, err := f.AppendJSON(nil); err == nil {
			t.Fatal("AppendJSON accepted an invalid body")
		}
	})
	t.Run("text bodies as BodyJSON renders them", func(t *testing.T) {
		for _, s := range tricky {
			want, _ := json.Marshal(s)
			if got := BodyJSON(TypeText, []byte(s)); !bytes.Equal(got, want) {
				t.Fatalf("BodyJSON(%q) = %s, want %s", s, got, want)
			}
		}
	})
}

func checkAppenders(t *testing.T, s string, n int64) {
	t.Helper()
	yes := n%2 == 0
	checkValue(t, &Ack{Op: OpSeqNotice, ClientMsgID: s, SessionID: s, Status: StatusRefused, Error: &ErrorBody{Code: int32(n), Name: s, Message: s}})
	checkValue(t, &EventFrame{Op: OpEvent, Event: Message{SessionID: s, Seq: n, Kind: KindGroupChange, Action: s,
		Group: &GroupEvent{UserID: s, Role: s, MutedUntilMs: n, Muted: &yes, Settings: &GroupSettings{Title: &s, HasInviteCode: &yes}}}})
	checkValue(t, &ClientFrame{Op: OpGroup, ClientMsgID: s, SessionID: s, Action: s, UserID: s, Role: s, MutedUntilMs: n, Muted: &yes,
		InviteCode: s, Settings: &GroupSettings{Description: &s, JoinRule: &s, MembersCanInvite: &yes}})
	checkValue(t, &ClientFrame{Op: OpMemberChanges, SessionID: s, AfterUserID: s, SinceVersion: n})
	checkValue(t, &Ack{Op: OpAck, ReqID: s, ClientMsgID: s, SessionID: s, Status: s, Seq: n, MsgID: s, ServerTs: -n, Duplicate: n%2 == 0})
	checkValue(t, &EventFrame{Op: OpEvent, Event: Message{SessionID: s, Seq: n, MsgID: s, ClientMsgID: s, SenderUserID: s,
		SenderDeviceID: s, ServerTs: n, Kind: s, Type: s, Body: BodyJSON(TypeText, []byte(s)), TargetSeq: -n,
		SessionKind: s, Title: s, Action: s, UserIDs: []string{s, "b", s}, Edited: n%2 == 0, Recalled: n%3 == 0, Erased: n%5 == 0}})
	checkValue(t, &ClientFrame{Op: s, ReqID: s, ClientMsgID: s, SessionID: s, Type: s, Body: BodyJSON(TypeText, []byte(s)),
		ClientTs: n, Traceparent: s, TargetSeq: -n, Kind: s, PeerUserID: s, MemberUserIDs: []string{s}, Title: s, Action: s,
		UserIDs: []string{s, s}, AfterSeq: n, Limit: int(n), Seq: n, Cursors: []Cursor{{SessionID: s, Seq: n}, {}}})
}

func checkValue(t *testing.T, v any) {
	t.Helper()
	want, werr := json.Marshal(v)
	var got []byte
	var gerr error
	switch x := v.(type) {
	case *Ack:
		got = x.AppendJSON([]byte("prefix"))[len("prefix"):]
	case *EventFrame:
		got, gerr = x.AppendJSON(nil)
	case *ClientFrame:
		got, gerr = x.AppendJSON(nil)
	}
	if (gerr != nil) != (werr != nil) {
		t.Fatalf("error %v, json.Marshal's %v", gerr, werr)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%T:\n got %s\nwant %s", v, got, want)
	}
}

func FuzzAppendersMatchEncodingJSON(f *testing.F) {
	for _, s := range tricky {
		f.Add(s, int64(7), `{"a":1}`)
	}
	f.Fuzz(func(t *testing.T, s string, n int64, body string) {
		checkAppenders(t, s, n)
		checkValue(t, &EventFrame{Op: OpEvent, Event: Message{SessionID: s, Seq: n, Kind: KindMessage, Type: TypeCustom, Body: json.RawMessage(body)}})
		checkValue(t, &ClientFrame{Op: OpSend, SessionID: s, Type: TypeCustom, Body: json.RawMessage(body)})
	})
}

func BenchmarkEncodeEvent_200B(b *testing.B) {
	f := &EventFrame{Op: OpEvent, Event: Message{SessionID: "g-5b1f00112233445566778899aabbccdd", Seq: 123456, MsgID: "7401234567890123456",
		ClientMsgID: "0193a0c2-7b6e-7c41-9d55-3f2c7e1f0a11", SenderUserID: "user-123", SenderDeviceID: "d1", ServerTs: 1764670000000,
		Kind: KindMessage, Type: TypeText, Body: BodyJSON(TypeText, bytes.Repeat([]byte("x"), 200))}}
	b.Run("encoding_json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(f); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := f.AppendJSON(nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestAppendersCoverEveryField sets every field of each hand-encoded
// frame (found by reflection, so a field added later is covered without
// editing this test) and holds the appender to encoding/json: a field the
// appender does not write fails here instead of vanishing on the wire.
func TestAppendersCoverEveryField(t *testing.T) {
	for _, v := range []any{&Ack{}, &EventFrame{}, &ClientFrame{}} {
		fill(reflect.ValueOf(v).Elem())
		checkValue(t, v)
	}
	// Each field alone too: a fallback taken for one field must not hide
	// another the fast path drops.
	for _, v := range []any{&Ack{}, &EventFrame{}, &ClientFrame{}} {
		typ := reflect.TypeOf(v).Elem()
		for i := range typ.NumField() {
			one := reflect.New(typ)
			fill(one.Elem().Field(i))
			if typ.Name() == "EventFrame" && typ.Field(i).Name == "Event" {
				for j := range typ.Field(i).Type.NumField() {
					ev := reflect.New(typ)
					fill(ev.Elem().Field(i).Field(j))
					checkValue(t, ev.Interface())
				}
			}
			checkValue(t, one.Interface())
		}
	}
}

// fill sets v (and everything under it) to a non-zero value.
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Int, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i))
			}
		}
	case reflect.Slice:
		if v.Type() == reflect.TypeOf(json.RawMessage(nil)) {
			v.SetBytes([]byte(`"x"`))
			return
		}
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0))
		v.Set(s)
	}
}

// TestAppendUnreadMatchesEncodingJSON: the count spliced into an event
// frame encoded once is what json.Marshal writes for the frame with it.
func TestAppendUnreadMatchesEncodingJSON(t *testing.T) {
	for _, n := range []struct{ unread, total int64 }{{0, 0}, {1, 3}, {12345, 99999999}} {
		f := EventFrame{Op: OpEvent, Event: Message{SessionID: "g-1", Seq: 7, MsgID: "9", SenderUserID: "bob", ServerTs: 5, Kind: KindMessage, Type: TypeText, Body: []byte(`"hi"`)}}
		plain, err := f.AppendJSON(nil)
		if err != nil {
			t.Fatal(err)
		}
		got := AppendUnread(nil, plain, n.unread, n.total)
		f.Unread, f.TotalUnread = &n.unread, &n.total
		want, err := json.Marshal(&f)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Fatalf("AppendUnread = %s\nwant           %s", got, want)
		}
	}
}
