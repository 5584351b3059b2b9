package main

import (
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/deadletter"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// limits on an uplink's fields; the gateway enforces tighter ones, these
// protect the log from anything else that writes the uplink topic.
const (
	maxIDLen      = 128
	maxMembers    = 10_000
	maxTypeLen    = 64
	maxTitleBytes = 512
)

// decodeUplink parses and validates one uplink record value. The record
// of an uplink it refuses goes to the dead-letter topic, with the code and
// reason of the *deadletter.Error it returns.
//
// It decodes with the generated UnmarshalVT (a third of proto.Unmarshal's
// CPU, the largest part of a batch's preparation), and keeps that result
// only for a value in canonical form: no unknown field anywhere and exactly
// as long as its re-encoding (SizeVT). UnmarshalVT checks less than
// proto.Unmarshal (unknown fields it keeps without validating them, which
// the event would copy; field numbers past 2^29; overlong varints), and
// every such input is longer than canonical or has unknown fields, so
// anything else is decoded again by proto.Unmarshal, which decides.
// proto3 strings are checked for UTF-8 by invalidUTF8, as proto.Unmarshal
// would (TestDecodeUplinkRefusesInvalidUTF8InEveryString keeps it complete
// as the schema grows); FuzzDecodeUplink holds the result to
// proto.Unmarshal's.
func decodeUplink(key, value []byte, maxBytes int) (*imv1.Uplink, *deadletter.Error) {
	if len(value) > maxBytes {
		return nil, deadletter.Errorf(imv1.ErrorCode_ERROR_CODE_TOO_LARGE, "uplink is %d bytes, limit %d", len(value), maxBytes)
	}
	var u imv1.Uplink
	if err := u.UnmarshalVT(value); err != nil || u.SizeVT() != len(value) || hasUnknown(&u) {
		u = imv1.Uplink{}
		if err := proto.Unmarshal(value, &u); err != nil {
			return nil, deadletter.Errorf(imv1.ErrorCode_ERROR_CODE_UNDECODABLE, "not a seqflow.im.v1.Uplink: %v", err)
		}
	}
	if field := invalidUTF8(&u); field != "" {
		return nil, deadletter.Errorf(imv1.ErrorCode_ERROR_CODE_UNDECODABLE, "not a seqflow.im.v1.Uplink: string field %s is not valid UTF-8", field)
	}
	for _, f := range []struct{ name, v string }{
		{"session_id", u.SessionId}, {"client_msg_id", u.ClientMsgId}, {"sender_user_id", u.SenderUserId},
	} {
		if f.v == "" {
			return nil, deadletter.Errorf(imv1.ErrorCode_ERROR_CODE_MISSING_FIELD, "%s is empty", f.name)
		}
		if len(f.v) > maxIDLen || !utf8.ValidString(f.v) {
			return nil, deadletter.Errorf(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "%s must be valid UTF-8 of at most %d bytes", f.name, maxIDLen)
		}
	}
	if string(key) != u.SessionId {
		return nil, deadletter.Errorf(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "record key %q is not the session_id %q: the uplink would break session stickiness", truncate(key), u.SessionId)
	}
	switch c := u.Command.(type) {
	case *imv1.Uplink_Message:
		if c.Message.GetType() == "" || len(c.Message.GetType()) > maxTypeLen {
			return nil, deadletter.Errorf(imv1.ErrorCode_ERROR_CODE_UNKNOWN_TYPE, "message type must be 1..%d bytes", maxTypeLen)
		}
	case *imv1.Uplink_SessionCreate:
		if len(c.SessionCreate.GetMemberUserIds()) == 0 || len(c.SessionCreate.GetMemberUserIds()) > maxMembers {
			return nil, deadletter.Errorf(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "session_create needs 1..%d members", maxMembers)
		}
		if len(c.SessionCreate.GetTitle()) > maxTitleBytes {
			return nil, deadletter.Errorf(imv1.ErrorCode_ERROR_CODE_TOO_LARGE, "title over %d bytes", maxTitleBytes)
		}
	case *imv1.Uplink_Membership:
		if c.Membership.GetOp() == imv1.MembershipChange_OP_UNSPECIFIED || len(c.Membership.GetUserIds()) == 0 || len(c.Membership.GetUserIds()) > maxMembers {
			return nil, deadletter.Errorf(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "membership needs an op and 1..%d user ids", maxMembers)
		}
	case *imv1.Uplink_Edit:
		if c.Edit.GetTargetSeq() <= 0 || c.Edit.GetContent() == nil {
			return nil, deadletter.Errorf(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "edit needs target_seq > 0 and content")
		}
	case *imv1.Uplink_Recall:
		if c.Recall.GetTargetSeq() <= 0 {
			return nil, deadletter.Errorf(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "recall needs target_seq > 0")
		}
	case *imv1.Uplink_Group:
		if err := validGroupChange(c.Group); err != nil {
			return nil, err
		}
	default:
		return nil, deadletter.Errorf(imv1.ErrorCode_ERROR_CODE_UNKNOWN_TYPE, "uplink has no command")
	}
	return &u, nil
}

// hasUnknown reports whether u or any message inside it holds unknown
// fields. TestDecodeUplinkFallsBackOnUnknownFieldsEverywhere keeps it
// complete as the schema grows.
func hasUnknown(u *imv1.Uplink) bool {
	unknown := func(m proto.Message) bool { return len(m.ProtoReflect().GetUnknown()) > 0 }
	if unknown(u) {
		return true
	}
	switch c := u.Command.(type) {
	case *imv1.Uplink_Message:
		return c.Message != nil && unknown(c.Message)
	case *imv1.Uplink_SessionCreate:
		return c.SessionCreate != nil && (unknown(c.SessionCreate) || c.SessionCreate.Settings != nil && unknown(c.SessionCreate.Settings))
	case *imv1.Uplink_Membership:
		return c.Membership != nil && (unknown(c.Membership) || c.Membership.Erasure != nil && unknown(c.Membership.Erasure) ||
			c.Membership.Reclaim != nil && unknown(c.Membership.Reclaim))
	case *imv1.Uplink_Edit:
		return c.Edit != nil && (unknown(c.Edit) || c.Edit.Content != nil && unknown(c.Edit.Content))
	case *imv1.Uplink_Recall:
		return c.Recall != nil && unknown(c.Recall)
	case *imv1.Uplink_Group:
		g := c.Group
		if g == nil {
			return false
		}
		if unknown(g) {
			return true
		}
		var op proto.Message
		switch x := g.Op.(type) {
		case *imv1.GroupChange_Join_:
			op = x.Join
		case *imv1.GroupChange_SetRole_:
			op = x.SetRole
		case *imv1.GroupChange_TransferOwnership_:
			op = x.TransferOwnership
		case *imv1.GroupChange_Mute_:
			op = x.Mute
		case *imv1.GroupChange_MuteAll_:
			op = x.MuteAll
		case *imv1.GroupChange_Edit:
			op = x.Edit
		case *imv1.GroupChange_Dissolve_:
			op = x.Dissolve
		}
		return op != nil && op.ProtoReflect().IsValid() && unknown(op)
	}
	return false
}

// validGroupChange checks a group change's shape; whether the sender may
// make it is the rules' decision (internal/groups), answered by a refusal.
func validGroupChange(g *imv1.GroupChange) *deadletter.Error {
	id := func(name, v string) *deadletter.Error {
		if len(v) > maxIDLen {
			return deadletter.Errorf(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "group %s must be at most %d bytes", name, maxIDLen)
		}
		return nil
	}
	switch x := g.GetOp().(type) {
	case *imv1.GroupChange_Join_:
		return nil
	case *imv1.GroupChange_SetRole_:
		return id("set_role.user_id", x.SetRole.GetUserId())
	case *imv1.GroupChange_TransferOwnership_:
		return id("transfer_ownership.user_id", x.TransferOwnership.GetUserId())
	case *imv1.GroupChange_Mute_:
		return id("mute.user_id", x.Mute.GetUserId())
	case *imv1.GroupChange_MuteAll_, *imv1.GroupChange_Dissolve_:
		return nil
	case *imv1.GroupChange_Edit:
		if x.Edit == nil {
			return deadletter.Errorf(imv1.ErrorCode_ERROR_CODE_MISSING_FIELD, "group edit is empty")
		}
		return nil
	}
	return deadletter.Errorf(imv1.ErrorCode_ERROR_CODE_UNKNOWN_TYPE, "group change has no operation")
}

// invalidUTF8 names the first string field of u that is not valid UTF-8,
// or returns "".
func invalidUTF8(u *imv1.Uplink) string {
	for _, f := range []struct{ name, v string }{
		{"session_id", u.SessionId}, {"client_msg_id", u.ClientMsgId}, {"sender_user_id", u.SenderUserId},
		{"sender_device_id", u.SenderDeviceId}, {"gateway_id", u.GatewayId},
	} {
		if !utf8.ValidString(f.v) {
			return f.name
		}
	}
	switch c := u.Command.(type) {
	case *imv1.Uplink_Message:
		if !utf8.ValidString(c.Message.GetType()) {
			return "message.type"
		}
	case *imv1.Uplink_SessionCreate:
		if !utf8.ValidString(c.SessionCreate.GetTitle()) {
			return "session_create.title"
		}
		if st := c.SessionCreate.GetSettings(); st != nil {
			for _, f := range []struct{ name, v string }{
				{"session_create.settings.description", st.Description}, {"session_create.settings.avatar_url", st.AvatarUrl},
				{"session_create.settings.invite_code", st.InviteCode},
			} {
				if !utf8.ValidString(f.v) {
					return f.name
				}
			}
		}
		for _, id := range c.SessionCreate.GetMemberUserIds() {
			if !utf8.ValidString(id) {
				return "session_create.member_user_ids"
			}
		}
	case *imv1.Uplink_Membership:
		for _, id := range c.Membership.GetUserIds() {
			if !utf8.ValidString(id) {
				return "membership.user_ids"
			}
		}
		if !utf8.ValidString(c.Membership.GetErasure().GetActor()) {
			return "membership.erasure.actor"
		}
		if r := c.Membership.GetReclaim(); !utf8.ValidString(r.GetActor()) || !utf8.ValidString(r.GetReason()) {
			return "membership.reclaim"
		}
	case *imv1.Uplink_Edit:
		if !utf8.ValidString(c.Edit.GetContent().GetType()) {
			return "edit.content.type"
		}
	case *imv1.Uplink_Group:
		g := c.Group
		e := g.GetEdit()
		for _, f := range []struct{ name, v string }{
			{"group.join.invite_code", g.GetJoin().GetInviteCode()}, {"group.set_role.user_id", g.GetSetRole().GetUserId()},
			{"group.transfer_ownership.user_id", g.GetTransferOwnership().GetUserId()}, {"group.mute.user_id", g.GetMute().GetUserId()},
			{"group.edit.title", e.GetTitle()}, {"group.edit.description", e.GetDescription()},
			{"group.edit.avatar_url", e.GetAvatarUrl()}, {"group.edit.invite_code", e.GetInviteCode()},
		} {
			if !utf8.ValidString(f.v) {
				return f.name
			}
		}
	}
	return ""
}

func truncate(b []byte) string {
	if len(b) > 64 {
		b = b[:64]
	}
	return string(b)
}

// eventType names the command for the event-type header.
func eventType(u *imv1.Uplink) string {
	switch u.Command.(type) {
	case *imv1.Uplink_Message:
		return "message"
	case *imv1.Uplink_SessionCreate:
		return "session_create"
	case *imv1.Uplink_Membership:
		return "membership"
	case *imv1.Uplink_Edit:
		return "edit"
	case *imv1.Uplink_Recall:
		return "recall"
	case *imv1.Uplink_Group:
		return "group"
	}
	return "unknown"
}

// eventBuilder builds the events of one partition batch into one reused
// message, for a caller that marshals each before building the next: two
// allocations less per event.
type eventBuilder struct {
	ev         imv1.SequencedEvent
	message    imv1.SequencedEvent_Message
	create     imv1.SequencedEvent_SessionCreate
	membership imv1.SequencedEvent_Membership
	edit       imv1.SequencedEvent_Edit
	recall     imv1.SequencedEvent_Recall
	group      imv1.SequencedEvent_Group
}

// sequenced builds the event of u with its seq and message ID. It is valid
// until the next call.
func (b *eventBuilder) sequenced(u *imv1.Uplink, seq, msgID, nowMs int64, partition int32, offset int64) *imv1.SequencedEvent {
	ev := &b.ev
	ev.Reset()
	ev.SessionId, ev.Seq, ev.MsgId, ev.ClientMsgId = u.SessionId, seq, msgID, u.ClientMsgId
	ev.SenderUserId, ev.SenderDeviceId, ev.GatewayId = u.SenderUserId, u.SenderDeviceId, u.GatewayId
	ev.ServerTsMs, ev.GatewayTsMs, ev.UplinkPartition, ev.UplinkOffset = nowMs, u.GatewayTsMs, partition, offset
	switch c := u.Command.(type) {
	case *imv1.Uplink_Message:
		b.message.Message = c.Message
		ev.Payload = &b.message
	case *imv1.Uplink_SessionCreate:
		b.create.SessionCreate = c.SessionCreate
		ev.Payload = &b.create
	case *imv1.Uplink_Membership:
		b.membership.Membership = c.Membership
		ev.Payload = &b.membership
	case *imv1.Uplink_Edit:
		b.edit.Edit = c.Edit
		ev.Payload = &b.edit
	case *imv1.Uplink_Recall:
		b.recall.Recall = c.Recall
		ev.Payload = &b.recall
	case *imv1.Uplink_Group:
		b.group.Group = c.Group
		ev.Payload = &b.group
	}
	return ev
}
