package store

import (
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/schemas/imv1"
)

// Event kinds, the messages.kind column.
const (
	KindMessage       = "message"
	KindSessionCreate = "session_create"
	KindMembership    = "membership"
	KindEdit          = "edit"
	KindRecall        = "recall"
	// KindGroup is a group governance event (imv1.GroupChange); its body
	// column holds the GroupChange in protobuf wire form.
	KindGroup = "group"
)

// Membership ops, the messages.member_op column. Group events that change
// roles carry them too, for the session_members projection: OpRolePrefix
// plus the role for its member_ids, or OpTransfer for member_ids [new
// owner, old owner].
const (
	OpAdd        = "add"
	OpRemove     = "remove"
	OpRolePrefix = "role:"
	OpTransfer   = "transfer"
)

// PreviewBytes bounds sessions.last_preview.
const PreviewBytes = 120

// Row is what the messages table holds for one sequenced event as it
// arrived, before later edits or recalls change its current state. RowOf is
// the one mapping from event to row: the persister writes it and
// `seqflow verify` compares the table against it.
type Row struct {
	SessionID      string
	Seq            int64
	MsgID          int64
	ClientMsgID    string
	SenderUserID   string
	SenderDeviceID string
	Kind           string
	ContentType    string
	Body           []byte
	BodyKeyID      int64    // message, edit: the data key Body is sealed with; 0: plaintext
	TargetSeq      int64    // edit, recall; 0 otherwise
	MemberOp       string   // membership: add/remove; session_create: add
	MemberIDs      []string // membership users; session_create members plus the sender
	SessionKind    string   // session_create: direct/group
	Title          string   // session_create
	ServerTsMs     int64
	GatewayTsMs    int64
	Partition      int32 // where the event is in im.sequenced.v1
	Offset         int64
}

// RowOf maps a sequenced event found at partition/offset to its row, or
// says why the store cannot hold it.
func RowOf(ev *imv1.SequencedEvent, partition int32, offset int64) (Row, error) {
	r := Row{
		SessionID: ev.GetSessionId(), Seq: ev.GetSeq(), MsgID: ev.GetMsgId(), ClientMsgID: ev.GetClientMsgId(),
		SenderUserID: ev.GetSenderUserId(), SenderDeviceID: ev.GetSenderDeviceId(),
		ServerTsMs: ev.GetServerTsMs(), GatewayTsMs: ev.GetGatewayTsMs(), Partition: partition, Offset: offset,
	}
	if r.SessionID == "" {
		return r, invalid("session_id is empty")
	}
	if r.Seq <= 0 {
		return r, invalid("seq %d is not positive", r.Seq)
	}
	if r.MsgID == 0 {
		return r, invalid("msg_id is 0")
	}
	switch p := ev.GetPayload().(type) {
	case *imv1.SequencedEvent_Message:
		r.Kind, r.ContentType, r.Body, r.BodyKeyID = KindMessage, p.Message.GetType(), nonNil(p.Message.GetBody()), p.Message.GetKeyId()
	case *imv1.SequencedEvent_SessionCreate:
		r.Kind, r.MemberOp, r.Title = KindSessionCreate, OpAdd, p.SessionCreate.GetTitle()
		r.SessionKind = sessionKind(p.SessionCreate.GetKind())
		r.MemberIDs = withSender(p.SessionCreate.GetMemberUserIds(), r.SenderUserID)
		if st := p.SessionCreate.GetSettings(); st != nil {
			// A group's initial settings, in the body column.
			b, err := deterministic.Marshal(st)
			if err != nil {
				return r, invalid("group settings: %v", err)
			}
			r.Body = b
		}
	case *imv1.SequencedEvent_Group:
		b, err := deterministic.Marshal(p.Group)
		if err != nil {
			return r, invalid("group change: %v", err)
		}
		r.Kind, r.Body = KindGroup, nonNil(b)
		switch op := p.Group.GetOp().(type) {
		case *imv1.GroupChange_Join_:
			r.MemberOp, r.MemberIDs = OpAdd, []string{r.SenderUserID}
		case *imv1.GroupChange_SetRole_:
			role := "member"
			if op.SetRole.GetRole() == imv1.GroupRole_GROUP_ROLE_ADMIN {
				role = "admin"
			}
			r.MemberOp, r.MemberIDs = OpRolePrefix+role, []string{op.SetRole.GetUserId()}
		case *imv1.GroupChange_TransferOwnership_:
			r.MemberOp, r.MemberIDs = OpTransfer, []string{op.TransferOwnership.GetUserId(), r.SenderUserID}
		}
	case *imv1.SequencedEvent_Membership:
		r.Kind = KindMembership
		switch p.Membership.GetOp() {
		case imv1.MembershipChange_OP_ADD:
			r.MemberOp = OpAdd
		case imv1.MembershipChange_OP_REMOVE:
			r.MemberOp = OpRemove
		default:
			return r, invalid("membership op %v", p.Membership.GetOp())
		}
		if len(p.Membership.GetUserIds()) == 0 {
			return r, invalid("membership change names no users")
		}
		r.MemberIDs = dedupe(p.Membership.GetUserIds())
	case *imv1.SequencedEvent_Edit:
		r.Kind, r.TargetSeq = KindEdit, p.Edit.GetTargetSeq()
		r.ContentType, r.Body, r.BodyKeyID = p.Edit.GetContent().GetType(), nonNil(p.Edit.GetContent().GetBody()), p.Edit.GetContent().GetKeyId()
	case *imv1.SequencedEvent_Recall:
		r.Kind, r.TargetSeq = KindRecall, p.Recall.GetTargetSeq()
	default:
		return r, invalid("event has no payload")
	}
	if (r.Kind == KindEdit || r.Kind == KindRecall) && (r.TargetSeq <= 0 || r.TargetSeq >= r.Seq) {
		return r, invalid("%s at seq %d targets seq %d", r.Kind, r.Seq, r.TargetSeq)
	}
	for _, f := range []struct{ name, v string }{
		{"session_id", r.SessionID}, {"client_msg_id", r.ClientMsgID}, {"sender_user_id", r.SenderUserID},
		{"sender_device_id", r.SenderDeviceID}, {"content type", r.ContentType}, {"title", r.Title},
	} {
		if !pgText(f.v) {
			return r, invalid("%s is not valid UTF-8 without NUL", f.name)
		}
	}
	for _, u := range r.MemberIDs {
		if u == "" || !pgText(u) {
			return r, invalid("member user id %q is empty or not valid UTF-8 without NUL", u)
		}
	}
	return r, nil
}

// deterministic encodes the protobuf kept in a row's body, so the row of
// an event is the same bytes every time (seqflow verify compares them).
var deterministic = proto.MarshalOptions{Deterministic: true}

// Preview is the session-list text of a message: the start of a text body
// cut on a UTF-8 boundary, or the content type in brackets.
func Preview(contentType string, body []byte) string {
	return previewOf(contentType, body, 0)
}

// SealedPreview is what the sessions table holds as the preview of a
// sealed body: no content. The gateway, which holds the keys, opens the
// message at last_preview_seq instead (producer-gw, changes).
const SealedPreview = ""

func previewOf(contentType string, body []byte, keyID int64) string {
	if keyID != 0 {
		return SealedPreview
	}
	if contentType != "text" {
		return "[" + contentType + "]"
	}
	if len(body) > PreviewBytes {
		body = body[:PreviewBytes]
		for len(body) > 0 && !utf8.Valid(body) {
			body = body[:len(body)-1]
		}
	}
	s := strings.ToValidUTF8(string(body), "")
	return strings.ReplaceAll(s, "\x00", "")
}

func pgText(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

func sessionKind(k imv1.SessionKind) string {
	switch k {
	case imv1.SessionKind_SESSION_KIND_DIRECT:
		return "direct"
	case imv1.SessionKind_SESSION_KIND_GROUP:
		return "group"
	}
	return ""
}

// withSender returns members plus sender, each once, in first-seen order.
func withSender(members []string, sender string) []string {
	return dedupe(append(append([]string(nil), members...), sender))
}

func dedupe(ids []string) []string {
	seen := make(map[string]bool, len(ids))
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// ReadCursor is a user's read position in a session (from a ReadReceipt).
type ReadCursor struct {
	SessionID, UserID string
	ReadSeq           int64
}

// DeliveryCursor is a device's delivered position (from a DeliveryReceipt).
type DeliveryCursor struct {
	SessionID, UserID, DeviceID string
	DeliveredSeq                int64
}

// ReadOf validates a read receipt.
func ReadOf(r *imv1.ReadReceipt) (ReadCursor, error) {
	c := ReadCursor{SessionID: r.GetSessionId(), UserID: r.GetUserId(), ReadSeq: r.GetReadSeq()}
	if c.SessionID == "" || c.UserID == "" || !pgText(c.SessionID) || !pgText(c.UserID) || c.ReadSeq < 0 {
		return c, invalid("read receipt needs session_id, user_id (UTF-8, no NUL) and read_seq >= 0")
	}
	return c, nil
}

// DeliveryOf validates a delivery receipt.
func DeliveryOf(r *imv1.DeliveryReceipt) (DeliveryCursor, error) {
	c := DeliveryCursor{SessionID: r.GetSessionId(), UserID: r.GetUserId(), DeviceID: r.GetDeviceId(), DeliveredSeq: r.GetDeliveredSeq()}
	if c.SessionID == "" || c.UserID == "" || !pgText(c.SessionID) || !pgText(c.UserID) || !pgText(c.DeviceID) || c.DeliveredSeq < 0 {
		return c, invalid("delivery receipt needs session_id, user_id, device_id (UTF-8, no NUL) and delivered_seq >= 0")
	}
	return c, nil
}

// Key identifies an event: a session and a seq.
type Key struct {
	SessionID string
	Seq       int64
}
