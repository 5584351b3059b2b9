// Package membership keeps the members of sessions as the sequenced log
// itself says: session_create and membership events applied in log order,
// so that for every event the pusher knows exactly who was a member when the
// event was sequenced.
//
// Delivery rules, applied by Apply:
//   - session_create: every listed member and the sender receive it;
//   - membership ADD: the added users receive the event that adds them, and
//     everything after it;
//   - membership REMOVE (a kick, or a leave): the removed users receive the
//     event that removes them (so their client learns it), and nothing
//     after it;
//   - group join: as an ADD of its sender; other group changes (roles,
//     mutes, settings, dissolve) go to the members and change nobody;
//   - every event also goes to its sender, member or not, because the
//     sender's gateway completes the send ACK from it.
package membership

import (
	"slices"

	"github.com/seqflow/seqflow/internal/groups"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// Partition is the membership of the sessions of one partition of
// im.sequenced.v1, as of the last event applied. A session lives in one
// partition, so partitions are independent. Not safe for concurrent use:
// one partition is applied by one goroutine.
type Partition struct {
	sessions map[string]*session
}

type session struct {
	members map[string]struct{}
	lastSeq int64
	list    []string // members as a slice, built on demand; nil after a change
}

// memberList returns s's members as a shared slice, rebuilding it only
// after a change: a 10,000-member group then costs no allocation per
// message.
func (s *session) memberList() []string {
	if s.list == nil {
		s.list = make([]string, 0, len(s.members))
		for u := range s.members {
			s.list = append(s.list, u)
		}
	}
	return s.list
}

// NewPartition returns an empty Partition.
func NewPartition() *Partition { return &Partition{sessions: map[string]*session{}} }

// Sessions returns how many sessions p knows.
func (p *Partition) Sessions() int { return len(p.sessions) }

// Members returns the current members of sessionID, sorted; nil when the
// session is unknown.
func (p *Partition) Members(sessionID string) []string {
	s := p.sessions[sessionID]
	if s == nil {
		return nil
	}
	out := make([]string, 0, len(s.members))
	for u := range s.members {
		out = append(out, u)
	}
	slices.Sort(out)
	return out
}

// Result is who receives one event.
type Result struct {
	// Recipients are the users that receive the event, the sender among
	// them, each once, in no particular order. The slice may be shared
	// with later results: do not modify it.
	Recipients []string
	// Known is false when the session has no session_create or membership
	// event in the log before this one: only the sender receives it.
	Known bool
	// Replayed is true when the event's seq is not above the last one
	// applied to its session: it was seen before (a re-read after a
	// restart), and membership was left as it was.
	Replayed bool
}

// Apply applies ev, which must come in log order, and returns who receives
// it. Events whose seq is not above the last applied seq of their session
// change nothing, so re-reading part of the log is harmless.
func (p *Partition) Apply(ev *imv1.SequencedEvent) Result {
	s := p.sessions[ev.SessionId]
	replayed := s != nil && ev.Seq <= s.lastSeq
	create := ev.GetSessionCreate()
	change := ev.GetMembership()
	if ev.GetGroup().GetJoin() != nil {
		change = &imv1.MembershipChange{Op: imv1.MembershipChange_OP_ADD, UserIds: []string{ev.SenderUserId}}
	}
	if s == nil && (create != nil || change != nil && change.Op == imv1.MembershipChange_OP_ADD) {
		s = &session{members: map[string]struct{}{}}
		p.sessions[ev.SessionId] = s
	}
	if s == nil {
		return Result{Recipients: []string{ev.SenderUserId}}
	}
	var removed []string
	if !replayed {
		s.lastSeq = ev.Seq
		switch {
		case create != nil:
			for _, u := range create.MemberUserIds {
				s.members[u] = struct{}{}
			}
			s.members[ev.SenderUserId] = struct{}{}
			s.list = nil
		case change != nil && change.Op == imv1.MembershipChange_OP_ADD:
			for _, u := range change.UserIds {
				s.members[u] = struct{}{}
			}
			s.list = nil
		case change != nil && change.Op == imv1.MembershipChange_OP_REMOVE:
			for _, u := range change.UserIds {
				if _, ok := s.members[u]; ok {
					removed = append(removed, u)
				}
			}
		}
	}
	out := s.memberList()
	if _, ok := s.members[ev.SenderUserId]; !ok {
		out = append(out[:len(out):len(out)], ev.SenderUserId)
	}
	if len(removed) > 0 {
		for _, u := range removed {
			delete(s.members, u)
		}
		s.list = nil // out keeps the members before the removal
	}
	return Result{Recipients: out, Known: true, Replayed: replayed}
}

// Affects reports whether ev changes membership, so a replay can skip
// decoding the rest; eventType is the record's seqflow-event-type header.
func Affects(eventType string) bool {
	return eventType == "session_create" || eventType == "membership" || eventType == "group" || eventType == ""
}

// FromGroups is the membership of the governed sessions of gp (a group
// state snapshot, internal/groups): their members, as of the snapshot's
// offset. Sessions without a session_create are not in a snapshot; a
// caller starting from one loses their members (the gateway never makes
// such sessions).
func FromGroups(gp *groups.Partition) *Partition {
	p := NewPartition()
	gp.Each(func(id string, g *groups.Session) {
		s := &session{members: make(map[string]struct{}, len(g.Members))}
		for u := range g.Members {
			s.members[u] = struct{}{}
		}
		p.sessions[id] = s
	})
	return p
}
