package main

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/replay"
	"github.com/seqflow/seqflow/schemas"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// topicSchema is what the records of one topic hold: one message for every
// record (all), or a message per seqflow-event-type header (byType) on a
// topic that carries several.
type topicSchema struct {
	all    protoreflect.MessageType
	byType map[string]protoreflect.MessageType
}

func msgType(m interface{ ProtoReflect() protoreflect.Message }) protoreflect.MessageType {
	return m.ProtoReflect().Type()
}

// topicSchemas are the topics of eventlog.Topics and the replay
// definitions (names without prefix) and their values, as
// schemas/README.md's table says. A replay topic's records carry their
// seqflow-schema header (the copied events keep the source's headers; the
// end marker has its own), so they need no entry.
var topicSchemas = map[string]topicSchema{
	eventlog.TopicUplink:    {all: msgType(&imv1.Uplink{})},
	eventlog.TopicSequenced: {all: msgType(&imv1.SequencedEvent{})},
	eventlog.TopicDuplicates: {byType: map[string]protoreflect.MessageType{
		"duplicate": msgType(&imv1.DuplicateAck{}),
		"refusal":   msgType(&imv1.Refusal{}),
	}},
	eventlog.TopicReceipts: {byType: map[string]protoreflect.MessageType{
		"read_receipt":     msgType(&imv1.ReadReceipt{}),
		"delivery_receipt": msgType(&imv1.DeliveryReceipt{}),
	}},
	eventlog.TopicOffline:    {all: msgType(&imv1.OfflineNotification{})},
	eventlog.TopicDeadLetter: {all: msgType(&imv1.DeadLetter{})},
	replay.TopicDefinitions:  {all: msgType(&imv1.ReplayDefinition{})}, // written without headers
}

// schemaPackage is the protobuf package whose messages a seqflow-schema
// header may name.
const schemaPackage = "seqflow.im.v1"

// recordSchema returns the message type of r's value; topic is the name
// without prefix. A topic of eventlog.Topics decides by its table (on
// im.receipts.v1 the event-type header tells a read receipt from a
// delivery receipt); any other topic (a replay topic, say) by the
// seqflow-schema header, which must name a message of seqflow.im.v1. When
// a record carries a seqflow-schema header, it must agree: a record whose
// headers contradict each other is refused rather than decoded as the
// wrong message.
func recordSchema(topic string, r *kgo.Record) (protoreflect.MessageType, error) {
	et := eventlog.Header(r, schemas.HeaderEventType)
	named := eventlog.Header(r, schemas.HeaderSchema)
	ts, known := topicSchemas[topic]
	var mt protoreflect.MessageType
	switch {
	case known && ts.all != nil:
		mt = ts.all
	case known:
		if mt = ts.byType[et]; mt == nil {
			return nil, fmt.Errorf("event type %q is none of %s's (%s header)", et, topic, schemas.HeaderEventType)
		}
	default:
		var err error
		if mt, err = schemaByName(named); err != nil {
			return nil, err
		}
	}
	if named != "" && named != string(mt.Descriptor().FullName()) {
		return nil, fmt.Errorf("%s header says %s, but a %q record on %s is a %s", schemas.HeaderSchema, named, et, topic, mt.Descriptor().FullName())
	}
	return mt, nil
}

// schemaByName finds a message of seqflow.im.v1 by its full name.
func schemaByName(name string) (protoreflect.MessageType, error) {
	if name == "" {
		return nil, fmt.Errorf("no %s header to tell the record's message by", schemas.HeaderSchema)
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(name))
	if err != nil || mt.Descriptor().ParentFile().Package() != schemaPackage {
		return nil, fmt.Errorf("%s header names %q, not a message of %s", schemas.HeaderSchema, name, schemaPackage)
	}
	return mt, nil
}
