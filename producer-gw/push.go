package main

import (
	"context"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/seqflow/seqflow/internal/store"
	"github.com/seqflow/seqflow/internal/telemetry"
	"github.com/seqflow/seqflow/internal/wire"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// onBatch takes one PushBatch from the transport. It only touches memory
// (waiters, membership, connection queues), so it returns quickly as
// delivery.Handler requires.
func (g *Gateway) onBatch(b *imv1.PushBatch) {
	// The sequencer's batches carry direct ACKs only (sequencer/README.md,
	// "Direct ACKs"); the push lag is the pushers'.
	source := "pusher"
	if b.Sender == "sequencer" {
		source = "sequencer"
	}
	if b.SentTsMs > 0 && source == "pusher" {
		g.m.pushLag.Observe(max(0, time.Since(time.UnixMilli(b.SentTsMs)).Seconds()))
	}
	for _, it := range b.Items {
		switch x := it.Item.(type) {
		case *imv1.PushItem_Event:
			g.onEvent(x.Event, it.Recipients, it.Traceparent)
		case *imv1.PushItem_Duplicate:
			d := x.Duplicate
			g.resolveSeq(source, ackKey{d.SessionId, d.ClientMsgId, d.SenderUserId},
				seqResult{seq: d.Seq, msgID: d.MsgId, serverTs: d.OriginalServerTsMs, duplicate: true})
		case *imv1.PushItem_Ack:
			a := x.Ack
			g.resolveSeq(source, ackKey{a.SessionId, a.ClientMsgId, a.SenderUserId},
				seqResult{seq: a.Seq, msgID: a.MsgId, serverTs: a.ServerTsMs,
					uplink: uplinkPos{a.UplinkPartition, a.UplinkOffset, true}})
		}
	}
}

// resolveSeq answers the commands waiting on k with r. A seq may come
// twice, from the sequencer's direct ACK and from the pusher: the first
// answers, the second finds nothing waiting. source is who sent it
// (seqflow_gateway_seq_results_total).
func (g *Gateway) resolveSeq(source string, k ackKey, r seqResult) {
	r.source = source
	if !r.duplicate && r.serverTs > 0 {
		g.m.seqArrival.WithLabelValues(source).Observe(max(0, time.Since(time.UnixMilli(r.serverTs)).Seconds()))
	}
	matched := g.waiters.resolve(k, r)
	g.m.seqResults.WithLabelValues(source, strconv.FormatBool(matched)).Inc()
}

// onEvent delivers one event; with tracing on, its delivery span is a
// child of the event's traceparent (the send span of its uplink).
func (g *Gateway) onEvent(ev *imv1.SequencedEvent, recipients []*imv1.Recipient, traceparent string) {
	if g.tracer != nil {
		_, span := g.tracer.Start(telemetry.FromTraceparent(context.Background(), traceparent), "producer-gw.deliver",
			trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(
				attribute.String("session_id", ev.SessionId), attribute.Int64("seq", ev.Seq), attribute.Int("recipients", len(recipients))))
		defer span.End()
	}
	g.members.observe(ev)
	g.resolveSeq("pusher", ackKey{ev.SessionId, ev.ClientMsgId, ev.SenderUserId},
		seqResult{seq: ev.Seq, msgID: ev.MsgId, serverTs: ev.ServerTsMs,
			uplink: uplinkPos{ev.UplinkPartition, ev.UplinkOffset, true}})
	var frame []byte
	for _, r := range recipients {
		c := g.conn(r.ConnId)
		if c == nil || c.p.UserID != r.UserId {
			g.m.pushItems.WithLabelValues("dropped_no_conn").Inc()
			continue
		}
		if !g.members.mayReceive(ev.SessionId, r.UserId, ev.Seq) {
			g.m.pushItems.WithLabelValues("dropped_not_member").Inc()
			continue
		}
		if frame == nil {
			var err error
			ef := wire.EventFrame{Op: wire.OpEvent, Event: wire.FromEvent(ev)}
			if frame, err = ef.AppendJSON(nil); err != nil {
				g.log.Error("encode event frame", "session_id", ev.SessionId, "seq", ev.Seq, "err", err)
				return
			}
		}
		g.m.pushItems.WithLabelValues(c.deliver(ev.SessionId, ev.Seq, frame)).Inc()
	}
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
	case wire.KindMembership:
		out.Action, out.UserIDs = m.MemberOp, m.MemberIDs
	}
	return out
}
