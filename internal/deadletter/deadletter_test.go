package deadletter

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/schemas"
	"github.com/seqflow/seqflow/schemas/imv1"
)

const trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

func TestRecordParsesBackByteForByte(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_123)
	cases := []struct {
		name   string
		rec    *kgo.Record
		reason string
	}{
		{"plain", &kgo.Record{Key: []byte("s-1"), Value: []byte("v"),
			Headers: eventlog.Headers("message", "seqflow.im.v1.Uplink", "producer-gw", trace)}, "uplink has no command"},
		{"header key and value not UTF-8", &kgo.Record{Key: []byte("s-1"), Value: []byte("v"),
			Headers: []kgo.RecordHeader{{Key: "\xff\xfe", Value: []byte("\xed\xa0\x80")}, {Key: "ok", Value: []byte{0x80}}}}, "x"},
		{"key and value not UTF-8", &kgo.Record{Key: []byte("\xc3\x28"), Value: []byte("\xff\x00\xfe")}, "x"},
		{"empty and repeated header keys", &kgo.Record{Key: []byte("k"),
			Headers: []kgo.RecordHeader{{Key: ""}, {Key: "a\x00", Value: []byte("1")}, {Key: "a\x00", Value: []byte("2")}}}, "x"},
		{"no key, no value, no headers", &kgo.Record{}, "x"},
		{"reason not UTF-8", &kgo.Record{Key: []byte("k"), Value: []byte("v")}, "record key \xff is wrong"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.rec.Topic, c.rec.Partition, c.rec.Offset, c.rec.Timestamp = "t.im.uplink.v1", 3, 41, time.UnixMilli(1_600_000_000_000)
			r, err := Record("t.im.deadletter.v1", "sequencer", c.rec, &Error{Code: imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, Reason: c.reason}, at)
			if err != nil {
				t.Fatal(err)
			}
			if r.Topic != "t.im.deadletter.v1" || r.Partition != 0 || !bytes.Equal(r.Key, c.rec.Key) || !r.Timestamp.Equal(at) {
				t.Errorf("record %s/%d key %q at %v; want partition 0 of the dead-letter topic, the original key, at %v", r.Topic, r.Partition, r.Key, r.Timestamp, at)
			}
			if got, want := eventlog.Header(r, schemas.HeaderTraceparent), eventlog.Header(c.rec, schemas.HeaderTraceparent); got != want {
				t.Errorf("traceparent %q, want the original's %q", got, want)
			}
			var dl imv1.DeadLetter
			if err := proto.Unmarshal(r.Value, &dl); err != nil {
				t.Fatalf("does not parse: %v", err)
			}
			if dl.Code != imv1.ErrorCode_ERROR_CODE_INVALID_FIELD || dl.Service != "sequencer" || dl.Reason == "" ||
				dl.OriginalTopic != c.rec.Topic || dl.OriginalPartition != 3 || dl.OriginalOffset != 41 ||
				dl.OriginalTsMs != 1_600_000_000_000 || dl.DeadLetteredTsMs != at.UnixMilli() {
				t.Errorf("dead letter %v", &dl)
			}
			requireSame(t, Original(&dl), c.rec)
		})
	}
}

// requireSame fails unless got has want's topic, key, value and headers,
// byte for byte.
func requireSame(t *testing.T, got, want *kgo.Record) {
	t.Helper()
	if got.Topic != want.Topic || !bytes.Equal(got.Key, want.Key) || !bytes.Equal(got.Value, want.Value) {
		t.Errorf("original %s %q %q, want %s %q %q", got.Topic, got.Key, got.Value, want.Topic, want.Key, want.Value)
	}
	if len(got.Headers) != len(want.Headers) {
		t.Fatalf("headers %q, want %q", got.Headers, want.Headers)
	}
	for i := range got.Headers {
		if got.Headers[i].Key != want.Headers[i].Key || !bytes.Equal(got.Headers[i].Value, want.Headers[i].Value) {
			t.Errorf("header %d: %q, want %q", i, got.Headers[i], want.Headers[i])
		}
	}
}

// FuzzRecord holds Record to its promise for any record: it builds, it
// parses, and Original gives the record back byte for byte.
func FuzzRecord(f *testing.F) {
	f.Add([]byte("s-1"), []byte("v"), "seqflow-event-type", []byte("message"), "reason")
	f.Add([]byte("\xff"), []byte("\xc3\x28"), "\xff\xfe", []byte("\xed\xa0\x80"), "\xff")
	f.Fuzz(func(t *testing.T, key, value []byte, hkey string, hvalue []byte, reason string) {
		orig := &kgo.Record{Topic: "t.im.uplink.v1", Key: key, Value: value,
			Headers: []kgo.RecordHeader{{Key: hkey, Value: hvalue}, {Key: reason, Value: key}}}
		r, err := Record("t.im.deadletter.v1", "persister", orig, &Error{Code: imv1.ErrorCode_ERROR_CODE_UNDECODABLE, Reason: reason}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		var dl imv1.DeadLetter
		if err := proto.Unmarshal(r.Value, &dl); err != nil {
			t.Fatalf("does not parse: %v", err)
		}
		requireSame(t, Original(&dl), orig)
	})
}

func TestErrorf(t *testing.T) {
	e := Errorf(imv1.ErrorCode_ERROR_CODE_TOO_LARGE, "uplink is %d bytes, limit %d", 9, 8)
	if e.Error() != "ERROR_CODE_TOO_LARGE: uplink is 9 bytes, limit 8" {
		t.Errorf("Error() = %q", e)
	}
}

func ExampleOriginal() {
	orig := &kgo.Record{Topic: "im.uplink.v1", Key: []byte("s-1"), Value: []byte("\xff"),
		Headers: []kgo.RecordHeader{{Key: "\xfe", Value: []byte("x")}}}
	r, err := Record("im.deadletter.v1", "sequencer", orig, Errorf(imv1.ErrorCode_ERROR_CODE_UNDECODABLE, "not an uplink"), time.Now())
	if err != nil {
		fmt.Println(err)
		return
	}
	var dl imv1.DeadLetter
	if err := proto.Unmarshal(r.Value, &dl); err != nil {
		fmt.Println(err)
		return
	}
	again := Original(&dl)
	fmt.Printf("%s %q %q %q\n", again.Topic, again.Key, again.Value, again.Headers[0].Key)
	// Output: im.uplink.v1 "s-1" "\xff" "\xfe"
}
