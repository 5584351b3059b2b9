package export

import (
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/schemas"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// Row is one sequenced event as a row of the export: the columns are
// documented in docs/export.md. A column that does not apply to an event
// type is NULL (body for a recall, target_seq for a message, ...).
//
// The encodings are picked for what the columns hold: dictionaries for the
// low-cardinality strings (session, user, device, gateway, types), delta
// encoding for the numbers that grow along the log (seq, msg_id,
// timestamps, offsets).
type Row struct {
	SessionID      string    `parquet:"session_id,dict"`
	Seq            int64     `parquet:"seq,delta"`
	MsgID          int64     `parquet:"msg_id,delta"`
	ClientMsgID    string    `parquet:"client_msg_id"`
	SenderUserID   string    `parquet:"sender_user_id,dict"`
	SenderDeviceID string    `parquet:"sender_device_id,dict"`
	GatewayID      string    `parquet:"gateway_id,dict"`
	ServerTime     time.Time `parquet:"server_time,timestamp(millisecond)"`
	ServerTsMs     int64     `parquet:"server_ts_ms,delta"`
	GatewayTsMs    int64     `parquet:"gateway_ts_ms,delta"`
	EventType      string    `parquet:"event_type,dict"`
	ContentType    *string   `parquet:"content_type,optional,dict"`
	Body           []byte    `parquet:"body,optional"`
	BodyText       *string   `parquet:"body_text,optional"`
	BodyKeyID      *int64    `parquet:"body_key_id,optional"`
	TargetSeq      *int64    `parquet:"target_seq,optional"`
	MembershipOp   *string   `parquet:"membership_op,optional,dict"`
	MemberUserIDs  []string  `parquet:"member_user_ids,list,optional"`
	SessionKind    *string   `parquet:"session_kind,optional,dict"`
	SessionTitle   *string   `parquet:"session_title,optional"`
	UplinkPart     int32     `parquet:"uplink_partition"`
	UplinkOffset   int64     `parquet:"uplink_offset,delta"`
	KafkaPartition int32     `parquet:"kafka_partition"`
	KafkaOffset    int64     `parquet:"kafka_offset,delta"`
}

// Event types of the event_type column: the payload of the event, named as
// in the seqflow-event-type header, and EventUndecodable for a record
// whose value is not a SequencedEvent.
const (
	EventMessage       = "message"
	EventSessionCreate = "session_create"
	EventMembership    = "membership"
	EventEdit          = "edit"
	EventRecall        = "recall"
	// EventGroup is a group governance event: membership_op holds its
	// operation (join, set_role, transfer_ownership, mute, mute_all, edit,
	// dissolve), member_user_ids the users it names, body the
	// seqflow.im.v1.GroupChange (content_type says so).
	EventGroup       = "group"
	EventUndecodable = "undecodable"
)

// groupChangeType is the content_type of a group event's body.
const groupChangeType = "seqflow.im.v1.GroupChange"

// rowOf turns one record of im.sequenced.v1 into its row. A value that does not decode, or whose strings
// are not UTF-8, becomes an EventUndecodable row carrying the raw value in
// body and the record's time: the export keeps one row per record, so a
// poison record neither stops it nor goes missing from it.
//
// It decodes with UnmarshalVT, which does not check that strings are UTF-8
// (schemas/README.md); the checks here do, since a Parquet STRING that is
// not UTF-8 makes readers such as DuckDB refuse the whole file.
func rowOf(r *kgo.Record) Row {
	ev := &imv1.SequencedEvent{}
	if err := ev.UnmarshalVT(r.Value); err != nil || !validStrings(ev) {
		return undecodable(r)
	}
	row := Row{
		SessionID:      ev.SessionId,
		Seq:            ev.Seq,
		MsgID:          ev.MsgId,
		ClientMsgID:    ev.ClientMsgId,
		SenderUserID:   ev.SenderUserId,
		SenderDeviceID: ev.SenderDeviceId,
		GatewayID:      ev.GatewayId,
		ServerTime:     time.UnixMilli(ev.ServerTsMs).UTC(),
		ServerTsMs:     ev.ServerTsMs,
		GatewayTsMs:    ev.GatewayTsMs,
		UplinkPart:     ev.UplinkPartition,
		UplinkOffset:   ev.UplinkOffset,
		KafkaPartition: r.Partition,
		KafkaOffset:    r.Offset,
	}
	switch p := ev.Payload.(type) {
	case *imv1.SequencedEvent_Message:
		row.EventType = EventMessage
		row.setContent(p.Message)
	case *imv1.SequencedEvent_Edit:
		row.EventType = EventEdit
		row.TargetSeq = ptr(p.Edit.GetTargetSeq())
		row.setContent(p.Edit.GetContent())
	case *imv1.SequencedEvent_Recall:
		row.EventType = EventRecall
		row.TargetSeq = ptr(p.Recall.GetTargetSeq())
	case *imv1.SequencedEvent_Membership:
		row.EventType = EventMembership
		row.MembershipOp = ptr(membershipOps[p.Membership.GetOp()])
		row.MemberUserIDs = nonNil(p.Membership.GetUserIds())
	case *imv1.SequencedEvent_SessionCreate:
		row.EventType = EventSessionCreate
		row.MemberUserIDs = nonNil(p.SessionCreate.GetMemberUserIds())
		row.SessionKind = ptr(sessionKinds[p.SessionCreate.GetKind()])
		row.SessionTitle = ptr(p.SessionCreate.GetTitle())
	case *imv1.SequencedEvent_Group:
		row.EventType = EventGroup
		op, users := groupOp(p.Group, ev.SenderUserId)
		row.MembershipOp, row.MemberUserIDs = ptr(op), users
		if b, err := (proto.MarshalOptions{Deterministic: true}).Marshal(p.Group); err == nil {
			row.ContentType, row.Body = ptr(groupChangeType), nonNil(b)
		}
	default:
		// No payload: an event of a newer schema with a payload this
		// build does not know. The header still names it.
		row.EventType = eventlog.Header(r, schemas.HeaderEventType)
		if row.EventType == "" {
			row.EventType = EventUndecodable
		}
	}
	return row
}

// setContent fills content_type, body and, when the body is UTF-8 and
// not sealed, body_text. A nil content leaves them NULL.
func (row *Row) setContent(c *imv1.MessageContent) {
	if c == nil {
		return
	}
	row.ContentType = ptr(c.Type)
	row.Body = nonNil(c.Body)
	if c.KeyId != 0 {
		// Sealed (docs/erasure.md): the export keeps the ciphertext and
		// its key's ID, so erasing the key shreds the export's copy too;
		// no text.
		row.BodyKeyID = ptr(c.KeyId)
		return
	}
	if utf8.Valid(c.Body) {
		row.BodyText = ptr(string(c.Body))
	}
}

func undecodable(r *kgo.Record) Row {
	return Row{
		ServerTime:     r.Timestamp.UTC(),
		ServerTsMs:     r.Timestamp.UnixMilli(),
		SessionID:      validOr(string(r.Key)),
		EventType:      EventUndecodable,
		Body:           nonNil(r.Value),
		KafkaPartition: r.Partition,
		KafkaOffset:    r.Offset,
	}
}

func validStrings(ev *imv1.SequencedEvent) bool {
	for _, s := range []string{ev.SessionId, ev.ClientMsgId, ev.SenderUserId, ev.SenderDeviceId, ev.GatewayId} {
		if !utf8.ValidString(s) {
			return false
		}
	}
	switch p := ev.Payload.(type) {
	case *imv1.SequencedEvent_Message:
		return utf8.ValidString(p.Message.GetType())
	case *imv1.SequencedEvent_Edit:
		return utf8.ValidString(p.Edit.GetContent().GetType())
	case *imv1.SequencedEvent_Membership:
		return allValid(p.Membership.GetUserIds())
	case *imv1.SequencedEvent_SessionCreate:
		return utf8.ValidString(p.SessionCreate.GetTitle()) && allValid(p.SessionCreate.GetMemberUserIds())
	case *imv1.SequencedEvent_Group:
		_, users := groupOp(p.Group, "")
		return allValid(users)
	}
	return true
}

// groupOp names a group change's operation and the users it names (a
// join: its sender).
func groupOp(g *imv1.GroupChange, sender string) (string, []string) {
	switch op := g.GetOp().(type) {
	case *imv1.GroupChange_Join_:
		if sender == "" {
			return "join", []string{}
		}
		return "join", []string{sender}
	case *imv1.GroupChange_SetRole_:
		return "set_role", []string{op.SetRole.GetUserId()}
	case *imv1.GroupChange_TransferOwnership_:
		return "transfer_ownership", []string{op.TransferOwnership.GetUserId()}
	case *imv1.GroupChange_Mute_:
		return "mute", []string{op.Mute.GetUserId()}
	case *imv1.GroupChange_MuteAll_:
		return "mute_all", []string{}
	case *imv1.GroupChange_Edit:
		return "edit", []string{}
	case *imv1.GroupChange_Dissolve_:
		return "dissolve", []string{}
	}
	return "", []string{}
}

func allValid(ss []string) bool {
	for _, s := range ss {
		if !utf8.ValidString(s) {
			return false
		}
	}
	return true
}

// validOr returns s when it is UTF-8, else "".
func validOr(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return ""
}

var (
	membershipOps = map[imv1.MembershipChange_Op]string{
		imv1.MembershipChange_OP_UNSPECIFIED: "unspecified",
		imv1.MembershipChange_OP_ADD:         "add",
		imv1.MembershipChange_OP_REMOVE:      "remove",
	}
	sessionKinds = map[imv1.SessionKind]string{
		imv1.SessionKind_SESSION_KIND_UNSPECIFIED: "unspecified",
		imv1.SessionKind_SESSION_KIND_DIRECT:      "direct",
		imv1.SessionKind_SESSION_KIND_GROUP:       "group",
	}
)

func ptr[T any](v T) *T { return &v }

// nonNil keeps an empty slice apart from NULL: an empty body or member list
// is a value, NULL means the column does not apply.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
