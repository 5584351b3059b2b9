package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/apierr"
	"github.com/seqflow/seqflow/internal/auth"
	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/store"
	"github.com/seqflow/seqflow/internal/telemetry"
	"github.com/seqflow/seqflow/internal/wire"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// producer is the Kafka client as the uplink uses it (a *kgo.Client).
// Produce buffers r and returns; it blocks only while the client holds its
// maximum of buffered records. promise runs once, on the client's promise
// goroutine, with Kafka's answer (acks=all) or the record's failure; ctx
// bounds the record's life until Kafka acknowledges it.
type producer interface {
	Produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error))
}

// commandStore is what prepare reads from the message store besides
// membership (lookups). Each call blocks on PostgreSQL; ctx bounds it.
type commandStore interface {
	// target returns the event at (session, seq), false when the store
	// does not hold it (yet).
	target(ctx context.Context, session string, seq int64) (target, bool, error)
	// creation returns the session_create of session, false when the
	// store holds none.
	creation(ctx context.Context, session string) (creation, bool, error)
	// Members lists the current members of session (store.Store.Members).
	Members(ctx context.Context, sessionID string) ([]string, error)
}

// commandAcks is the ACK bookkeeping a command goes through (waiters):
// add before its produce, produced with Kafka's answer, remove when the
// command stops waiting. None of them block.
type commandAcks interface {
	add(k ackKey, now time.Time) *pending
	produced(p *pending, partition int32, offset int64)
	remove(p *pending)
}

// uplink turns a client's command into an uplink in im.uplink.v1 and its
// ACK: prepare checks it against the store and builds the uplink, submit
// registers its waiter and produces it, await waits for Kafka and then
// for the seq. A command is in flight from begin to done; the drain waits
// for every one.
type uplink struct {
	cfg   Config
	gate  *gate
	kafka producer
	// members answers edit and recall's question whether the store ever
	// listed the sender (checkTarget).
	members standingChecker
	store   commandStore
	acks    commandAcks
	tracer  trace.Tracer // nil: tracing off
	log     *slog.Logger
	m       *metrics
	now     func() time.Time
	// bodies seals message and edit bodies (nil: no KEK, plaintext).
	bodies *bodies

	inflight sync.WaitGroup // commands between begin and done, all transports
}

func newUplink(cfg Config, gate *gate, kafka producer, members standingChecker, st commandStore, acks commandAcks,
	tracer trace.Tracer, log *slog.Logger, m *metrics, now func() time.Time) *uplink {
	return &uplink{cfg: cfg, gate: gate, kafka: kafka, members: members, store: st, acks: acks,
		tracer: tracer, log: log, m: m, now: now}
}

// isCommand reports whether op produces an uplink and is answered by an ACK.
func isCommand(op string) bool {
	switch op {
	case wire.OpSend, wire.OpEdit, wire.OpRecall, wire.OpCreateSession, wire.OpMembers, wire.OpGroup:
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

// begin counts a command as in flight unless the gateway drains. After a
// true, the caller must call done once the command is answered.
func (u *uplink) begin() bool { return u.gate.admit(func() { u.inflight.Add(1) }) }

// done ends a command begin admitted.
func (u *uplink) done() { u.inflight.Done() }

// wait blocks until no command is in flight.
func (u *uplink) wait() { u.inflight.Wait() }

// prepare checks a command against the store and builds its uplink. It
// blocks on store reads (bounded by storeTimeout).
//
// It refuses early only what the log is certain to refuse. Membership is
// not among that: the store trails the log (a create or an add not stored
// yet, a gateway just restarted), so whether the sender may send, edit,
// recall, add, remove or join is the sequencer's decision, in log order
// (internal/groups), and every uplink is marked governed: a session with
// no create refuses it with SESSION_NOT_FOUND, one the sender is not in
// with NOT_A_MEMBER, each a durable refusal a retry gets again. Edit and
// recall are the exception, their target rules being the gateway's own
// (checkTarget).
func (u *uplink) prepare(ctx context.Context, p auth.Principal, f *wire.ClientFrame) (*imv1.Uplink, *apierr.Error) {
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	up := &imv1.Uplink{
		SessionId: f.SessionID, ClientMsgId: f.ClientMsgID, SenderUserId: p.UserID, SenderDeviceId: p.DeviceID,
		GatewayId: u.cfg.GatewayID, ClientTsMs: f.ClientTs, GatewayTsMs: u.now().UnixMilli(),
		Governed: true,
	}
	switch f.Op {
	case wire.OpSend:
		body, err := wire.ContentBytes(f.Type, f.Body, u.cfg.Limits.MaxBodyBytes)
		if err != nil {
			return nil, err
		}
		c := &imv1.MessageContent{Type: f.Type, Body: body}
		if err := u.bodies.seal(ctx, f.SessionID, p.UserID, c); err != nil {
			return nil, err
		}
		up.Command = &imv1.Uplink_Message{Message: c}
	case wire.OpEdit, wire.OpRecall:
		if err := u.checkTarget(ctx, p, f); err != nil {
			return nil, err
		}
		if f.Op == wire.OpRecall {
			up.Command = &imv1.Uplink_Recall{Recall: &imv1.Recall{TargetSeq: f.TargetSeq}}
			break
		}
		body, err := wire.ContentBytes(f.Type, f.Body, u.cfg.Limits.MaxBodyBytes)
		if err != nil {
			return nil, err
		}
		c := &imv1.MessageContent{Type: f.Type, Body: body}
		if err := u.bodies.seal(ctx, f.SessionID, p.UserID, c); err != nil {
			return nil, err
		}
		up.Command = &imv1.Uplink_Edit{Edit: &imv1.Edit{TargetSeq: f.TargetSeq, Content: c}}
	case wire.OpCreateSession:
		sc, err := u.checkCreate(ctx, p, f)
		if err != nil {
			return nil, err
		}
		up.SessionId = f.SessionID
		up.Command = &imv1.Uplink_SessionCreate{SessionCreate: sc}
	case wire.OpMembers:
		// Who may add or remove whom is the sequencer's decision, in log
		// order (internal/groups).
		mc := &imv1.MembershipChange{Op: imv1.MembershipChange_OP_ADD, UserIds: dedupe(f.UserIDs)}
		switch f.Action {
		case wire.ActionRemove:
			mc.Op = imv1.MembershipChange_OP_REMOVE
		case wire.ActionLeave:
			mc.Op, mc.UserIds = imv1.MembershipChange_OP_REMOVE, []string{p.UserID}
		}
		up.Command = &imv1.Uplink_Membership{Membership: mc}
	case wire.OpGroup:
		// The rules are the sequencer's (internal/groups).
		up.Command = &imv1.Uplink_Group{Group: f.GroupChange()}
	default:
		return nil, apierr.Newf(imv1.ErrorCode_ERROR_CODE_UNKNOWN_TYPE, "op %q is not a command", f.Op)
	}
	return up, nil
}

// checkTarget enforces edit and recall rules: the target is a chat message
// of the caller, not recalled, and inside the window. A user the store
// never listed in the session learns nothing of its messages: a stored
// target cannot be theirs (the persister writes in log order, so their
// membership would be stored before their message), and is answered
// NOT_A_MEMBER; a target not stored yet, MESSAGE_NOT_FOUND (retryable),
// as for a member, since their own add and message may both be on the way.
func (u *uplink) checkTarget(ctx context.Context, p auth.Principal, f *wire.ClientFrame) *apierr.Error {
	st, err := u.members.Standing(ctx, f.SessionID, p.UserID)
	if err != nil {
		return storeError(err)
	}
	t, found, err := u.store.target(ctx, f.SessionID, f.TargetSeq)
	switch {
	case err != nil:
		return storeError(err)
	case !found:
		return apierr.Newf(imv1.ErrorCode_ERROR_CODE_MESSAGE_NOT_FOUND, "no message at seq %d (yet)", f.TargetSeq)
	case st == store.NotMember:
		return apierr.New(imv1.ErrorCode_ERROR_CODE_NOT_A_MEMBER, "")
	case t.kind != wire.KindMessage:
		return apierr.Newf(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "seq %d is a %s, not a chat message", f.TargetSeq, t.kind)
	case t.sender != p.UserID:
		return apierr.New(imv1.ErrorCode_ERROR_CODE_NOT_OWN_MESSAGE, "")
	case t.recalled:
		return apierr.Newf(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "seq %d is recalled", f.TargetSeq)
	}
	window := u.cfg.EditWindow
	if f.Op == wire.OpRecall {
		window = u.cfg.RecallWindow
	}
	if age := u.now().Sub(time.UnixMilli(t.serverTsMs)); age > window {
		return apierr.Newf(imv1.ErrorCode_ERROR_CODE_EDIT_WINDOW_CLOSED, "the message is %s old; %s is allowed within %s", age.Round(time.Second), f.Op, window)
	}
	return nil
}

// checkCreate derives the session ID into f.SessionID and allows the
// create when the session does not exist yet, or when it exists because of
// this very command (a retry, which the sequencer answers with the
// original seq).
func (u *uplink) checkCreate(ctx context.Context, p auth.Principal, f *wire.ClientFrame) (*imv1.SessionCreate, *apierr.Error) {
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
		sc.Settings = f.Settings.Settings()
		sc.MemberUserIds = dedupe(append([]string{p.UserID}, f.MemberUserIDs...))
		if len(sc.MemberUserIds) > u.cfg.Limits.MaxMembers {
			return nil, apierr.Newf(imv1.ErrorCode_ERROR_CODE_TOO_LARGE, "a group starts with at most %d members", u.cfg.Limits.MaxMembers)
		}
	}
	c, found, err := u.store.creation(ctx, f.SessionID)
	if err != nil {
		return nil, storeError(err)
	}
	if found {
		if c.sender == p.UserID && c.clientMsgID == f.ClientMsgID {
			return sc, nil
		}
		return nil, apierr.Newf(imv1.ErrorCode_ERROR_CODE_SESSION_EXISTS, "session %s exists", f.SessionID)
	}
	// Members without a create: clients took the session by a join or an
	// add before those needed a create. The log would take this create,
	// but the takers would stay listed beside its members; an operator
	// hands the session back first (`seqflow reclaim`, which `seqflow
	// verify` lists).
	taken, err := u.store.Members(ctx, f.SessionID)
	if err != nil {
		return nil, storeError(err)
	}
	if len(taken) > 0 {
		return nil, apierr.Newf(imv1.ErrorCode_ERROR_CODE_SESSION_EXISTS,
			"session %s has members but was never created: an operator must reclaim it (seqflow reclaim) before it can be created", f.SessionID)
	}
	return sc, nil
}

// submit registers the command's ACK waiter, then produces its uplink. The
// returned channel yields Kafka's answer (nil once the uplink is durable
// with acks=all). Calls from one goroutine keep their order in the log.
func (u *uplink) submit(up *imv1.Uplink, traceparent string) (*pending, <-chan error) {
	pend := u.acks.add(ackKey{up.SessionId, up.ClientMsgId, up.SenderUserId}, u.now())
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
	if u.tracer != nil {
		var sctx context.Context
		sctx, span = u.tracer.Start(telemetry.FromTraceparent(context.Background(), traceparent), "producer-gw.send",
			trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attribute.String("session_id", up.SessionId)))
		if tp := telemetry.Traceparent(sctx); tp != "" {
			traceparent = tp
		}
	}
	if traceparent == "" {
		traceparent = newTraceparent()
	}
	rec := &kgo.Record{
		Topic: u.cfg.Topics.Uplink, Key: []byte(up.SessionId), Value: v,
		Headers: eventlog.Headers(uplinkType(up), "seqflow.im.v1.Uplink", service, traceparent),
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), u.cfg.ProduceTimeout)
	u.kafka.Produce(ctx, rec, func(r *kgo.Record, err error) {
		cancel()
		if err == nil {
			u.acks.produced(pend, r.Partition, r.Offset)
		}
		u.m.produceSecs.Observe(time.Since(start).Seconds())
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
func (u *uplink) await(pend *pending, produced <-chan error, f *wire.ClientFrame, notice func(wire.Ack)) (wire.Ack, *apierr.Error) {
	ack := wire.Ack{Op: wire.OpAck, ReqID: f.ReqID, ClientMsgID: f.ClientMsgID, SessionID: f.SessionID}
	if err := <-produced; err != nil {
		u.acks.remove(pend)
		u.log.Warn("produce uplink", "session_id", f.SessionID, "client_msg_id", f.ClientMsgID, "err", err)
		return ack, produceError(err)
	}
	fill := func(a wire.Ack, r seqResult) wire.Ack {
		if r.refused != nil {
			b := r.refused.Body()
			a.Status, a.Error = wire.StatusRefused, &wire.ErrorBody{Code: b.Code, Name: b.Name, Message: b.Message, Retryable: b.Retryable}
			return a
		}
		a.Status, a.Seq, a.MsgID, a.ServerTs, a.Duplicate = wire.StatusOK, r.seq, strconv.FormatInt(r.msgID, 10), r.serverTs, r.duplicate
		return a
	}
	refused := func(r seqResult) (wire.Ack, *apierr.Error) {
		u.countAck(fill(ack, r), pend.started)
		return ack, r.refused
	}
	producedAt := u.now()
	t := time.NewTimer(time.Until(pend.started.Add(u.cfg.AckWait)))
	defer t.Stop()
	select {
	case r := <-pend.ch:
		if r.refused != nil {
			return refused(r)
		}
		if !r.duplicate {
			now := u.now()
			u.m.ackStages.WithLabelValues("produce").Observe(producedAt.Sub(pend.started).Seconds())
			u.m.ackStages.WithLabelValues("seq_wait").Observe(now.Sub(producedAt).Seconds())
			u.m.ackStages.WithLabelValues("from_sequencer").Observe(max(0, now.Sub(time.UnixMilli(r.serverTs)).Seconds()))
		}
		return u.countAck(fill(ack, r), pend.started), nil
	case <-t.C:
	}
	if notice == nil {
		u.acks.remove(pend)
		select {
		case r := <-pend.ch:
			if r.refused != nil {
				return refused(r)
			}
			return u.countAck(fill(ack, r), pend.started), nil
		default:
		}
	} else {
		late := ack
		late.Op, late.ReqID = wire.OpSeqNotice, ""
		r, raced := pend.toNotice(func(r seqResult) {
			u.m.notices.Inc()
			notice(fill(late, r))
		}, u.now().Add(u.cfg.NoticeTTL))
		if raced {
			if r.refused != nil {
				return refused(r)
			}
			return u.countAck(fill(ack, r), pend.started), nil
		}
	}
	ack.Status = wire.StatusAccepted
	return u.countAck(ack, pend.started), nil
}

func (u *uplink) countAck(a wire.Ack, started time.Time) wire.Ack {
	status := a.Status
	if a.Duplicate {
		status = "duplicate"
	}
	u.m.acks.WithLabelValues(status).Inc()
	u.m.ackSeconds.WithLabelValues(status).Observe(u.now().Sub(started).Seconds())
	return a
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
	case *imv1.Uplink_Group:
		return wire.KindGroupChange
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
