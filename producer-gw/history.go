package main

import (
	"context"
	"log/slog"
	"strconv"

	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/apierr"
	"github.com/seqflow/seqflow/internal/auth"
	"github.com/seqflow/seqflow/internal/store"
	"github.com/seqflow/seqflow/internal/wire"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// historyStore is the message store as sync and changes read it (a
// *store.Store). Each call blocks on PostgreSQL; ctx bounds it.
type historyStore interface {
	MessagesAfter(ctx context.Context, sessionID string, afterSeq int64, limit int) ([]store.Message, error)
	MessagesBefore(ctx context.Context, sessionID string, beforeSeq int64, limit int) ([]store.Message, error)
	Changes(ctx context.Context, userID string) ([]store.SessionState, error)
	SeenByExcept(ctx context.Context, sessionID string, seq int64, listUpTo int, hidden []string) (users []string, count, members int64, err error)
	Members(ctx context.Context, sessionID string) ([]string, error)
	MemberPage(ctx context.Context, sessionID, afterUser string, limit int) ([]store.Member, error)
	MemberEvents(ctx context.Context, sessionID string, afterSeq int64, limit int) ([]store.Message, error)
	Session(ctx context.Context, sessionID, userID string) (store.SessionState, bool, error)
	MessagesAt(ctx context.Context, keys []store.SessionSeq) ([]store.Message, error)
}

// historyMembers is the membership cache as history uses it: IsMember may
// block on PostgreSQL (ctx bounds it); mayReceive only reads memory.
type historyMembers interface {
	memberChecker
	mayReceive(session, user string, seq int64) bool
}

// history answers sync and changes from the message store (the
// persister's projection), so a client can always fill the gaps the push
// path leaves.
type history struct {
	store   historyStore
	members historyMembers
	// privacy says whose read cursors seen_by leaves out.
	privacy *settings
	log     *slog.Logger
	// bodies opens sealed bodies (nil: no KEK).
	bodies *bodies
	// slots bounds the sync and changes requests reading the store at
	// once (nil: no bound).
	slots *syncSlots
}

func newHistory(st historyStore, members historyMembers, privacy *settings, log *slog.Logger) *history {
	return &history{store: st, members: members, privacy: privacy, log: log}
}

// sync returns a page of a session's messages to a member: after
// f.AfterSeq in seq order, before f.BeforeSeq newest first, or around
// f.AroundSeq (see page).
func (h *history) sync(ctx context.Context, p auth.Principal, f *wire.ClientFrame) (wire.SyncResult, *apierr.Error) {
	res := wire.SyncResult{Op: wire.OpResult, ReqID: f.ReqID, SessionID: f.SessionID, Messages: []wire.Message{}}
	if err := h.slots.acquire(ctx, wire.OpSync); err != nil {
		return res, err
	}
	defer h.slots.release()
	if err := requireMember(ctx, h.members, h.log, f.SessionID, p.UserID); err != nil {
		return res, err
	}
	msgs, err := h.page(ctx, f, &res)
	if err != nil {
		return res, storeError(err)
	}
	for _, m := range msgs {
		erased, err := h.bodies.openStored(ctx, &m)
		if err != nil {
			return res, apierr.New(imv1.ErrorCode_ERROR_CODE_UNAVAILABLE, "the key store is unavailable; sync again later")
		}
		out := fromStored(m)
		out.Erased = erased
		res.Messages = append(res.Messages, out)
	}
	return res, nil
}

// page reads one sync page and sets res's has_more flags. Each side is
// read one row past the limit, so a full page knows whether more follow.
//
// Around a seq, the page holds the message at around_seq (or the first
// after it) and up to (limit-1)/2 older ones, in seq order; a side with
// fewer messages leaves its room to the other, so a jump near either end
// of the history still fills the page.
func (h *history) page(ctx context.Context, f *wire.ClientFrame, res *wire.SyncResult) ([]store.Message, error) {
	switch {
	case f.BeforeSeq > 0:
		msgs, err := h.store.MessagesBefore(ctx, f.SessionID, f.BeforeSeq, f.Limit+1)
		if len(msgs) > f.Limit {
			msgs, res.HasMore = msgs[:f.Limit], true
		}
		return msgs, err
	case f.AroundSeq > 0:
		before, err := h.store.MessagesBefore(ctx, f.SessionID, f.AroundSeq, f.Limit+1)
		if err != nil {
			return nil, err
		}
		after, err := h.store.MessagesAfter(ctx, f.SessionID, f.AroundSeq-1, f.Limit+1)
		if err != nil {
			return nil, err
		}
		nb := min(len(before), f.Limit-min(len(after), f.Limit-(f.Limit-1)/2))
		na := min(len(after), f.Limit-nb)
		res.HasMoreBefore, res.HasMore = len(before) > nb, len(after) > na
		out := make([]store.Message, 0, nb+na)
		for i := nb - 1; i >= 0; i-- {
			out = append(out, before[i])
		}
		return append(out, after[:na]...), nil
	default:
		msgs, err := h.store.MessagesAfter(ctx, f.SessionID, f.AfterSeq, f.Limit+1)
		if len(msgs) > f.Limit {
			msgs, res.HasMore = msgs[:f.Limit], true
		}
		return msgs, err
	}
}

// changes returns the user's sessions with their max and read seqs,
// leaving out those the gateway saw the user leave.
func (h *history) changes(ctx context.Context, p auth.Principal, f *wire.ClientFrame) (wire.ChangesResult, *apierr.Error) {
	res, _, err := h.changesStates(ctx, p, f)
	return res, err
}

// changesStates is changes with the store's states it answered from,
// which seed a connection's unread counts.
func (h *history) changesStates(ctx context.Context, p auth.Principal, f *wire.ClientFrame) (wire.ChangesResult, []store.SessionState, *apierr.Error) {
	if err := h.slots.acquire(ctx, wire.OpChanges); err != nil {
		return wire.ChangesResult{}, nil, err
	}
	defer h.slots.release()
	states, err := h.store.Changes(ctx, p.UserID)
	if err != nil {
		return wire.ChangesResult{}, nil, storeError(err)
	}
	res := wire.ChangesResult{Op: wire.OpResult, ReqID: f.ReqID, Sessions: make([]wire.SessionChange, 0, len(states))}
	kept := states[:0]
	for _, s := range states {
		if !h.members.mayReceive(s.SessionID, p.UserID, s.MaxSeq) {
			continue
		}
		kept = append(kept, s)
		res.Sessions = append(res.Sessions, wire.SessionChange{SessionID: s.SessionID, MaxSeq: s.MaxSeq, ReadSeq: s.ReadSeq,
			Preview: s.LastPreview, Unread: s.Unread, MemberVersion: s.MemberVersion, Role: s.Role})
		res.TotalUnread += s.Unread
	}
	h.openPreviews(ctx, res.Sessions, kept)
	return res, kept, nil
}

// seenByListed is the largest session whose seen_by lists the users; a
// larger one gets the count only.
const seenByListed = 500

// seenBy answers who of the session's members has read it up to f.Seq,
// to a member. Members who turned read receipts off are neither listed
// nor counted (members still counts them).
func (h *history) seenBy(ctx context.Context, p auth.Principal, f *wire.ClientFrame) (wire.SeenByResult, *apierr.Error) {
	res := wire.SeenByResult{Op: wire.OpResult, ReqID: f.ReqID, SessionID: f.SessionID, Seq: f.Seq}
	if err := requireMember(ctx, h.members, h.log, f.SessionID, p.UserID); err != nil {
		return res, err
	}
	all, err := h.store.Members(ctx, f.SessionID)
	if err != nil {
		return res, storeError(err)
	}
	hidden, err := h.privacy.hidden(ctx, all)
	if err != nil {
		return res, redisError(err)
	}
	users, count, members, err := h.store.SeenByExcept(ctx, f.SessionID, f.Seq, seenByListed, hidden)
	if err != nil {
		return res, storeError(err)
	}
	res.Users, res.Count, res.Members = users, count, members
	return res, nil
}

// fromStored renders a store row for sync, in its current state.
func fromStored(m store.Message) wire.Message {
	out := wire.Message{
		SessionID: m.SessionID, Seq: m.Seq, MsgID: strconv.FormatInt(m.MsgID, 10), ClientMsgID: m.ClientMsgID,
		SenderUserID: m.SenderUserID, SenderDeviceID: m.SenderDeviceID, ServerTs: m.ServerTsMs, Kind: m.Kind,
		TargetSeq: m.TargetSeq, Edited: m.EditedSeq > 0, Recalled: m.RecalledSeq > 0,
	}
	switch m.Kind {
	case wire.KindMessage, wire.KindEdit:
		out.Type = m.ContentType
		if !out.Recalled && m.Body != nil {
			out.Body = wire.BodyJSON(m.ContentType, m.Body)
		}
	case wire.KindSessionCreate:
		out.SessionKind, out.Title, out.UserIDs = m.SessionKind, m.Title, m.MemberIDs
		if len(m.Body) > 0 {
			var st imv1.GroupSettings
			if proto.Unmarshal(m.Body, &st) == nil {
				if s := wire.CreateSettings(&st); s != nil {
					out.Group = &wire.GroupEvent{Settings: s}
				}
			}
		}
	case wire.KindGroupChange:
		var g imv1.GroupChange
		if proto.Unmarshal(m.Body, &g) == nil {
			out.Action, out.Group = wire.FromGroupChange(&g)
			if out.Action == wire.ActionJoin {
				out.UserIDs = []string{m.SenderUserID}
			}
		}
	case wire.KindMembership:
		out.Action, out.UserIDs = m.MemberOp, m.MemberIDs
	}
	return out
}

var (
	_ historyStore   = (*store.Store)(nil)
	_ historyMembers = (*membership)(nil)
)

// memberList answers member_list to a member: one page of the session's
// current members with their roles.
func (h *history) memberList(ctx context.Context, p auth.Principal, f *wire.ClientFrame) (wire.MemberListResult, *apierr.Error) {
	res := wire.MemberListResult{Op: wire.OpResult, ReqID: f.ReqID, SessionID: f.SessionID, Members: []wire.MemberInfo{}}
	if err := requireMember(ctx, h.members, h.log, f.SessionID, p.UserID); err != nil {
		return res, err
	}
	st, _, err := h.store.Session(ctx, f.SessionID, p.UserID)
	if err != nil {
		return res, storeError(err)
	}
	res.MemberVersion = st.MemberVersion
	ms, err := h.store.MemberPage(ctx, f.SessionID, f.AfterUserID, f.Limit+1)
	if err != nil {
		return res, storeError(err)
	}
	if len(ms) > f.Limit {
		ms, res.HasMore = ms[:f.Limit], true
	}
	for _, m := range ms {
		res.Members = append(res.Members, wire.MemberInfo{UserID: m.UserID, Role: m.Role, JoinedSeq: m.JoinedSeq})
	}
	return res, nil
}

// memberChanges answers member_changes to a member: the membership and
// governance events after since_version (one page of them), folded into
// one change per user.
func (h *history) memberChanges(ctx context.Context, p auth.Principal, f *wire.ClientFrame) (wire.MemberChangesResult, *apierr.Error) {
	res := wire.MemberChangesResult{Op: wire.OpResult, ReqID: f.ReqID, SessionID: f.SessionID, Changes: []wire.MemberChange{}, MemberVersion: f.SinceVersion}
	if err := requireMember(ctx, h.members, h.log, f.SessionID, p.UserID); err != nil {
		return res, err
	}
	evs, err := h.store.MemberEvents(ctx, f.SessionID, f.SinceVersion, f.Limit+1)
	if err != nil {
		return res, storeError(err)
	}
	if len(evs) > f.Limit {
		evs, res.HasMore = evs[:f.Limit], true
	}
	if len(evs) > 0 {
		res.MemberVersion = evs[len(evs)-1].Seq
	}
	res.Changes = foldMemberEvents(evs)
	return res, nil
}

// foldMemberEvents turns membership and governance events, in seq order,
// into one change per user (in order of each user's first change).
func foldMemberEvents(evs []store.Message) []wire.MemberChange {
	var out []wire.MemberChange
	at := map[string]int{}
	change := func(user string, seq int64, fn func(*wire.MemberChange)) {
		i, ok := at[user]
		if !ok {
			i = len(out)
			at[user] = i
			out = append(out, wire.MemberChange{UserID: user, Member: true})
		}
		out[i].Seq = seq
		fn(&out[i])
	}
	joined := func(role string) func(*wire.MemberChange) {
		return func(c *wire.MemberChange) {
			unmuted := int64(0)
			c.Member, c.Role, c.MutedUntilMs = true, role, &unmuted
		}
	}
	for _, m := range evs {
		switch m.Kind {
		case wire.KindSessionCreate:
			for _, u := range m.MemberIDs {
				role := wire.RoleMember
				if u == m.SenderUserID && m.SessionKind != wire.KindDirect {
					role = wire.RoleOwner
				}
				change(u, m.Seq, joined(role))
			}
		case wire.KindMembership:
			for _, u := range m.MemberIDs {
				if m.MemberOp == store.OpRemove {
					change(u, m.Seq, func(c *wire.MemberChange) { c.Member, c.Role, c.MutedUntilMs = false, "", nil })
				} else {
					change(u, m.Seq, joined(wire.RoleMember))
				}
			}
		case wire.KindGroupChange:
			var g imv1.GroupChange
			if proto.Unmarshal(m.Body, &g) != nil {
				continue
			}
			switch op := g.Op.(type) {
			case *imv1.GroupChange_Join_:
				change(m.SenderUserID, m.Seq, joined(wire.RoleMember))
			case *imv1.GroupChange_SetRole_:
				role := wire.RoleMember
				if op.SetRole.GetRole() == imv1.GroupRole_GROUP_ROLE_ADMIN {
					role = wire.RoleAdmin
				}
				change(op.SetRole.GetUserId(), m.Seq, func(c *wire.MemberChange) { c.Role = role })
			case *imv1.GroupChange_TransferOwnership_:
				change(op.TransferOwnership.GetUserId(), m.Seq, func(c *wire.MemberChange) { c.Role = wire.RoleOwner })
				change(m.SenderUserID, m.Seq, func(c *wire.MemberChange) { c.Role = wire.RoleAdmin })
			case *imv1.GroupChange_Mute_:
				until := op.Mute.GetUntilMs()
				change(op.Mute.GetUserId(), m.Seq, func(c *wire.MemberChange) { c.MutedUntilMs = &until })
			}
		}
	}
	return out
}

// openPreviews fills the previews the store could not write because the
// message was sealed (store.SealedPreview), from the messages themselves,
// in one query. A preview that does not open stays empty: changes still
// answers.
func (h *history) openPreviews(ctx context.Context, out []wire.SessionChange, states []store.SessionState) {
	if h.bodies == nil {
		return
	}
	var want []store.SessionSeq
	for _, s := range states {
		if s.LastPreview == store.SealedPreview && s.LastPreviewSeq > 0 {
			want = append(want, store.SessionSeq{SessionID: s.SessionID, Seq: s.LastPreviewSeq})
		}
	}
	if len(want) == 0 {
		return
	}
	msgs, err := h.store.MessagesAt(ctx, want)
	if err != nil {
		h.log.Warn("read sealed previews", "sessions", len(want), "err", err)
		return
	}
	by := make(map[string]store.Message, len(msgs))
	for _, m := range msgs {
		by[m.SessionID] = m
	}
	for i := range out {
		m, ok := by[out[i].SessionID]
		if !ok || m.RecalledSeq > 0 {
			continue
		}
		erased, err := h.bodies.openStored(ctx, &m)
		switch {
		case err != nil:
		case erased:
			out[i].Preview = "[erased]"
		default:
			out[i].Preview = store.Preview(m.ContentType, m.Body)
		}
	}
}
