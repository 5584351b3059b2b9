// Package groups decides group governance in log order. A Partition holds
// the state of the sessions of one partition of im.sequenced.v1 (members
// and their roles and mutes, the group's settings, whether it was
// dissolved) as the log says, and decides each command against it:
//
//   - the sequencer, the single writer of a partition, calls Sequence for
//     every new uplink in uplink order: a refused command gets a Refusal
//     (its stable code and a reason) and changes nothing; an accepted one
//     is normalized (see Sequence) and applied at once, so the next
//     command sees it. Begin, Commit and Rollback bracket one transaction:
//     an aborted batch leaves the state as it was;
//   - anyone rebuilding the state from the log (the sequencer taking over a
//     partition, an audit) calls Replay for every committed event in log
//     order, and Check to ask whether an event was allowed at its seq.
//
// Decisions use nothing but the state derived from earlier events and the
// command itself, with the event's server time as "now" (mute expiry), so
// a rebuild from the log reaches the same decisions.
//
// The rules (docs/protocol.md, "Groups", is the reference):
//   - roles are owner (the creator), admin and member; an actor acts on a
//     member only when it outranks them: admins kick and mute members, the
//     owner kicks and mutes admins too, nobody kicks or mutes the owner;
//   - add (invite): admins, and members too when members_can_invite;
//   - join: when the join rule is open, or with the group's invite code;
//   - leave: anyone but the owner (who transfers ownership or dissolves);
//     an erased user's leave (MembershipChange.erasure) always passes, the
//     owner's and in a direct session too, and leaves a group without an
//     owner when its owner goes;
//   - set role and transfer ownership: the owner only;
//   - mute all, edit group: admins; dissolve: the owner only;
//   - a send or edit needs a member not muted (muted until a time later
//     than the event's server time, or a plain member while the group is
//     muted for all); a recall needs a member;
//   - a direct session keeps its two members: every governance operation
//     on it is refused; a session_create without a kind makes a group;
//   - after a dissolve every command is refused with GROUP_DISSOLVED.
//
// A session the partition has no session_create for is not governed.
// Messages written onto the uplink topic by tools pass there, but nothing
// gives such a session members or settings, and no client reaches it:
//   - a client's command (Uplink.governed, set by every gateway) is
//     refused with SESSION_NOT_FOUND, whatever it is;
//   - a join, an add, a removal or any group change is refused with
//     SESSION_NOT_FOUND, from a tool too: members come only from a create;
//   - two removals pass: an erased user's leave (MembershipChange.erasure)
//     and an operator's reclaim (MembershipChange.reclaim), which hands
//     back a session clients took by a join or an add before these rules
//     (`seqflow reclaim`); a reclaim of a created session is refused.
package groups

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"slices"
	"time"

	"github.com/seqflow/seqflow/schemas/imv1"
)

// Limits on governance fields (bytes).
const (
	MaxTitleBytes       = 512
	MaxDescriptionBytes = 2048
	MaxAvatarURLBytes   = 2048
	MaxInviteCodeBytes  = 128
)

// DefaultMaxMembers is a group's member limit when none is configured.
const DefaultMaxMembers = 200_000

// Member is one member of a session.
type Member struct {
	Role imv1.GroupRole
	// MutedUntilMs: the member may not send before this server time.
	MutedUntilMs int64
}

// Session is the governed state of one session.
type Session struct {
	Kind             imv1.SessionKind
	Title            string
	Description      string
	AvatarURL        string
	JoinRule         imv1.JoinRule
	MembersCanInvite bool
	InviteCodeSHA256 []byte
	MuteAll          bool
	Dissolved        bool
	Owner            string
	Members          map[string]Member
}

// Refusal is why a command was refused.
type Refusal struct {
	Code   imv1.ErrorCode
	Reason string
}

func (r *Refusal) Error() string { return r.Code.String() + ": " + r.Reason }

func refuse(code imv1.ErrorCode, format string, args ...any) *Refusal {
	return &Refusal{Code: code, Reason: fmt.Sprintf(format, args...)}
}

// Partition is the governed sessions of one partition. Not safe for
// concurrent use.
type Partition struct {
	sessions   map[string]*Session
	maxMembers int

	journaling bool
	journal    []undo
	dirty      map[string]struct{} // changed since the last TakeDirty
}

// NewPartition returns an empty partition whose groups hold at most
// maxMembers members (0: DefaultMaxMembers).
func NewPartition(maxMembers int) *Partition {
	if maxMembers <= 0 {
		maxMembers = DefaultMaxMembers
	}
	return &Partition{sessions: map[string]*Session{}, maxMembers: maxMembers}
}

// Session returns the state of id, nil when it is not governed. The
// caller must not modify it.
func (p *Partition) Session(id string) *Session { return p.sessions[id] }

// Each calls fn for every governed session (do not modify s).
func (p *Partition) Each(fn func(id string, s *Session)) {
	for id, s := range p.sessions {
		fn(id, s)
	}
}

// Sessions returns how many governed sessions p holds.
func (p *Partition) Sessions() int { return len(p.sessions) }

// command is what a rule looks at, from an uplink or an event.
type command struct {
	session, actor string
	governed       bool // a client's command: the session must exist
	nowMs          int64
	message        bool // a chat message or an edit: needs an unmuted member
	recall         bool
	create         *imv1.SessionCreate
	membership     *imv1.MembershipChange
	group          *imv1.GroupChange
	// sealed: the command is an event's (codes already hashed, adds
	// already filtered); Check then trusts by_invite_code.
	sealed bool
}

func ofUplink(u *imv1.Uplink, nowMs int64) command {
	c := command{session: u.SessionId, actor: u.SenderUserId, nowMs: nowMs, governed: u.Governed}
	switch x := u.Command.(type) {
	case *imv1.Uplink_Message:
		c.message = true
	case *imv1.Uplink_Edit:
		c.message = true
	case *imv1.Uplink_Recall:
		c.recall = true
	case *imv1.Uplink_SessionCreate:
		c.create = x.SessionCreate
	case *imv1.Uplink_Membership:
		c.membership = x.Membership
	case *imv1.Uplink_Group:
		c.group = x.Group
	}
	return c
}

func ofEvent(ev *imv1.SequencedEvent) command {
	c := command{session: ev.SessionId, actor: ev.SenderUserId, nowMs: ev.ServerTsMs, sealed: true}
	switch x := ev.Payload.(type) {
	case *imv1.SequencedEvent_Message:
		c.message = true
	case *imv1.SequencedEvent_Edit:
		c.message = true
	case *imv1.SequencedEvent_Recall:
		c.recall = true
	case *imv1.SequencedEvent_SessionCreate:
		c.create = x.SessionCreate
	case *imv1.SequencedEvent_Membership:
		c.membership = x.Membership
	case *imv1.SequencedEvent_Group:
		c.group = x.Group
	}
	return c
}

// Sequence decides the uplink u, sequenced at server time nowMs. A
// refusal leaves everything as it was. An accepted command is normalized
// in place for its event and applied:
//   - invite codes (create settings, edit, join) are replaced by their
//     SHA-256 or by join's by_invite_code, so the log never holds a code;
//   - an add keeps only the users not yet members.
func (p *Partition) Sequence(u *imv1.Uplink, nowMs int64) *Refusal {
	c := ofUplink(u, nowMs)
	if r := p.decide(c); r != nil {
		return r
	}
	p.seal(c)
	p.apply(c)
	return nil
}

// Replay applies a committed event of the log, in log order, without
// deciding: the log holds only what was allowed.
func (p *Partition) Replay(ev *imv1.SequencedEvent) { p.apply(ofEvent(ev)) }

// Check decides a committed event against the state before it (call it
// before Replay of the same event): nil when the rules allow it. An
// audit uses it to find events the rules should have refused.
func (p *Partition) Check(ev *imv1.SequencedEvent) *Refusal { return p.decide(ofEvent(ev)) }

// Affects reports whether an event of type eventType (the record's
// seqflow-event-type header) can change governed state, so a replay skips
// decoding the rest.
func Affects(eventType string) bool {
	switch eventType {
	case "session_create", "membership", "group", "":
		return true
	}
	return false
}

func (s *Session) member(u string) (Member, bool) {
	m, ok := s.Members[u]
	return m, ok
}

func (p *Partition) decide(c command) *Refusal {
	s := p.sessions[c.session]
	if c.create != nil {
		if s != nil {
			return refuse(imv1.ErrorCode_ERROR_CODE_SESSION_EXISTS, "session %s exists", c.session)
		}
		return validSettings(c.create.GetSettings(), c.create.GetTitle())
	}
	if s == nil {
		return decideUngoverned(c)
	}
	if c.membership.GetReclaim() != nil {
		return refuse(imv1.ErrorCode_ERROR_CODE_NOT_PERMITTED, "session %s was created: a reclaim hands back only a session without a create", c.session)
	}
	if s.Dissolved {
		return refuse(imv1.ErrorCode_ERROR_CODE_GROUP_DISSOLVED, "group %s was dissolved", c.session)
	}
	me, isMember := s.member(c.actor)
	if !isMember {
		if j := c.group.GetJoin(); j != nil {
			return p.decideJoin(s, c, j)
		}
		return refuse(imv1.ErrorCode_ERROR_CODE_NOT_A_MEMBER, "%s is not a member of %s", c.actor, c.session)
	}
	switch {
	case c.message:
		if me.MutedUntilMs > c.nowMs {
			return refuse(imv1.ErrorCode_ERROR_CODE_MUTED, "you are muted until %s", time.UnixMilli(me.MutedUntilMs).UTC().Format(time.RFC3339))
		}
		if s.MuteAll && me.Role == imv1.GroupRole_GROUP_ROLE_MEMBER {
			return refuse(imv1.ErrorCode_ERROR_CODE_MUTED, "the group is muted for everyone but its admins")
		}
		return nil
	case c.recall:
		return nil
	}
	if mc := c.membership; mc.GetErasure() != nil {
		// An erased user leaves, whatever their role and the session's kind.
		if mc.Op != imv1.MembershipChange_OP_REMOVE || len(mc.UserIds) != 1 || mc.UserIds[0] != c.actor {
			return refuse(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "an erasure removes its sender alone")
		}
		return nil
	}
	if s.Kind == imv1.SessionKind_SESSION_KIND_DIRECT {
		return refuse(imv1.ErrorCode_ERROR_CODE_NOT_PERMITTED, "the members and settings of a direct session are fixed")
	}
	if mc := c.membership; mc != nil {
		switch mc.Op {
		case imv1.MembershipChange_OP_ADD:
			return p.decideAdd(s, c, me, mc)
		case imv1.MembershipChange_OP_REMOVE:
			return decideRemove(s, c, me, mc)
		}
		return refuse(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "membership op %v", mc.Op)
	}
	if c.group == nil {
		return nil
	}
	switch op := c.group.Op.(type) {
	case *imv1.GroupChange_Join_:
		return refuse(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "%s is already a member", c.actor)
	case *imv1.GroupChange_SetRole_:
		t := op.SetRole
		if me.Role != imv1.GroupRole_GROUP_ROLE_OWNER {
			return refuse(imv1.ErrorCode_ERROR_CODE_NOT_PERMITTED, "only the owner sets roles")
		}
		if t.Role != imv1.GroupRole_GROUP_ROLE_ADMIN && t.Role != imv1.GroupRole_GROUP_ROLE_MEMBER {
			return refuse(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "role must be admin or member (ownership moves by transfer_ownership)")
		}
		tm, ok := s.member(t.UserId)
		switch {
		case !ok:
			return refuse(imv1.ErrorCode_ERROR_CODE_NOT_A_MEMBER, "%s is not a member", t.UserId)
		case t.UserId == c.actor:
			return refuse(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "the owner's role changes only by transfer_ownership")
		case tm.Role == t.Role:
			return refuse(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "%s already has role %s", t.UserId, RoleName(t.Role))
		}
		return nil
	case *imv1.GroupChange_TransferOwnership_:
		t := op.TransferOwnership
		if me.Role != imv1.GroupRole_GROUP_ROLE_OWNER {
			return refuse(imv1.ErrorCode_ERROR_CODE_NOT_PERMITTED, "only the owner transfers ownership")
		}
		if _, ok := s.member(t.UserId); !ok {
			return refuse(imv1.ErrorCode_ERROR_CODE_NOT_A_MEMBER, "%s is not a member", t.UserId)
		}
		if t.UserId == c.actor {
			return refuse(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "%s already owns the group", c.actor)
		}
		return nil
	case *imv1.GroupChange_Mute_:
		t := op.Mute
		if t.UntilMs < 0 {
			return refuse(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "until_ms must be 0 (unmute) or a time")
		}
		tm, ok := s.member(t.UserId)
		if !ok {
			return refuse(imv1.ErrorCode_ERROR_CODE_NOT_A_MEMBER, "%s is not a member", t.UserId)
		}
		if me.Role <= tm.Role {
			return refuse(imv1.ErrorCode_ERROR_CODE_NOT_PERMITTED, "%s (%s) may not mute %s (%s): admins mute members, the owner mutes admins too",
				c.actor, RoleName(me.Role), t.UserId, RoleName(tm.Role))
		}
		return nil
	case *imv1.GroupChange_MuteAll_:
		if me.Role < imv1.GroupRole_GROUP_ROLE_ADMIN {
			return refuse(imv1.ErrorCode_ERROR_CODE_NOT_PERMITTED, "only admins mute the group")
		}
		return nil
	case *imv1.GroupChange_Edit:
		if me.Role < imv1.GroupRole_GROUP_ROLE_ADMIN {
			return refuse(imv1.ErrorCode_ERROR_CODE_NOT_PERMITTED, "only admins edit the group")
		}
		return validEdit(op.Edit)
	case *imv1.GroupChange_Dissolve_:
		if me.Role != imv1.GroupRole_GROUP_ROLE_OWNER {
			return refuse(imv1.ErrorCode_ERROR_CODE_NOT_PERMITTED, "only the owner dissolves the group")
		}
		return nil
	}
	return refuse(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "group change has no operation")
}

// decideUngoverned decides a command to a session with no create (see the
// package doc).
func decideUngoverned(c command) *Refusal {
	mc := c.membership
	switch {
	case c.governed:
		return refuse(imv1.ErrorCode_ERROR_CODE_SESSION_NOT_FOUND, "session %s was never created: create it first", c.session)
	case mc.GetErasure() != nil:
		return nil // an erased user leaves every session, governed or not
	case mc.GetReclaim() != nil:
		if mc.Op != imv1.MembershipChange_OP_REMOVE || len(mc.UserIds) == 0 {
			return refuse(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "a reclaim removes the users it lists")
		}
		return nil
	case mc != nil || c.group != nil:
		return refuse(imv1.ErrorCode_ERROR_CODE_SESSION_NOT_FOUND, "session %s was never created: members and settings come only from its session_create", c.session)
	}
	return nil // a tool's message: not governed
}

func (p *Partition) decideAdd(s *Session, c command, me Member, mc *imv1.MembershipChange) *Refusal {
	if me.Role < imv1.GroupRole_GROUP_ROLE_ADMIN && !s.MembersCanInvite {
		return refuse(imv1.ErrorCode_ERROR_CODE_NOT_PERMITTED, "only admins add members to this group")
	}
	n := 0
	for _, u := range mc.UserIds {
		if _, ok := s.Members[u]; !ok {
			n++
		}
	}
	if n == 0 {
		return refuse(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "every user listed is a member already")
	}
	if len(s.Members)+n > p.maxMembers {
		return refuse(imv1.ErrorCode_ERROR_CODE_GROUP_FULL, "the group has %d members; adding %d passes its limit of %d", len(s.Members), n, p.maxMembers)
	}
	return nil
}

func decideRemove(s *Session, c command, me Member, mc *imv1.MembershipChange) *Refusal {
	if len(mc.UserIds) == 1 && mc.UserIds[0] == c.actor { // leave
		if me.Role == imv1.GroupRole_GROUP_ROLE_OWNER {
			return refuse(imv1.ErrorCode_ERROR_CODE_NOT_PERMITTED, "the owner cannot leave: transfer ownership first, or dissolve the group")
		}
		return nil
	}
	for _, u := range mc.UserIds {
		if u == c.actor {
			return refuse(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "leave on your own, not within a removal of others")
		}
		tm, ok := s.Members[u]
		if !ok {
			return refuse(imv1.ErrorCode_ERROR_CODE_NOT_A_MEMBER, "%s is not a member", u)
		}
		if me.Role <= tm.Role {
			return refuse(imv1.ErrorCode_ERROR_CODE_NOT_PERMITTED, "%s (%s) may not remove %s (%s): admins remove members, the owner removes admins too",
				c.actor, RoleName(me.Role), u, RoleName(tm.Role))
		}
	}
	return nil
}

func (p *Partition) decideJoin(s *Session, c command, j *imv1.GroupChange_Join) *Refusal {
	if s.Kind == imv1.SessionKind_SESSION_KIND_DIRECT {
		return refuse(imv1.ErrorCode_ERROR_CODE_NOT_PERMITTED, "nobody joins a direct session")
	}
	switch s.JoinRule {
	case imv1.JoinRule_JOIN_RULE_OPEN:
	case imv1.JoinRule_JOIN_RULE_CODE:
		switch {
		case len(s.InviteCodeSHA256) == 0:
			return refuse(imv1.ErrorCode_ERROR_CODE_NOT_PERMITTED, "the group has no invite code")
		case c.sealed && j.ByInviteCode:
		case j.InviteCode == "" || !bytes.Equal(hash(j.InviteCode), s.InviteCodeSHA256):
			return refuse(imv1.ErrorCode_ERROR_CODE_NOT_PERMITTED, "wrong or missing invite code")
		}
	default:
		return refuse(imv1.ErrorCode_ERROR_CODE_NOT_PERMITTED, "the group is invite only")
	}
	if len(s.Members)+1 > p.maxMembers {
		return refuse(imv1.ErrorCode_ERROR_CODE_GROUP_FULL, "the group is at its limit of %d members", p.maxMembers)
	}
	return nil
}

func validSettings(st *imv1.GroupSettings, title string) *Refusal {
	if len(title) > MaxTitleBytes {
		return refuse(imv1.ErrorCode_ERROR_CODE_TOO_LARGE, "title over %d bytes", MaxTitleBytes)
	}
	if st == nil {
		return nil
	}
	return validFields(st.Description, st.AvatarUrl, st.JoinRule, st.InviteCode)
}

func validEdit(e *imv1.GroupChange_EditGroup) *Refusal {
	if e.Title == nil && e.Description == nil && e.AvatarUrl == nil && e.JoinRule == nil && e.MembersCanInvite == nil && e.InviteCode == nil {
		return refuse(imv1.ErrorCode_ERROR_CODE_MISSING_FIELD, "an edit changes at least one field")
	}
	if len(e.GetTitle()) > MaxTitleBytes {
		return refuse(imv1.ErrorCode_ERROR_CODE_TOO_LARGE, "title over %d bytes", MaxTitleBytes)
	}
	return validFields(e.GetDescription(), e.GetAvatarUrl(), e.GetJoinRule(), e.GetInviteCode())
}

func validFields(description, avatarURL string, rule imv1.JoinRule, code string) *Refusal {
	switch {
	case len(description) > MaxDescriptionBytes:
		return refuse(imv1.ErrorCode_ERROR_CODE_TOO_LARGE, "description over %d bytes", MaxDescriptionBytes)
	case len(avatarURL) > MaxAvatarURLBytes:
		return refuse(imv1.ErrorCode_ERROR_CODE_TOO_LARGE, "avatar_url over %d bytes", MaxAvatarURLBytes)
	case len(code) > MaxInviteCodeBytes:
		return refuse(imv1.ErrorCode_ERROR_CODE_TOO_LARGE, "invite_code over %d bytes", MaxInviteCodeBytes)
	}
	if _, ok := imv1.JoinRule_name[int32(rule)]; !ok {
		return refuse(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "join_rule %d is not a join rule", rule)
	}
	return nil
}

func hash(code string) []byte {
	h := sha256.Sum256([]byte(code))
	return h[:]
}

// seal normalizes an accepted uplink's command for its event.
func (p *Partition) seal(c command) {
	if st := c.create.GetSettings(); st != nil && st.InviteCode != "" {
		st.InviteCodeSha256, st.InviteCode = hash(st.InviteCode), ""
	}
	if mc := c.membership; mc != nil && mc.Op == imv1.MembershipChange_OP_ADD {
		if s := p.sessions[c.session]; s != nil {
			mc.UserIds = slices.DeleteFunc(mc.UserIds, func(u string) bool { _, ok := s.Members[u]; return ok })
		}
	}
	switch op := c.group.GetOp().(type) {
	case *imv1.GroupChange_Join_:
		op.Join.ByInviteCode = op.Join.InviteCode != ""
		op.Join.InviteCode = ""
	case *imv1.GroupChange_Edit:
		if op.Edit.InviteCode != nil {
			if code := *op.Edit.InviteCode; code != "" {
				op.Edit.InviteCodeSha256 = hash(code)
			}
			empty := ""
			op.Edit.InviteCode = &empty
		}
	}
}

// RoleName is the protocol's name of a role: "owner", "admin", "member".
func RoleName(r imv1.GroupRole) string {
	switch r {
	case imv1.GroupRole_GROUP_ROLE_OWNER:
		return "owner"
	case imv1.GroupRole_GROUP_ROLE_ADMIN:
		return "admin"
	case imv1.GroupRole_GROUP_ROLE_MEMBER:
		return "member"
	}
	return ""
}
