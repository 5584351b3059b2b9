package eventlog

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seqflow/seqflow/schemas"
)

// Headers builds the standard headers of a record: event type, schema name
// and version, producing service, and the W3C trace context when known.
func Headers(eventType, schemaName, producer, traceparent string) []kgo.RecordHeader {
	h := []kgo.RecordHeader{
		{Key: schemas.HeaderEventType, Value: []byte(eventType)},
		{Key: schemas.HeaderSchema, Value: []byte(schemaName)},
		{Key: schemas.HeaderSchemaVersion, Value: []byte(schemas.SchemaVersion)},
		{Key: schemas.HeaderProducer, Value: []byte(producer)},
	}
	if traceparent != "" {
		h = append(h, kgo.RecordHeader{Key: schemas.HeaderTraceparent, Value: []byte(traceparent)})
	}
	return h
}

// Header returns the value of the first header named key, or "".
func Header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}
