package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/apierr"
	"github.com/seqflow/seqflow/internal/auth"
	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/telemetry"
	"github.com/seqflow/seqflow/internal/wire"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// storeTimeout bounds each store read a request makes.
const storeTimeout = 3 * time.Second

// isCommand reports whether op produces an uplink and is answered by an ACK.
func isCommand(op string) bool {
	switch op {
	case wire.OpSend, wire.OpEdit, wire.OpRecall, wire.OpCreateSession, wire.OpMembers:
		return true
	}
	return false
}

// DirectSessionID is the session of two users: the same for both orders,
// "d-" and 32 hex digits of SHA-256 over the sorted pair.
func DirectSessionID(a, b string) string {
	if b < a {
		a, b = b, a
	}
	h := sha256.Sum256([]byte("direct\x00" + a + "\x00" + b))
	return "d-" + hex.EncodeToString(h[:16])
}

// groupSessionID is a new group's ID: random, because client_msg_id is
// (a UUIDv7 by the protocol's advice), yet the same on a retry of the same
// create, so the sequencer collapses the retry instead of making a second
// group.
func groupSessionID(creator, clientMsgID string) string {
	h := sha256.Sum256([]byte("group\x00" + creator + "\x00" + clientMsgID))
	return "g-" + hex.EncodeToString(h[:16])
}

// beginCommand counts a command as in flight unless the gateway drains.
func (g *Gateway) beginCommand() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.draining.Load() {
		return false
	}
	g.inflight.Add(1)
	return true
}

// prepare checks a command against the store and builds its uplink. It
// blocks on store reads (bounded by storeTimeout).
func (g *Gateway) prepare(ctx context.Context, p auth.Principal, f *wire.ClientFrame) (*imv1.Uplink, *apierr.Error) {
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	up := &imv1.Uplink{
		SessionId: f.SessionID, ClientMsgId: f.ClientMsgID, SenderUserId: p.UserID, SenderDeviceId: p.DeviceID,
		GatewayId: g.cfg.GatewayID, ClientTsMs: f.ClientTs, GatewayTsMs: g.now().UnixMilli(),
	}
	switch f.Op {
	case wire.OpSend:
		if err := g.requireMember(ctx, f.SessionID, p.UserID); err != nil {
			return nil, err
		}
		body, err := wire.ContentBytes(f.Type, f.Body, g.cfg.Limits.MaxBodyBytes)
		if err != nil {
			return nil, err
		}
		up.Command = &imv1.Uplink_Message{Message: &imv1.MessageContent{Type: f.Type, Body: body}}
	case wire.OpEdit, wire.OpRecall:
		if err := g.requireMember(ctx, f.SessionID, p.UserID); err != nil {
			return nil, err
		}
		if err := g.checkTarget(ctx, p, f); err != nil {
			return nil, err
		}
		if f.Op == wire.OpRecall {
			up.Command = &imv1.Uplink_Recall{Recall: &imv1.Recall{TargetSeq: f.TargetSeq}}
			break
		}
		body, err := wire.ContentBytes(f.Type, f.Body, g.cfg.Limits.MaxBodyBytes)
		if err != nil {
			return nil, err
		}
		up.Command = &imv1.Uplink_Edit{Edit: &imv1.Edit{TargetSeq: f.TargetSeq, Content: &imv1.MessageContent{Type: f.Type, Body: body}}}
	case wire.OpCreateSession:
		sc, err := g.checkCreate(ctx, p, f)
		if err != nil {
			return nil, err
		}
		up.SessionId = f.SessionID
		up.Command = &imv1.Uplink_SessionCreate{SessionCreate: sc}
	case wire.OpMembers:
		if err := g.requireMember(ctx, f.SessionID, p.UserID); err != nil {
			return nil, err
		}
		if strings.HasPrefix(f.SessionID, "d-") {
			return nil, apierr.New(imv1.ErrorCode_ERROR_CODE_FORBIDDEN, "the members of a direct session are fixed")
		}
		op := imv1.MembershipChange_OP_ADD
		if f.Action == wire.ActionRemove {
			op = imv1.MembershipChange_OP_REMOVE
		}
		up.Command = &imv1.Uplink_Membership{Membership: &imv1.MembershipChange{Op: op, UserIds: dedupe(f.UserIDs)}}
	default:
		return nil, apierr.Newf(imv1.ErrorCode_ERROR_CODE_UNKNOWN_TYPE, "op %q is not a command", f.Op)
	}
	return up, nil
}

func (g *Gateway) requireMember(ctx context.Context, session, user string) *apierr.Error {
	ok, err := g.members.IsMember(ctx, session, user)
	if err != nil {
		g.log.Warn("membership check failed", "session_id", session, "user_id", user, "err", err)
		return storeError(err)
	}
	if !ok {
		return apierr.New(imv1.ErrorCode_ERROR_CODE_NOT_A_MEMBER, "")
	}
	return nil
}

// checkTarget enforces edit and recall rules: the target is a chat message
// of the caller, not recalled, and inside the window.
func (g *Gateway) checkTarget(ctx context.Context, p auth.Principal, f *wire.ClientFrame) *apierr.Error {
	t, found, err := lookupTarget(ctx, g.pool, g.store.Schema(), f.SessionID, f.TargetSeq)
	switch {
	case err != nil:
		return storeError(err)
	case !found:
		return apierr.Newf(imv1.ErrorCode_ERROR_CODE_MESSAGE_NOT_FOUND, "no message at seq %d (yet)", f.TargetSeq)
	case t.kind != wire.KindMessage:
		return apierr.Newf(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "seq %d is a %s, not a chat message", f.TargetSeq, t.kind)
	case t.sender != p.UserID:
		return apierr.New(imv1.ErrorCode_ERROR_CODE_NOT_OWN_MESSAGE, "")
	case t.recalled:
		return apierr.Newf(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "seq %d is recalled", f.TargetSeq)
	}
	window := g.cfg.EditWindow
	if f.Op == wire.OpRecall {
		window = g.cfg.RecallWindow
	}
	if age := g.now().Sub(time.UnixMilli(t.serverTsMs)); age > window {
		return apierr.Newf(imv1.ErrorCode_ERROR_CODE_EDIT_WINDOW_CLOSED, "the message is %s old; %s is allowed within %s", age.Round(time.Second), f.Op, window)
	}
	return nil
}

// checkCreate derives the session ID into f.SessionID and allows the
// create when the session does not exist yet, or when it exists because of
// this very command (a retry, which the sequencer answers with the
// original seq).
func (g *Gateway) checkCreate(ctx context.Context, p auth.Principal, f *wire.ClientFrame) (*imv1.SessionCreate, *apierr.Error) {
	sc := &imv1.SessionCreate{Title: f.Title}
	switch f.Kind {
	case wire.KindDirect:
		if f.PeerUserID == p.UserID {
			return nil, apierr.New(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "a direct session needs a peer other than yourself")
		}
		f.SessionID = DirectSessionID(p.UserID, f.PeerUserID)
		sc.Kind = imv1.SessionKind_SESSION_KIND_DIRECT
		sc.MemberUserIds = dedupe([]string{p.UserID, f.PeerUserID})
	default:
		f.SessionID = groupSessionID(p.UserID, f.ClientMsgID)
		sc.Kind = imv1.SessionKind_SESSION_KIND_GROUP
		sc.MemberUserIds = dedupe(append([]string{p.UserID}, f.MemberUserIDs...))
		if len(sc.MemberUserIds) > g.cfg.Limits.MaxMembers {
			return nil, apierr.Newf(imv1.ErrorCode_ERROR_CODE_TOO_LARGE, "a group starts with at most %d members", g.cfg.Limits.MaxMembers)
		}
	}
	c, found, err := lookupCreation(ctx, g.pool, g.store.Schema(), f.SessionID)
	if err != nil {
		return nil, storeError(err)
	}
	if found {
		if c.sender == p.UserID && c.clientMsgID == f.ClientMsgID {
			return sc, nil
		}
		return nil, apierr.Newf(imv1.ErrorCode_ERROR_CODE_SESSION_EXISTS, "session %s exists", f.SessionID)
	}
	_, exists, err := g.store.Session(ctx, f.SessionID, p.UserID)
	if err != nil {
		return nil, storeError(err)
	}
	if exists {
		return nil, apierr.Newf(imv1.ErrorCode_ERROR_CODE_SESSION_EXISTS, "session %s exists", f.SessionID)
	}
	return sc, nil
}

// submit registers the command's ACK waiter, then produces its uplink. The
// returned channel yields Kafka's answer (nil once the uplink is durable
// with acks=all). Calls from one goroutine keep their order in the log.
func (g *Gateway) submit(up *imv1.Uplink, traceparent string) (*pending, <-chan error) {
	pend := g.waiters.add(ackKey{up.SessionId, up.ClientMsgId, up.SenderUserId}, g.now())
	produced := make(chan error, 1)
	v, err := proto.Marshal(up)
	if err != nil {
		produced <- err
		return pend, produced
	}
	// With tracing on, the send span (a child of the client's traceparent,
	// if it gave one) is what the uplink carries; with it off the client's
	// traceparent goes on as is. Either way every uplink has one.
	var span trace.Span
	if g.tracer != nil {
		var sctx context.Context
		sctx, span = g.tracer.Start(telemetry.FromTraceparent(context.Background(), traceparent), "producer-gw.send",
			trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attribute.String("session_id", up.SessionId)))
		if tp := telemetry.Traceparent(sctx); tp != "" {
			traceparent = tp
		}
	}
	if traceparent == "" {
		traceparent = newTraceparent()
	}
	rec := &kgo.Record{
		Topic: g.cfg.Topics.Uplink, Key: []byte(up.SessionId), Value: v,
		Headers: eventlog.Headers(uplinkType(up), "seqflow.im.v1.Uplink", service, traceparent),
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), g.cfg.ProduceTimeout)
	g.kc.Produce(ctx, rec, func(r *kgo.Record, err error) {
		cancel()
		if err == nil {
			if early, ok := pend.produced(r.Partition, r.Offset); ok {
				g.waiters.remove(pend)
				g.m.seqResults.WithLabelValues(early.source, "true").Inc()
				g.m.seqEarly.Inc()
			}
		}
		g.m.produceSecs.Observe(time.Since(start).Seconds())
		if span != nil {
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, "produce uplink")
			}
			span.End()
		}
		produced <- err
	})
	return pend, produced
}

// await waits for the uplink to be durable, then for its seq until
// AckWait after the command arrived. Past that it answers "accepted" and,
// when notice is set, hands the seq to notice when it comes.
func (g *Gateway) await(pend *pending, produced <-chan error, f *wire.ClientFrame, notice func(wire.Ack)) (wire.Ack, *apierr.Error) {
	ack := wire.Ack{Op: wire.OpAck, ReqID: f.ReqID, ClientMsgID: f.ClientMsgID, SessionID: f.SessionID}
	if err := <-produced; err != nil {
		g.waiters.remove(pend)
		g.log.Warn("produce uplink", "session_id", f.SessionID, "client_msg_id", f.ClientMsgID, "err", err)
		return ack, produceError(err)
	}
	fill := func(a wire.Ack, r seqResult) wire.Ack {
		a.Status, a.Seq, a.MsgID, a.ServerTs, a.Duplicate = wire.StatusOK, r.seq, strconv.FormatInt(r.msgID, 10), r.serverTs, r.duplicate
		return a
	}
	producedAt := g.now()
	t := time.NewTimer(time.Until(pend.started.Add(g.cfg.AckWait)))
	defer t.Stop()
	select {
	case r := <-pend.ch:
		if !r.duplicate {
			now := g.now()
			g.m.ackStages.WithLabelValues("produce").Observe(producedAt.Sub(pend.started).Seconds())
			g.m.ackStages.WithLabelValues("seq_wait").Observe(now.Sub(producedAt).Seconds())
			g.m.ackStages.WithLabelValues("from_sequencer").Observe(max(0, now.Sub(time.UnixMilli(r.serverTs)).Seconds()))
		}
		return g.countAck(fill(ack, r), pend.started), nil
	case <-t.C:
	}
	if notice == nil {
		g.waiters.remove(pend)
		select {
		case r := <-pend.ch:
			return g.countAck(fill(ack, r), pend.started), nil
		default:
		}
	} else {
		late := ack
		late.Op, late.ReqID = wire.OpSeqNotice, ""
		r, raced := pend.toNotice(func(r seqResult) {
			g.m.notices.Inc()
			notice(fill(late, r))
		}, g.now().Add(g.cfg.NoticeTTL))
		if raced {
			return g.countAck(fill(ack, r), pend.started), nil
		}
	}
	ack.Status = wire.StatusAccepted
	return g.countAck(ack, pend.started), nil
}

func (g *Gateway) countAck(a wire.Ack, started time.Time) wire.Ack {
	status := a.Status
	if a.Duplicate {
		status = "duplicate"
	}
	g.m.acks.WithLabelValues(status).Inc()
	g.m.ackSeconds.WithLabelValues(status).Observe(g.now().Sub(started).Seconds())
	return a
}

// query answers sync, changes and read.
func (g *Gateway) query(ctx context.Context, p auth.Principal, f *wire.ClientFrame) (any, *apierr.Error) {
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	switch f.Op {
	case wire.OpSync:
		if err := g.requireMember(ctx, f.SessionID, p.UserID); err != nil {
			return nil, err
		}
		msgs, err := g.store.MessagesAfter(ctx, f.SessionID, f.AfterSeq, f.Limit+1)
		if err != nil {
			return nil, storeError(err)
		}
		res := wire.SyncResult{Op: wire.OpResult, ReqID: f.ReqID, SessionID: f.SessionID, Messages: []wire.Message{}}
		if len(msgs) > f.Limit {
			msgs, res.HasMore = msgs[:f.Limit], true
		}
		for _, m := range msgs {
			res.Messages = append(res.Messages, fromStored(m))
		}
		return res, nil
	case wire.OpChanges:
		states, err := g.store.Changes(ctx, p.UserID)
		if err != nil {
			return nil, storeError(err)
		}
		res := wire.ChangesResult{Op: wire.OpResult, ReqID: f.ReqID, Sessions: make([]wire.SessionChange, 0, len(states))}
		for _, s := range states {
			if !g.members.mayReceive(s.SessionID, p.UserID, s.MaxSeq) {
				continue
			}
			res.Sessions = append(res.Sessions, wire.SessionChange{SessionID: s.SessionID, MaxSeq: s.MaxSeq, ReadSeq: s.ReadSeq, Preview: s.LastPreview})
		}
		return res, nil
	case wire.OpRead:
		if err := g.requireMember(ctx, f.SessionID, p.UserID); err != nil {
			return nil, err
		}
		r := &imv1.ReadReceipt{SessionId: f.SessionID, UserId: p.UserID, DeviceId: p.DeviceID, ReadSeq: f.Seq, TsMs: g.now().UnixMilli()}
		if err := g.produceReceipt(ctx, f.SessionID, "read_receipt", "seqflow.im.v1.ReadReceipt", r); err != nil {
			return nil, produceError(err)
		}
		g.m.receipts.WithLabelValues("read").Inc()
		return wire.OK{Op: wire.OpResult, ReqID: f.ReqID}, nil
	}
	return nil, apierr.Newf(imv1.ErrorCode_ERROR_CODE_UNKNOWN_TYPE, "op %q is not a query", f.Op)
}

// produceReceipt produces one receipt and waits for Kafka's answer.
func (g *Gateway) produceReceipt(ctx context.Context, session, eventType, schema string, m proto.Message) error {
	v, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	rec := &kgo.Record{Topic: g.cfg.Topics.Receipts, Key: []byte(session), Value: v,
		Headers: eventlog.Headers(eventType, schema, service, "")}
	ctx, cancel := context.WithTimeout(ctx, g.cfg.ProduceTimeout)
	defer cancel()
	return g.kc.ProduceSync(ctx, rec).FirstErr()
}

func uplinkType(u *imv1.Uplink) string {
	switch u.Command.(type) {
	case *imv1.Uplink_Message:
		return wire.KindMessage
	case *imv1.Uplink_SessionCreate:
		return wire.KindSessionCreate
	case *imv1.Uplink_Membership:
		return wire.KindMembership
	case *imv1.Uplink_Edit:
		return wire.KindEdit
	case *imv1.Uplink_Recall:
		return wire.KindRecall
	}
	return "unknown"
}

// newTraceparent starts a W3C trace for a send whose client gave none.
func newTraceparent() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return "00-" + hex.EncodeToString(b[:16]) + "-" + hex.EncodeToString(b[16:]) + "-01"
}

func dedupe(ids []string) []string {
	out := slices.Clone(ids)
	slices.Sort(out)
	return slices.Compact(out)
}
