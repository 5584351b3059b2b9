package wire

import (
	"strconv"

	"github.com/seqflow/seqflow/schemas/imv1"
)

// Event kinds, the "kind" of a Message; they match the event-type header.
const (
	KindMessage       = "message"
	KindSessionCreate = "session_create"
	KindMembership    = "membership"
	KindEdit          = "edit"
	KindRecall        = "recall"
)

// FromEvent renders a sequenced event for clients.
func FromEvent(ev *imv1.SequencedEvent) Message {
	m := Message{
		SessionID: ev.SessionId, Seq: ev.Seq, MsgID: strconv.FormatInt(ev.MsgId, 10), ClientMsgID: ev.ClientMsgId,
		SenderUserID: ev.SenderUserId, SenderDeviceID: ev.SenderDeviceId, ServerTs: ev.ServerTsMs,
	}
	switch p := ev.Payload.(type) {
	case *imv1.SequencedEvent_Message:
		m.Kind, m.Type, m.Body = KindMessage, p.Message.GetType(), BodyJSON(p.Message.GetType(), p.Message.GetBody())
	case *imv1.SequencedEvent_SessionCreate:
		m.Kind, m.Title, m.UserIDs = KindSessionCreate, p.SessionCreate.GetTitle(), p.SessionCreate.GetMemberUserIds()
		m.SessionKind = KindGroup
		if p.SessionCreate.GetKind() == imv1.SessionKind_SESSION_KIND_DIRECT {
			m.SessionKind = KindDirect
		} else if s := CreateSettings(p.SessionCreate.GetSettings()); s != nil {
			m.Group = &GroupEvent{Settings: s}
		}
	case *imv1.SequencedEvent_Membership:
		m.Kind, m.UserIDs = KindMembership, p.Membership.GetUserIds()
		m.Action = ActionAdd
		if p.Membership.GetOp() == imv1.MembershipChange_OP_REMOVE {
			m.Action = ActionRemove
		}
	case *imv1.SequencedEvent_Edit:
		m.Kind, m.TargetSeq = KindEdit, p.Edit.GetTargetSeq()
		m.Type, m.Body = p.Edit.GetContent().GetType(), BodyJSON(p.Edit.GetContent().GetType(), p.Edit.GetContent().GetBody())
	case *imv1.SequencedEvent_Recall:
		m.Kind, m.TargetSeq = KindRecall, p.Recall.GetTargetSeq()
	case *imv1.SequencedEvent_Group:
		m.Kind = KindGroupChange
		m.Action, m.Group = FromGroupChange(p.Group)
		if m.Action == ActionJoin {
			m.UserIDs = []string{ev.SenderUserId}
		}
	}
	return m
}
