// Package schemas documents and tests the wire contract of seqflow: the
// Protocol Buffers in proto/ (generated Go in imv1) and the record
// conventions in README.md. Header names are constants here so that every
// producer and consumer spells them the same way.
package schemas

// Kafka record headers every seqflow producer sets.
const (
	// HeaderEventType names the event, e.g. "message", "membership".
	HeaderEventType = "seqflow-event-type"
	// HeaderSchema is the fully qualified protobuf message name of the value.
	HeaderSchema = "seqflow-schema"
	// HeaderSchemaVersion is the schema package version ("v1").
	HeaderSchemaVersion = "seqflow-schema-version"
	// HeaderProducer is the producing service ("producer-gw", "sequencer", ...).
	HeaderProducer = "seqflow-producer"
	// HeaderInstance is the producing instance (e.g. the sequencer's
	// instance ID), for audits and fencing tests.
	HeaderInstance = "seqflow-instance"
	// HeaderTraceparent is the W3C trace context, carried end to end.
	HeaderTraceparent = "traceparent"
	// HeaderTracestate is the optional W3C tracestate companion.
	HeaderTracestate = "tracestate"
)

// SchemaVersion is the version of the imv1 package.
const SchemaVersion = "v1"
