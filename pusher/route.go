package main

import (
	"strings"
	"unicode/utf8"

	"github.com/seqflow/seqflow/internal/presence"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// routed is one sequenced event with the users it is for.
type routed struct {
	ev          *imv1.SequencedEvent
	recipients  []string // members as of the event, and the sender, each once
	traceparent string
}

// plan is what one poll batch sends: one batch per gateway, and the
// offline notifications of members with no online device.
type plan struct {
	batches map[string]*imv1.PushBatch
	offline []offlineNote
	// per event, for the fan-out histograms
	fanout []fanout
}

type offlineNote struct {
	n           *imv1.OfflineNotification
	traceparent string
}

type fanout struct{ members, conns, gateways int }

// planOpts are the routing settings.
type planOpts struct {
	offline           bool
	offlineMaxMembers int // 0: no limit
}

// answer is what im.duplicates.v1 carries for a sender's command: a
// DuplicateAck (a retry's original seq) or a Refusal (the session's rules
// refused it). It goes to the sending device's connections only.
type answer struct {
	user, device string
	item         *imv1.PushItem // without recipients; shared, never modified
}

func duplicateAnswer(d *imv1.DuplicateAck) answer {
	return answer{user: d.SenderUserId, device: d.SenderDeviceId, item: &imv1.PushItem{Item: &imv1.PushItem_Duplicate{Duplicate: d}}}
}

func refusalAnswer(r *imv1.Refusal) answer {
	return answer{user: r.SenderUserId, device: r.SenderDeviceId, item: &imv1.PushItem{Item: &imv1.PushItem_Refusal{Refusal: r}}}
}

// buildPlan routes a poll batch's events and answers to the online
// connections in online (user → connections). Work per event is one map
// probe per recipient plus one append per online connection: it grows with
// the online members, never with members × gateways. Within each gateway's
// batch, items keep the order of the log.
func buildPlan(events []routed, dups []answer, online map[string][]presence.Conn, o planOpts) (plan, int) {
	pl := plan{batches: map[string]*imv1.PushBatch{}, fanout: make([]fanout, 0, len(events))}
	skippedLarge := 0
	cur := map[string]*imv1.PushItem{}
	var order []string
	add := func(gw string, it *imv1.PushItem) {
		b := pl.batches[gw]
		if b == nil {
			b = &imv1.PushBatch{GatewayId: gw}
			pl.batches[gw] = b
		}
		b.Items = append(b.Items, it)
	}
	for _, r := range events {
		clear(cur)
		order = order[:0]
		conns := 0
		msg := r.ev.GetMessage()
		notify := o.offline && msg != nil
		if notify && o.offlineMaxMembers > 0 && len(r.recipients) > o.offlineMaxMembers {
			notify = false
			skippedLarge++
		}
		var prev string // once per event, not per offline member
		if notify {
			prev = preview(msg)
		}
		for _, u := range r.recipients {
			cs := online[u]
			if len(cs) == 0 {
				if notify && u != r.ev.SenderUserId {
					pl.offline = append(pl.offline, offlineNote{n: offlineNotification(u, r.ev, prev), traceparent: r.traceparent})
				}
				continue
			}
			for _, c := range cs {
				it := cur[c.GatewayID]
				if it == nil {
					it = &imv1.PushItem{Item: &imv1.PushItem_Event{Event: r.ev}, Traceparent: r.traceparent}
					cur[c.GatewayID] = it
					order = append(order, c.GatewayID)
				}
				it.Recipients = append(it.Recipients, &imv1.Recipient{UserId: c.UserID, DeviceId: c.DeviceID, ConnId: c.ConnID})
				conns++
			}
		}
		for _, gw := range order {
			add(gw, cur[gw])
		}
		pl.fanout = append(pl.fanout, fanout{members: len(r.recipients), conns: conns, gateways: len(order)})
	}
	for _, d := range dups {
		clear(cur)
		order = order[:0]
		for _, c := range online[d.user] {
			if d.device != "" && c.DeviceID != d.device {
				continue
			}
			it := cur[c.GatewayID]
			if it == nil {
				it = &imv1.PushItem{Item: d.item.Item}
				cur[c.GatewayID] = it
				order = append(order, c.GatewayID)
			}
			it.Recipients = append(it.Recipients, &imv1.Recipient{UserId: c.UserID, DeviceId: c.DeviceID, ConnId: c.ConnID})
		}
		for _, gw := range order {
			add(gw, cur[gw])
		}
	}
	return pl, skippedLarge
}

// users returns every user whose presence the poll batch needs, once each.
// Membership only changes at session_create and membership events, and
// those list everyone the session had before or after, so a later event of
// the same session adds nobody but its sender: a poll of many messages in
// one large group costs one pass over the group, not one per message.
func users(events []routed, dups []answer) []string {
	if len(events) == 1 && len(dups) == 0 {
		return events[0].recipients // already unique
	}
	total := len(dups)
	for _, r := range events {
		total += len(r.recipients)
	}
	seen := make(map[string]struct{}, min(total, 1<<16))
	out := make([]string, 0, min(total, 1<<16))
	put := func(u string) {
		if _, ok := seen[u]; !ok {
			seen[u] = struct{}{}
			out = append(out, u)
		}
	}
	done := map[string]bool{}
	for _, r := range events {
		if done[r.ev.SessionId] && r.ev.GetSessionCreate() == nil && r.ev.GetMembership() == nil && r.ev.GetGroup().GetJoin() == nil {
			put(r.ev.SenderUserId)
			continue
		}
		done[r.ev.SessionId] = true
		for _, u := range r.recipients {
			put(u)
		}
	}
	for _, d := range dups {
		put(d.user)
	}
	return out
}

// maxPreviewBytes bounds OfflineNotification.preview.
const maxPreviewBytes = 120

func offlineNotification(recipient string, ev *imv1.SequencedEvent, preview string) *imv1.OfflineNotification {
	return &imv1.OfflineNotification{
		RecipientUserId: recipient, SessionId: ev.SessionId, Seq: ev.Seq, MsgId: ev.MsgId,
		SenderUserId: ev.SenderUserId, Preview: preview, ServerTsMs: ev.ServerTsMs,
	}
}

// preview is the notification text of a message: the body of a "text"
// message, otherwise (or when sealed) "[type]", as valid UTF-8 of at most maxPreviewBytes,
// cut on a character boundary.
func preview(m *imv1.MessageContent) string {
	s := "[" + m.GetType() + "]"
	if m.GetType() == "text" && m.GetKeyId() == 0 { // the pusher holds no keys (docs/erasure.md)
		s = string(m.GetBody())
	}
	return cutUTF8(strings.ToValidUTF8(s, "\uFFFD"), maxPreviewBytes)
}

// cutUTF8 returns the longest prefix of the valid UTF-8 string s that has at
// most n bytes and ends on a character boundary.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
