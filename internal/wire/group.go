package wire

import (
	"github.com/seqflow/seqflow/internal/apierr"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// OpGroup is a group governance command: its Action says which.
const OpGroup = "group"

// KindGroupChange is the event kind of a group governance event (its
// Action says which operation, Group the details).
const KindGroupChange = "group"

// Group actions (op "group"). Adding, removing (kick) and leaving are op
// "members" (actions add, remove, leave).
const (
	ActionJoin     = "join"
	ActionSetRole  = "set_role"
	ActionTransfer = "transfer_ownership"
	ActionMute     = "mute"
	ActionMuteAll  = "mute_all"
	ActionEdit     = "edit"
	ActionDissolve = "dissolve"
	// ActionLeave (op "members") removes the sender.
	ActionLeave = "leave"
)

// Roles.
const (
	RoleOwner  = "owner"
	RoleAdmin  = "admin"
	RoleMember = "member"
)

// Join rules.
const (
	JoinInviteOnly = "invite_only"
	JoinOpen       = "open"
	JoinCode       = "code"
)

// GroupSettings are a group's settings: in create_session (initial
// settings), in a group edit (only the fields present change), and in
// events. InviteCode is only sent, never shown: events say HasInviteCode.
type GroupSettings struct {
	Title            *string `json:"title,omitempty"`
	Description      *string `json:"description,omitempty"`
	AvatarURL        *string `json:"avatar_url,omitempty"`
	JoinRule         *string `json:"join_rule,omitempty"`
	MembersCanInvite *bool   `json:"members_can_invite,omitempty"`
	InviteCode       *string `json:"invite_code,omitempty"`
	// HasInviteCode, in events: whether the change set a code (true) or
	// removed it (false); absent when the code did not change.
	HasInviteCode *bool `json:"has_invite_code,omitempty"`
}

// GroupEvent is what a group governance event carries besides its action.
type GroupEvent struct {
	UserID       string         `json:"user_id,omitempty"`
	Role         string         `json:"role,omitempty"`
	MutedUntilMs int64          `json:"muted_until_ms,omitempty"`
	Muted        *bool          `json:"muted,omitempty"`
	ByInviteCode bool           `json:"by_invite_code,omitempty"`
	Settings     *GroupSettings `json:"settings,omitempty"`
}

func (f *ClientFrame) group(l Limits) *apierr.Error {
	switch f.Action {
	case ActionJoin, ActionDissolve:
	case ActionSetRole:
		if f.Role != RoleAdmin && f.Role != RoleMember {
			return apierr.Newf(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "role %q: want admin or member", clip(f.Role))
		}
		return userID("user_id", f.UserID)
	case ActionTransfer:
		return userID("user_id", f.UserID)
	case ActionMute:
		if f.MutedUntilMs < 0 {
			return apierr.New(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "muted_until_ms must be 0 (unmute) or a Unix time in milliseconds")
		}
		return userID("user_id", f.UserID)
	case ActionMuteAll:
		if f.Muted == nil {
			return apierr.New(imv1.ErrorCode_ERROR_CODE_MISSING_FIELD, "muted is missing (true or false)")
		}
	case ActionEdit:
		if f.Settings == nil {
			return apierr.New(imv1.ErrorCode_ERROR_CODE_MISSING_FIELD, "settings is missing")
		}
		return f.Settings.validate(l, true)
	default:
		return apierr.Newf(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "action %q: want join, set_role, transfer_ownership, mute, mute_all, edit or dissolve", clip(f.Action))
	}
	return nil
}

func (s *GroupSettings) validate(l Limits, edit bool) *apierr.Error {
	if s.HasInviteCode != nil {
		return apierr.New(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "has_invite_code is shown in events; send invite_code")
	}
	if edit && s.Title == nil && s.Description == nil && s.AvatarURL == nil && s.JoinRule == nil && s.MembersCanInvite == nil && s.InviteCode == nil {
		return apierr.New(imv1.ErrorCode_ERROR_CODE_MISSING_FIELD, "settings changes nothing")
	}
	if !edit && s.Title != nil {
		return apierr.New(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "a create's title is the frame's title, not settings.title")
	}
	for _, f := range []struct {
		name string
		v    *string
		max  int
	}{
		{"settings.title", s.Title, l.MaxTitleBytes}, {"settings.description", s.Description, 2048},
		{"settings.avatar_url", s.AvatarURL, 2048}, {"settings.invite_code", s.InviteCode, 128},
	} {
		if f.v != nil && len(*f.v) > f.max {
			return apierr.Newf(imv1.ErrorCode_ERROR_CODE_TOO_LARGE, "%s over %d bytes", f.name, f.max)
		}
	}
	if s.JoinRule != nil {
		if _, ok := joinRules[*s.JoinRule]; !ok {
			return apierr.Newf(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "settings.join_rule %q: want invite_only, open or code", clip(*s.JoinRule))
		}
	}
	return nil
}

var joinRules = map[string]imv1.JoinRule{
	JoinInviteOnly: imv1.JoinRule_JOIN_RULE_INVITE_ONLY, JoinOpen: imv1.JoinRule_JOIN_RULE_OPEN, JoinCode: imv1.JoinRule_JOIN_RULE_CODE,
}

func joinRuleName(r imv1.JoinRule) string {
	switch r {
	case imv1.JoinRule_JOIN_RULE_OPEN:
		return JoinOpen
	case imv1.JoinRule_JOIN_RULE_CODE:
		return JoinCode
	}
	return JoinInviteOnly
}

// Settings turns create_session's settings into the uplink's (nil: none).
func (s *GroupSettings) Settings() *imv1.GroupSettings {
	if s == nil {
		return nil
	}
	out := &imv1.GroupSettings{JoinRule: joinRules[deref(s.JoinRule)]}
	out.Description, out.AvatarUrl, out.InviteCode = deref(s.Description), deref(s.AvatarURL), deref(s.InviteCode)
	if s.MembersCanInvite != nil {
		out.MembersCanInvite = *s.MembersCanInvite
	}
	return out
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// GroupChange turns a validated group frame into the uplink's command.
func (f *ClientFrame) GroupChange() *imv1.GroupChange {
	g := &imv1.GroupChange{}
	switch f.Action {
	case ActionJoin:
		g.Op = &imv1.GroupChange_Join_{Join: &imv1.GroupChange_Join{InviteCode: f.InviteCode}}
	case ActionSetRole:
		role := imv1.GroupRole_GROUP_ROLE_MEMBER
		if f.Role == RoleAdmin {
			role = imv1.GroupRole_GROUP_ROLE_ADMIN
		}
		g.Op = &imv1.GroupChange_SetRole_{SetRole: &imv1.GroupChange_SetRole{UserId: f.UserID, Role: role}}
	case ActionTransfer:
		g.Op = &imv1.GroupChange_TransferOwnership_{TransferOwnership: &imv1.GroupChange_TransferOwnership{UserId: f.UserID}}
	case ActionMute:
		g.Op = &imv1.GroupChange_Mute_{Mute: &imv1.GroupChange_Mute{UserId: f.UserID, UntilMs: f.MutedUntilMs}}
	case ActionMuteAll:
		g.Op = &imv1.GroupChange_MuteAll_{MuteAll: &imv1.GroupChange_MuteAll{Muted: f.Muted != nil && *f.Muted}}
	case ActionEdit:
		s := f.Settings
		e := &imv1.GroupChange_EditGroup{Title: s.Title, Description: s.Description, AvatarUrl: s.AvatarURL,
			MembersCanInvite: s.MembersCanInvite, InviteCode: s.InviteCode}
		if s.JoinRule != nil {
			r := joinRules[*s.JoinRule]
			e.JoinRule = &r
		}
		g.Op = &imv1.GroupChange_Edit{Edit: e}
	case ActionDissolve:
		g.Op = &imv1.GroupChange_Dissolve_{Dissolve: &imv1.GroupChange_Dissolve{}}
	}
	return g
}

// FromGroupChange renders a group event's action and details.
func FromGroupChange(g *imv1.GroupChange) (string, *GroupEvent) {
	switch op := g.GetOp().(type) {
	case *imv1.GroupChange_Join_:
		return ActionJoin, &GroupEvent{ByInviteCode: op.Join.GetByInviteCode()}
	case *imv1.GroupChange_SetRole_:
		return ActionSetRole, &GroupEvent{UserID: op.SetRole.GetUserId(), Role: roleName(op.SetRole.GetRole())}
	case *imv1.GroupChange_TransferOwnership_:
		return ActionTransfer, &GroupEvent{UserID: op.TransferOwnership.GetUserId()}
	case *imv1.GroupChange_Mute_:
		return ActionMute, &GroupEvent{UserID: op.Mute.GetUserId(), MutedUntilMs: op.Mute.GetUntilMs()}
	case *imv1.GroupChange_MuteAll_:
		m := op.MuteAll.GetMuted()
		return ActionMuteAll, &GroupEvent{Muted: &m}
	case *imv1.GroupChange_Edit:
		e := op.Edit
		s := &GroupSettings{Title: e.Title, Description: e.Description, AvatarURL: e.AvatarUrl, MembersCanInvite: e.MembersCanInvite}
		if e.JoinRule != nil {
			r := joinRuleName(*e.JoinRule)
			s.JoinRule = &r
		}
		if e.InviteCode != nil {
			has := len(e.InviteCodeSha256) > 0
			s.HasInviteCode = &has
		}
		return ActionEdit, &GroupEvent{Settings: s}
	case *imv1.GroupChange_Dissolve_:
		return ActionDissolve, &GroupEvent{}
	}
	return "", nil
}

// CreateSettings renders a session_create's group settings (nil: none).
func CreateSettings(s *imv1.GroupSettings) *GroupSettings {
	if s == nil {
		return nil
	}
	rule := joinRuleName(s.JoinRule)
	can := s.MembersCanInvite
	has := len(s.InviteCodeSha256) > 0
	out := &GroupSettings{JoinRule: &rule, MembersCanInvite: &can, HasInviteCode: &has}
	if s.Description != "" {
		out.Description = &s.Description
	}
	if s.AvatarUrl != "" {
		out.AvatarURL = &s.AvatarUrl
	}
	return out
}

func roleName(r imv1.GroupRole) string {
	switch r {
	case imv1.GroupRole_GROUP_ROLE_OWNER:
		return RoleOwner
	case imv1.GroupRole_GROUP_ROLE_ADMIN:
		return RoleAdmin
	}
	return RoleMember
}

// Member queries.
const (
	// OpMemberList pages through a session's current members.
	OpMemberList = "member_list"
	// OpMemberChanges returns what changed in a session's members since a
	// member version.
	OpMemberChanges = "member_changes"
)

// MemberListResult answers member_list: up to limit members whose user ID
// sorts after after_user_id, in user ID order.
type MemberListResult struct {
	Op        string       `json:"op"`
	ReqID     string       `json:"req_id,omitempty"`
	SessionID string       `json:"session_id"`
	Members   []MemberInfo `json:"members"`
	// HasMore: ask again with after_user_id = the last user_id.
	HasMore bool `json:"has_more"`
	// MemberVersion is the session's member version the page was read at
	// (at least; the store may have moved on between pages).
	MemberVersion int64 `json:"member_version"`
}

// MemberInfo is one current member.
type MemberInfo struct {
	UserID    string `json:"user_id"`
	Role      string `json:"role"`
	JoinedSeq int64  `json:"joined_seq"`
}

// MemberChangesResult answers member_changes: each user whose membership,
// role or mute changed after since_version and up to member_version, once,
// in its state as of member_version.
type MemberChangesResult struct {
	Op        string         `json:"op"`
	ReqID     string         `json:"req_id,omitempty"`
	SessionID string         `json:"session_id"`
	Changes   []MemberChange `json:"changes"`
	// MemberVersion is what this page brings the client to: pass it as the
	// next since_version.
	MemberVersion int64 `json:"member_version"`
	// HasMore: more changes follow; ask again from member_version.
	HasMore bool `json:"has_more"`
}

// MemberChange is one user's change: Member false means they left or were
// removed (Role and MutedUntilMs then absent). Role is set when the user
// joined or their role changed within the range; MutedUntilMs (0: unmuted)
// when a mute changed.
type MemberChange struct {
	UserID       string `json:"user_id"`
	Member       bool   `json:"member"`
	Role         string `json:"role,omitempty"`
	MutedUntilMs *int64 `json:"muted_until_ms,omitempty"`
	// Seq is the seq of the user's latest change in the range.
	Seq int64 `json:"seq"`
}
