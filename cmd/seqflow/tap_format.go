package main

import (
	"encoding/base64"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/schemas"
)

// The output formats of `seqflow tap -format`.
//
// json (the default): one JSON object per line:
//
//	{"topic":…, "partition":…, "offset":…, "timestamp_ms":…, "key":…,
//	 "type":…, "schema":…, "headers":{name: value, …}, "event":{…}}
//
// type is the seqflow-event-type header, schema the full name of the
// message the value was decoded as, event that message: fields under their
// protobuf names, in declaration order, those at their default left out
// (as in protobuf's JSON); 64-bit integers as JSON numbers (exact: read
// them as 64-bit integers, not as doubles, which JavaScript's JSON.parse
// does); enums by name. Every bytes value (a message body, a dead letter's
// original record, the record key and header values too) is written as
// text when it is text, meaning valid UTF-8 without control characters
// other than tab, CR and LF; otherwise as standard base64 with padding,
// and a sibling field NAME_encoding set to "base64" says so: "body":"aGk=",
// "body_encoding":"base64". A repeated or map bytes field is all text or
// all base64, with one marker. A record whose value cannot be decoded
// gets "error" (why) and "value" (the value, by the same rule) instead of
// "event".
//
// protojson: per line, protobuf's canonical JSON of a google.protobuf.Any
// holding the record's message: {"@type":"type.googleapis.com/
// seqflow.im.v1.SequencedEvent", …the message's fields…}. The @type tells
// the messages of a topic apart (read and delivery receipts); fields are
// under their JSON names, int64 as strings, bytes as base64. Any protobuf
// JSON parser with seqflow's descriptors reads it back. A record that
// cannot be decoded is left out, with a warning on stderr.
//
// raw: each record's value as it is in Kafka, preceded by its length as
// an unsigned varint: protobuf's delimited format (Go's
// protodelim.UnmarshalFrom, Java's parseDelimitedFrom read one message
// after another). Nothing else is written: filter a topic of several
// messages with -type.
const (
	formatJSON      = "json"
	formatProtoJSON = "protojson"
	formatRaw       = "raw"
)

// tapFormats maps -format to its encoder. Each appends one record, decoded
// as mt (nil with err set when it could not be), to dst.
var tapFormats = map[string]func(dst []byte, r *kgo.Record, mt protoreflect.MessageType, schemaErr error) ([]byte, error){
	formatJSON:      appendJSONRecord,
	formatProtoJSON: appendProtoJSONRecord,
	formatRaw:       appendRawRecord,
}

// skipError says a record has no output in the chosen format, and why.
type skipError struct{ why error }

func (e *skipError) Error() string { return e.why.Error() }

func appendRawRecord(dst []byte, r *kgo.Record, _ protoreflect.MessageType, _ error) ([]byte, error) {
	dst = protowire.AppendVarint(dst, uint64(len(r.Value)))
	return append(dst, r.Value...), nil
}

func appendProtoJSONRecord(dst []byte, r *kgo.Record, mt protoreflect.MessageType, schemaErr error) ([]byte, error) {
	if schemaErr != nil {
		return dst, &skipError{schemaErr}
	}
	m := mt.New().Interface()
	if err := proto.Unmarshal(r.Value, m); err != nil {
		return dst, &skipError{fmt.Errorf("not a %s: %w", mt.Descriptor().FullName(), err)}
	}
	a, err := anypb.New(m)
	if err != nil {
		return dst, &skipError{err}
	}
	b, err := protojson.MarshalOptions{}.MarshalAppend(dst, a)
	if err != nil {
		return dst, &skipError{err}
	}
	return append(b, '\n'), nil
}

func appendJSONRecord(dst []byte, r *kgo.Record, mt protoreflect.MessageType, schemaErr error) ([]byte, error) {
	dst = append(dst, `{"topic":`...)
	dst = appendQuoted(dst, r.Topic)
	dst = append(dst, `,"partition":`...)
	dst = strconv.AppendInt(dst, int64(r.Partition), 10)
	dst = append(dst, `,"offset":`...)
	dst = strconv.AppendInt(dst, r.Offset, 10)
	dst = append(dst, `,"timestamp_ms":`...)
	dst = strconv.AppendInt(dst, r.Timestamp.UnixMilli(), 10)
	if r.Key != nil {
		dst = appendBytesField(dst, ",", "key", r.Key)
	}
	dst = append(dst, `,"type":`...)
	dst = appendQuoted(dst, eventlog.Header(r, schemas.HeaderEventType))
	if mt != nil {
		dst = append(dst, `,"schema":`...)
		dst = appendQuoted(dst, string(mt.Descriptor().FullName()))
	}
	if len(r.Headers) > 0 {
		dst = append(dst, `,"headers":{`...)
		seen := map[string]bool{}
		sep := ""
		for _, h := range r.Headers {
			if seen[h.Key] { // the first one, as eventlog.Header reads it
				continue
			}
			seen[h.Key] = true
			dst = appendBytesField(dst, sep, h.Key, h.Value)
			sep = ","
		}
		dst = append(dst, '}')
	}
	err := schemaErr
	if err == nil {
		m := mt.New()
		if err = proto.Unmarshal(r.Value, m.Interface()); err == nil {
			dst = append(dst, `,"event":`...)
			dst = appendMessage(dst, m)
			return append(dst, "}\n"...), nil
		}
		err = fmt.Errorf("not a %s: %w", mt.Descriptor().FullName(), err)
	}
	dst = append(dst, `,"error":`...)
	dst = appendQuoted(dst, err.Error())
	dst = appendBytesField(dst, ",", "value", r.Value)
	return append(dst, "}\n"...), nil
}

// isText reports whether b is valid UTF-8 without control characters but
// tab, CR and LF: what the json format writes as a string. A protobuf
// value (a dead letter's original_value) nearly always has a length byte
// below 0x20, so it comes out in base64 rather than as garbled text.
func isText(b []byte) bool {
	for len(b) > 0 {
		c, n := utf8.DecodeRune(b)
		if c == utf8.RuneError && n <= 1 {
			return false
		}
		if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f {
			return false
		}
		b = b[n:]
	}
	return true
}

// appendQuoted appends s as a JSON string. s is valid UTF-8 but for a
// header name (protobuf strings are, bytes go through isText first).
func appendQuoted(dst []byte, s string) []byte {
	out, _ := jsontext.AppendQuote(dst, s) // fails only on invalid UTF-8, which it writes as U+FFFD
	return out
}

// appendBytesField appends sep, "name": and b as text, or in base64 with
// the "name_encoding":"base64" marker.
func appendBytesField(dst []byte, sep, name string, b []byte) []byte {
	dst = append(dst, sep...)
	dst = appendQuoted(dst, name)
	dst = append(dst, ':')
	if isText(b) {
		return appendQuoted(dst, string(b))
	}
	dst = appendBase64(dst, b)
	dst = append(dst, ',')
	dst = appendQuoted(dst, name+"_encoding")
	return append(dst, `:"base64"`...)
}

func appendBase64(dst []byte, b []byte) []byte {
	dst = append(dst, '"')
	dst = base64.StdEncoding.AppendEncode(dst, b)
	return append(dst, '"')
}

// appendMessage appends m as the json format's event object.
func appendMessage(dst []byte, m protoreflect.Message) []byte {
	dst = append(dst, '{')
	sep := ""
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if !m.Has(fd) {
			continue
		}
		v := m.Get(fd)
		name := string(fd.Name())
		switch {
		case fd.IsList():
			l := v.List()
			text := fd.Kind() != protoreflect.BytesKind || allText(l.Len(), func(i int) []byte { return l.Get(i).Bytes() })
			dst = append(dst, sep...)
			dst = appendQuoted(dst, name)
			dst = append(dst, ":["...)
			for j := 0; j < l.Len(); j++ {
				if j > 0 {
					dst = append(dst, ',')
				}
				dst = appendValue(dst, fd, l.Get(j), text)
			}
			dst = append(dst, ']')
			dst = appendMarker(dst, name, text)
		case fd.IsMap():
			mp := v.Map()
			vd := fd.MapValue()
			text := vd.Kind() != protoreflect.BytesKind || mapText(mp)
			dst = append(dst, sep...)
			dst = appendQuoted(dst, name)
			dst = append(dst, ":{"...)
			msep := ""
			mp.Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				dst = append(dst, msep...)
				dst = appendQuoted(dst, k.String())
				dst = append(dst, ':')
				dst = appendValue(dst, vd, mv, text)
				msep = ","
				return true
			})
			dst = append(dst, '}')
			dst = appendMarker(dst, name, text)
		case fd.Kind() == protoreflect.BytesKind:
			dst = appendBytesField(dst, sep, name, v.Bytes())
		default:
			dst = append(dst, sep...)
			dst = appendQuoted(dst, name)
			dst = append(dst, ':')
			dst = appendValue(dst, fd, v, true)
		}
		sep = ","
	}
	return append(dst, '}')
}

func allText(n int, get func(int) []byte) bool {
	for i := 0; i < n; i++ {
		if !isText(get(i)) {
			return false
		}
	}
	return true
}

func mapText(m protoreflect.Map) bool {
	text := true
	m.Range(func(_ protoreflect.MapKey, v protoreflect.Value) bool {
		text = isText(v.Bytes())
		return text
	})
	return text
}

func appendMarker(dst []byte, name string, text bool) []byte {
	if text {
		return dst
	}
	dst = append(dst, ',')
	dst = appendQuoted(dst, name+"_encoding")
	return append(dst, `:"base64"`...)
}

// appendValue appends one singular value of field fd; text says how a
// bytes value is written.
func appendValue(dst []byte, fd protoreflect.FieldDescriptor, v protoreflect.Value, text bool) []byte {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return strconv.AppendBool(dst, v.Bool())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return strconv.AppendInt(dst, v.Int(), 10)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return strconv.AppendUint(dst, v.Uint(), 10)
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		f := v.Float()
		switch {
		case math.IsNaN(f):
			return append(dst, `"NaN"`...)
		case math.IsInf(f, 1):
			return append(dst, `"Infinity"`...)
		case math.IsInf(f, -1):
			return append(dst, `"-Infinity"`...)
		}
		bits := 64
		if fd.Kind() == protoreflect.FloatKind {
			bits = 32
		}
		return strconv.AppendFloat(dst, f, 'g', -1, bits)
	case protoreflect.StringKind:
		return appendQuoted(dst, v.String())
	case protoreflect.BytesKind:
		if text {
			return appendQuoted(dst, string(v.Bytes()))
		}
		return appendBase64(dst, v.Bytes())
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return appendQuoted(dst, string(ev.Name()))
		}
		return strconv.AppendInt(dst, int64(v.Enum()), 10)
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return appendMessage(dst, v.Message())
	}
	return append(dst, "null"...)
}
