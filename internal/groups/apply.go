package groups

import (
	"maps"

	"github.com/seqflow/seqflow/schemas/imv1"
)

// undo is one step back: a session created (fields nil: delete it), a
// session's fields before a change (fields set), or a member before a
// change (user set; had false: the member did not exist).
type undo struct {
	session string
	created bool
	fields  *Session // Members not copied
	user    string
	had     bool
	old     Member
}

// Begin starts recording every change, so that Rollback can restore the
// state as of Begin. One transaction at a time.
func (p *Partition) Begin() {
	p.journaling = true
	p.journal = p.journal[:0]
}

// Commit forgets the recorded changes: they are durable.
func (p *Partition) Commit() {
	p.journaling = false
	clear(p.journal)
	p.journal = p.journal[:0]
}

// Rollback undoes every change since Begin: the transaction that carried
// them aborted, so nobody saw them.
func (p *Partition) Rollback() {
	for i := len(p.journal) - 1; i >= 0; i-- {
		u := p.journal[i]
		switch {
		case u.created:
			delete(p.sessions, u.session)
		case u.fields != nil:
			s := p.sessions[u.session]
			members := s.Members
			*s = *u.fields
			s.Members = members
		default:
			s := p.sessions[u.session]
			if u.had {
				s.Members[u.user] = u.old
			} else {
				delete(s.Members, u.user)
			}
		}
	}
	p.Commit()
}

// Clone returns a deep copy of p (tests, snapshots).
func (p *Partition) Clone() *Partition {
	c := &Partition{sessions: make(map[string]*Session, len(p.sessions)), maxMembers: p.maxMembers}
	for id, s := range p.sessions {
		cs := *s
		cs.Members = maps.Clone(s.Members)
		c.sessions[id] = &cs
	}
	return c
}

func (p *Partition) saveFields(id string, s *Session) {
	if p.journaling {
		f := *s
		f.Members = nil
		p.journal = append(p.journal, undo{session: id, fields: &f})
	}
}

func (p *Partition) setMember(id string, s *Session, user string, m Member) {
	if p.journaling {
		old, had := s.Members[user]
		p.journal = append(p.journal, undo{session: id, user: user, had: had, old: old})
	}
	s.Members[user] = m
}

func (p *Partition) removeMember(id string, s *Session, user string) {
	old, had := s.Members[user]
	if !had {
		return
	}
	if p.journaling {
		p.journal = append(p.journal, undo{session: id, user: user, had: true, old: old})
	}
	delete(s.Members, user)
}

// apply changes the state as the accepted (and sealed) command c says.
func (p *Partition) apply(c command) {
	if c.create != nil || c.membership != nil || c.group != nil {
		if p.sessions[c.session] != nil || c.create != nil {
			p.markDirty(c.session)
		}
	}
	if cr := c.create; cr != nil {
		if p.sessions[c.session] != nil {
			return // a second create in the log: the first one stands
		}
		s := &Session{Kind: cr.Kind, Title: cr.Title, Members: make(map[string]Member, len(cr.MemberUserIds)+1)}
		direct := s.Kind == imv1.SessionKind_SESSION_KIND_DIRECT
		if st := cr.Settings; st != nil && !direct {
			s.Description, s.AvatarURL, s.JoinRule, s.MembersCanInvite = st.Description, st.AvatarUrl, st.JoinRule, st.MembersCanInvite
			s.InviteCodeSHA256 = append([]byte(nil), st.InviteCodeSha256...)
		}
		role := imv1.GroupRole_GROUP_ROLE_MEMBER
		for _, u := range cr.MemberUserIds {
			s.Members[u] = Member{Role: role}
		}
		if !direct {
			s.Owner = c.actor
			s.Members[c.actor] = Member{Role: imv1.GroupRole_GROUP_ROLE_OWNER}
		} else {
			s.Members[c.actor] = Member{Role: role}
		}
		p.sessions[c.session] = s
		if p.journaling {
			p.journal = append(p.journal, undo{session: c.session, created: true})
		}
		return
	}
	s := p.sessions[c.session]
	if s == nil {
		return // not governed
	}
	if mc := c.membership; mc != nil {
		switch mc.Op {
		case imv1.MembershipChange_OP_ADD:
			for _, u := range mc.UserIds {
				if _, ok := s.Members[u]; !ok {
					p.setMember(c.session, s, u, Member{Role: imv1.GroupRole_GROUP_ROLE_MEMBER})
				}
			}
		case imv1.MembershipChange_OP_REMOVE:
			for _, u := range mc.UserIds {
				if u == s.Owner {
					// Only an erasure removes the owner: the group has none
					// until... never (docs/erasure.md: the erase command
					// transfers ownership first when it can).
					p.saveFields(c.session, s)
					s.Owner = ""
				}
				p.removeMember(c.session, s, u)
			}
		}
		return
	}
	switch op := c.group.GetOp().(type) {
	case *imv1.GroupChange_Join_:
		if _, ok := s.Members[c.actor]; !ok {
			p.setMember(c.session, s, c.actor, Member{Role: imv1.GroupRole_GROUP_ROLE_MEMBER})
		}
	case *imv1.GroupChange_SetRole_:
		if m, ok := s.Members[op.SetRole.UserId]; ok {
			m.Role = op.SetRole.Role
			p.setMember(c.session, s, op.SetRole.UserId, m)
		}
	case *imv1.GroupChange_TransferOwnership_:
		to := op.TransferOwnership.UserId
		if m, ok := s.Members[to]; ok {
			p.saveFields(c.session, s)
			if old, ok := s.Members[c.actor]; ok {
				old.Role = imv1.GroupRole_GROUP_ROLE_ADMIN
				p.setMember(c.session, s, c.actor, old)
			}
			m.Role = imv1.GroupRole_GROUP_ROLE_OWNER
			p.setMember(c.session, s, to, m)
			s.Owner = to
		}
	case *imv1.GroupChange_Mute_:
		if m, ok := s.Members[op.Mute.UserId]; ok {
			m.MutedUntilMs = op.Mute.UntilMs
			p.setMember(c.session, s, op.Mute.UserId, m)
		}
	case *imv1.GroupChange_MuteAll_:
		p.saveFields(c.session, s)
		s.MuteAll = op.MuteAll.Muted
	case *imv1.GroupChange_Edit:
		e := op.Edit
		p.saveFields(c.session, s)
		if e.Title != nil {
			s.Title = *e.Title
		}
		if e.Description != nil {
			s.Description = *e.Description
		}
		if e.AvatarUrl != nil {
			s.AvatarURL = *e.AvatarUrl
		}
		if e.JoinRule != nil {
			s.JoinRule = *e.JoinRule
		}
		if e.MembersCanInvite != nil {
			s.MembersCanInvite = *e.MembersCanInvite
		}
		if e.InviteCode != nil {
			s.InviteCodeSHA256 = append([]byte(nil), e.InviteCodeSha256...)
		}
	case *imv1.GroupChange_Dissolve_:
		p.saveFields(c.session, s)
		s.Dissolved = true
	}
}
