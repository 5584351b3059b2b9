package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/schemas"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// testRecord is a record as the services write it: the value m, the
// headers of eventlog.Headers.
func testRecord(t testing.TB, topic, eventType string, key []byte, m proto.Message) *kgo.Record {
	t.Helper()
	v, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return &kgo.Record{Topic: topic, Partition: 2, Offset: 41, Timestamp: time.UnixMilli(1_767_225_600_000), Key: key, Value: v,
		Headers: eventlog.Headers(eventType, string(m.ProtoReflect().Descriptor().FullName()), "sequencer", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")}
}

// TestRecordSchema: every record type of every topic of eventlog.Topics is
// decoded as its own message, told apart on im.receipts.v1 by the
// event-type header (a delivery receipt used to come out as a read
// receipt), and headers that contradict each other are refused.
func TestRecordSchema(t *testing.T) {
	cases := []struct {
		topic, eventType, schema string
		want                     proto.Message // nil: refused
	}{
		{eventlog.TopicUplink, "message", "seqflow.im.v1.Uplink", &imv1.Uplink{}},
		{eventlog.TopicUplink, "session_create", "seqflow.im.v1.Uplink", &imv1.Uplink{}},
		{eventlog.TopicUplink, "membership", "seqflow.im.v1.Uplink", &imv1.Uplink{}},
		{eventlog.TopicUplink, "edit", "seqflow.im.v1.Uplink", &imv1.Uplink{}},
		{eventlog.TopicUplink, "recall", "seqflow.im.v1.Uplink", &imv1.Uplink{}},
		{eventlog.TopicSequenced, "message", "seqflow.im.v1.SequencedEvent", &imv1.SequencedEvent{}},
		{eventlog.TopicSequenced, "session_create", "seqflow.im.v1.SequencedEvent", &imv1.SequencedEvent{}},
		{eventlog.TopicSequenced, "membership", "seqflow.im.v1.SequencedEvent", &imv1.SequencedEvent{}},
		{eventlog.TopicSequenced, "edit", "seqflow.im.v1.SequencedEvent", &imv1.SequencedEvent{}},
		{eventlog.TopicSequenced, "recall", "seqflow.im.v1.SequencedEvent", &imv1.SequencedEvent{}},
		{eventlog.TopicSequenced, "", "", &imv1.SequencedEvent{}}, // no headers: the topic's one message
		{eventlog.TopicDuplicates, "duplicate", "seqflow.im.v1.DuplicateAck", &imv1.DuplicateAck{}},
		{eventlog.TopicReceipts, "read_receipt", "seqflow.im.v1.ReadReceipt", &imv1.ReadReceipt{}},
		{eventlog.TopicReceipts, "delivery_receipt", "seqflow.im.v1.DeliveryReceipt", &imv1.DeliveryReceipt{}},
		{eventlog.TopicReceipts, "delivery_receipt", "", &imv1.DeliveryReceipt{}},
		{eventlog.TopicOffline, "offline", "seqflow.im.v1.OfflineNotification", &imv1.OfflineNotification{}},
		{eventlog.TopicDeadLetter, "dead_letter", "seqflow.im.v1.DeadLetter", &imv1.DeadLetter{}},
		{"im.replays.v1", "", "", &imv1.ReplayDefinition{}},
		// A topic outside the table (a replay topic) by seqflow-schema.
		{"im.replay.x.v1", "message", "seqflow.im.v1.SequencedEvent", &imv1.SequencedEvent{}},
		{"im.replay.x.v1", "replay_end", "seqflow.im.v1.ReplayEnd", &imv1.ReplayEnd{}},
		{"im.replay.x.v1", "", "", nil},
		{"im.replay.x.v1", "x", "google.protobuf.Any", nil},
		{"im.replay.x.v1", "x", "seqflow.im.v1.NoSuchMessage", nil},
		// Refused: a receipt of no known type, headers that disagree.
		{eventlog.TopicReceipts, "", "", nil},
		{eventlog.TopicReceipts, "typing", "", nil},
		{eventlog.TopicReceipts, "delivery_receipt", "seqflow.im.v1.ReadReceipt", nil},
		{eventlog.TopicSequenced, "message", "seqflow.im.v1.Uplink", nil},
	}
	for _, c := range cases {
		t.Run(c.topic+"/"+c.eventType+"/"+c.schema, func(t *testing.T) {
			r := &kgo.Record{Topic: "p." + c.topic}
			if c.eventType != "" {
				r.Headers = append(r.Headers, kgo.RecordHeader{Key: schemas.HeaderEventType, Value: []byte(c.eventType)})
			}
			if c.schema != "" {
				r.Headers = append(r.Headers, kgo.RecordHeader{Key: schemas.HeaderSchema, Value: []byte(c.schema)})
			}
			mt, err := recordSchema(c.topic, r)
			if c.want == nil {
				if err == nil {
					t.Fatalf("decoded as %s, want refused", mt.Descriptor().FullName())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got, want := mt.Descriptor().FullName(), c.want.ProtoReflect().Descriptor().FullName(); got != want {
				t.Fatalf("decoded as %s, want %s", got, want)
			}
		})
	}
	// Every topic of eventlog.Topics has its schema.
	for _, s := range eventlog.Specs(eventlog.Names(""), 0) {
		if _, ok := topicSchemas[s.Name]; !ok {
			t.Errorf("topic %s has no entry in topicSchemas", s.Name)
		}
	}
}

// formatCase is one record and what tap's json format must show of it.
type formatCase struct {
	name string
	rec  *kgo.Record
	msg  proto.Message // what the value holds; nil: undecodable
	want []string      // substrings of the json line
	not  []string      // and what it must not contain
}

func formatCases(t *testing.T) []formatCase {
	ev := func(body []byte) *imv1.SequencedEvent {
		return &imv1.SequencedEvent{SessionId: "s-1", Seq: 7, MsgId: 1<<62 + 3, ClientMsgId: "c-1", SenderUserId: "alice",
			ServerTsMs: 1_767_225_600_000, Payload: &imv1.SequencedEvent_Message{Message: &imv1.MessageContent{Type: "text", Body: body}}}
	}
	uplink := &imv1.Uplink{SessionId: "s-1", ClientMsgId: "c-1", SenderUserId: "alice", Command: &imv1.Uplink_Message{Message: &imv1.MessageContent{Type: "text", Body: []byte("hi")}}}
	uplinkBytes, _ := proto.Marshal(uplink)
	dl := &imv1.DeadLetter{Code: imv1.ErrorCode_ERROR_CODE_UNDECODABLE, Reason: "not a seqflow.im.v1.Uplink", Service: "sequencer",
		OriginalTopic: "im.uplink.v1", OriginalOffset: 3, OriginalKey: []byte("s-1"), OriginalValue: uplinkBytes,
		OriginalHeaders: []*imv1.Header{{Key: []byte("seqflow-event-type"), Value: []byte("message")}, {Key: []byte{0xff}, Value: []byte{0, 1}}}}
	edit := &imv1.SequencedEvent{SessionId: "s-1", Seq: 8, Payload: &imv1.SequencedEvent_Edit{Edit: &imv1.Edit{TargetSeq: 7, Content: &imv1.MessageContent{Type: "custom", Body: []byte{0xc3, 0x28}}}}}
	badKey := testRecord(t, "p.im.sequenced.v1", "message", []byte{0xfe, 's'}, ev([]byte("x")))
	mismatch := testRecord(t, "p.im.receipts.v1", "delivery_receipt", []byte("s-1"), &imv1.ReadReceipt{SessionId: "s-1", ReadSeq: 4})
	undecodable := testRecord(t, "p.im.sequenced.v1", "message", []byte("s-1"), ev(nil))
	undecodable.Value = []byte{0x0a, 0xff, 0xff}
	return []formatCase{
		{name: "text body", rec: testRecord(t, "p.im.sequenced.v1", "message", []byte("s-1"), ev([]byte("héllo\n\t\"world\""))), msg: ev([]byte("héllo\n\t\"world\"")),
			want: []string{`"topic":"p.im.sequenced.v1","partition":2,"offset":41,"timestamp_ms":1767225600000,"key":"s-1","type":"message","schema":"seqflow.im.v1.SequencedEvent"`,
				`"body":"héllo\n\t\"world\""`, `"msg_id":4611686018427387907`, `"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"`, `"seqflow-producer":"sequencer"`},
			not: []string{"body_encoding"}},
		{name: "binary body", rec: testRecord(t, "p.im.sequenced.v1", "message", []byte("s-1"), ev([]byte{0xff, 0, 'a'})), msg: ev([]byte{0xff, 0, 'a'}),
			want: []string{`"body":"/wBh","body_encoding":"base64"`}},
		{name: "UTF-8 with a control character", rec: testRecord(t, "p.im.sequenced.v1", "message", []byte("s-1"), ev([]byte("a\x01b"))), msg: ev([]byte("a\x01b")),
			want: []string{`"body":"YQFi","body_encoding":"base64"`}},
		{name: "nested binary body", rec: testRecord(t, "p.im.sequenced.v1", "edit", []byte("s-1"), edit), msg: edit,
			want: []string{`"edit":{"target_seq":7,"content":{"type":"custom","body":"wyg=","body_encoding":"base64"}}`}},
		{name: "dead letter", rec: testRecord(t, "p.im.deadletter.v1", "dead_letter", []byte("s-1"), dl), msg: dl,
			want: []string{`"code":"ERROR_CODE_UNDECODABLE"`, `"original_key":"s-1"`, `"original_value":"` + base64.StdEncoding.EncodeToString(uplinkBytes) + `","original_value_encoding":"base64"`,
				`"original_headers":[{"key":"seqflow-event-type","value":"message"},{"key":"/w==","key_encoding":"base64","value":"AAE=","value_encoding":"base64"}]`}},
		{name: "delivery receipt", rec: testRecord(t, "p.im.receipts.v1", "delivery_receipt", []byte("s-1"), &imv1.DeliveryReceipt{SessionId: "s-1", UserId: "bob", DeliveredSeq: 9}),
			msg:  &imv1.DeliveryReceipt{SessionId: "s-1", UserId: "bob", DeliveredSeq: 9},
			want: []string{`"type":"delivery_receipt","schema":"seqflow.im.v1.DeliveryReceipt"`, `"event":{"session_id":"s-1","user_id":"bob","delivered_seq":9}`}, not: []string{"read_seq"}},
		{name: "read receipt", rec: testRecord(t, "p.im.receipts.v1", "read_receipt", []byte("s-1"), &imv1.ReadReceipt{SessionId: "s-1", UserId: "bob", ReadSeq: 9}),
			msg:  &imv1.ReadReceipt{SessionId: "s-1", UserId: "bob", ReadSeq: 9},
			want: []string{`"type":"read_receipt","schema":"seqflow.im.v1.ReadReceipt"`, `"event":{"session_id":"s-1","user_id":"bob","read_seq":9}`}, not: []string{"delivered_seq"}},
		{name: "key not text", rec: badKey, msg: ev([]byte("x")), want: []string{`"key":"/nM=","key_encoding":"base64"`}},
		{name: "headers disagree", rec: mismatch,
			want: []string{`"error":"seqflow-schema header says seqflow.im.v1.ReadReceipt, but a \"delivery_receipt\" record on im.receipts.v1 is a seqflow.im.v1.DeliveryReceipt"`, `"value":"`},
			not:  []string{`"event"`, `"schema"`}},
		{name: "undecodable", rec: undecodable,
			want: []string{`"schema":"seqflow.im.v1.SequencedEvent"`, `"error":"not a seqflow.im.v1.SequencedEvent: `, `"value":"Cv//","value_encoding":"base64"`}, not: []string{`"event"`}},
	}
}

// TestTapFormats: each format of each kind of record, read back the way a
// consumer would, gives the record's message; the json format shows text
// as text and everything else in base64 with its marker.
func TestTapFormats(t *testing.T) {
	for _, c := range formatCases(t) {
		t.Run(c.name, func(t *testing.T) {
			topic := strings.TrimPrefix(c.rec.Topic, "p.")
			mt, schemaErr := recordSchema(topic, c.rec)

			line, err := appendJSONRecord(nil, c.rec, mt, schemaErr)
			if err != nil {
				t.Fatal(err)
			}
			if !json.Valid(line) || bytes.Count(line, []byte("\n")) != 1 || line[len(line)-1] != '\n' {
				t.Fatalf("not one JSON line: %q", line)
			}
			for _, w := range c.want {
				if !bytes.Contains(line, []byte(w)) {
					t.Errorf("json line has no %s:\n%s", w, line)
				}
			}
			for _, n := range c.not {
				if bytes.Contains(line, []byte(n)) {
					t.Errorf("json line has %s:\n%s", n, line)
				}
			}
			tl := parseTapJSON(t, line)[0]
			if c.msg == nil {
				if tl.Error == "" || tl.Event != nil {
					t.Fatalf("undecodable record: error %q, event %s", tl.Error, tl.Event)
				}
				v := []byte(tl.Value)
				if tl.ValueEncoding == "base64" {
					v, _ = base64.StdEncoding.DecodeString(tl.Value)
				}
				if !bytes.Equal(v, c.rec.Value) {
					t.Fatalf("value %q, want %q", v, c.rec.Value)
				}
			} else {
				got := c.msg.ProtoReflect().New().Interface()
				if err := fromTapJSON(tl.Event, got); err != nil {
					t.Fatalf("read back %s: %v", tl.Event, err)
				}
				if !proto.Equal(got, c.msg) {
					t.Fatalf("json read back as %v, want %v", got, c.msg)
				}
			}

			pj, err := appendProtoJSONRecord(nil, c.rec, mt, schemaErr)
			if c.msg == nil {
				if err == nil {
					t.Fatalf("protojson wrote %q for an undecodable record", pj)
				}
			} else {
				if err != nil || bytes.Count(pj, []byte("\n")) != 1 {
					t.Fatalf("protojson: %q, %v", pj, err)
				}
				var a anypb.Any
				if err := protojson.Unmarshal(pj, &a); err != nil {
					t.Fatalf("protojson line %s: %v", pj, err)
				}
				got, err := a.UnmarshalNew()
				if err != nil || !proto.Equal(got, c.msg) {
					t.Fatalf("protojson read back as %v (%v), want %v", got, err, c.msg)
				}
			}

			raw, err := appendRawRecord(nil, c.rec, mt, schemaErr)
			if err != nil {
				t.Fatal(err)
			}
			// Two records in a row, to see the framing end where it should.
			raw = append(raw, raw...)
			rd := bufio.NewReader(bytes.NewReader(raw))
			for i := 0; i < 2; i++ {
				if c.msg == nil {
					break
				}
				got := c.msg.ProtoReflect().New().Interface()
				if err := (protodelim.UnmarshalOptions{}).UnmarshalFrom(rd, got); err != nil || !proto.Equal(got, c.msg) {
					t.Fatalf("raw record %d read back as %v (%v), want %v", i, got, err, c.msg)
				}
			}
		})
	}
}

// FuzzTapJSON: whatever the bytes of a body, a key and a string field,
// the json line is valid JSON, and reads back to the same message and key.
func FuzzTapJSON(f *testing.F) {
	f.Add([]byte("hello"), []byte("s-1"), "alice")
	f.Add([]byte{0xff, 0xfe}, []byte{0}, "\u2028")
	f.Add([]byte("a\x7fb"), []byte("\r\n"), "<&>")
	f.Fuzz(func(t *testing.T, body, key []byte, s string) {
		if !utf8.ValidString(s) {
			s = strings.ToValidUTF8(s, "?")
		}
		m := &imv1.SequencedEvent{SessionId: s, Seq: 1, Payload: &imv1.SequencedEvent_Edit{Edit: &imv1.Edit{TargetSeq: 1, Content: &imv1.MessageContent{Type: s, Body: body}}}}
		r := testRecord(t, "p.im.sequenced.v1", "edit", key, m)
		line, err := appendJSONRecord(nil, r, msgType(m), nil)
		if err != nil || !json.Valid(line) {
			t.Fatalf("invalid json line %q: %v", line, err)
		}
		tl := parseTapJSON(t, line)
		if len(tl) != 1 {
			t.Fatalf("%d lines in %q", len(tl), line)
		}
		k := []byte(tl[0].Key)
		if tl[0].KeyEncoding == "base64" {
			k, _ = base64.StdEncoding.DecodeString(tl[0].Key)
		}
		if !bytes.Equal(k, key) {
			t.Fatalf("key read back as %q, want %q", k, key)
		}
		got := &imv1.SequencedEvent{}
		if err := fromTapJSON(tl[0].Event, got); err != nil || !proto.Equal(got, m) {
			t.Fatalf("read back as %v (%v), want %v", got, err, m)
		}
	})
}
