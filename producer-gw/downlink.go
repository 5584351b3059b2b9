package main

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/seqflow/seqflow/internal/apierr"
	"github.com/seqflow/seqflow/internal/delivery"
	"github.com/seqflow/seqflow/internal/telemetry"
	"github.com/seqflow/seqflow/internal/wire"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// seqSink takes the seqs that arrive for commands (waiters.resolveSeq).
// It does not block.
type seqSink interface {
	resolveSeq(source string, k ackKey, r seqResult)
}

// eventMembers is the membership cache as delivery uses it: it learns
// from each event, then says who may receive it. Neither blocks (memory
// only).
type eventMembers interface {
	observe(ev *imv1.SequencedEvent)
	mayReceive(session, user string, seq int64) bool
}

// connIndex finds an open connection by ID (hub); nil when there is none.
// It does not block.
type connIndex interface {
	conn(id string) *conn
}

// downlink is the push path: it takes the PushBatches addressed to this
// gateway from the push transport and hands each item on, in one
// direction: the seq of an event, duplicate ACK or direct ACK to the
// waiters; a membership event to the membership cache; an event to the
// recipients' connections, which write it in seq order.
type downlink struct {
	gatewayID string
	recv      delivery.Receiver
	seqs      seqSink
	members   eventMembers
	conns     connIndex
	// bodies opens sealed bodies (nil: no KEK).
	bodies *bodies
	tracer trace.Tracer // nil: tracing off
	log    *slog.Logger
	m      *metrics
	// outcomes are pushItems' counters of conn.deliver's outcomes, looked
	// up once rather than per recipient.
	outcomes map[string]prometheus.Counter
}

func newDownlink(gatewayID string, recv delivery.Receiver, seqs seqSink, members eventMembers, conns connIndex,
	tracer trace.Tracer, log *slog.Logger, m *metrics) *downlink {
	d := &downlink{gatewayID: gatewayID, recv: recv, seqs: seqs, members: members, conns: conns, tracer: tracer, log: log, m: m,
		outcomes: map[string]prometheus.Counter{}}
	for _, o := range []string{"delivered", "dropped_order", "dropped_closed"} {
		d.outcomes[o] = m.pushItems.WithLabelValues(o)
	}
	return d
}

// pushed is the pushItems counter of outcome.
func (d *downlink) pushed(outcome string) prometheus.Counter {
	if c, ok := d.outcomes[outcome]; ok {
		return c
	}
	return d.m.pushItems.WithLabelValues(outcome)
}

// pushQueue bounds the pushers' and gateways' batches received and not
// yet applied; when it is full the transport waits.
const pushQueue = 256

// Run receives this gateway's batches until ctx ends, and returns
// ctx.Err(), or the transport's error if it stops by itself.
//
// The transports hand over one batch at a time, whichever stream it came
// from. A sequencer's batch (direct ACKs: only waiters to resolve) is
// applied at once; the others (events to write to connections, unread
// counts, signals) go to one goroutine that applies them in the order
// received, so a direct ACK never waits behind the pushes ahead of it.
func (d *downlink) Run(ctx context.Context) error {
	pushes := make(chan *imv1.PushBatch, pushQueue)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for b := range pushes {
			d.onBatch(b)
		}
	}()
	err := d.recv.Receive(ctx, d.gatewayID, func(b *imv1.PushBatch) {
		if b.Sender == "sequencer" {
			d.onBatch(b)
			return
		}
		pushes <- b
	})
	close(pushes)
	<-done
	return err
}

// onBatch takes one PushBatch from the transport. It only touches memory
// (waiters, membership, connection queues), so it returns quickly as
// delivery.Handler requires.
func (d *downlink) onBatch(b *imv1.PushBatch) {
	// The sequencer's batches carry direct ACKs only (sequencer/README.md,
	// "Direct ACKs"); the push lag is the pushers'.
	// A gateway's batches carry ephemeral signals only.
	source := "pusher"
	if b.Sender == "sequencer" {
		source = "sequencer"
	}
	if b.SentTsMs > 0 && (b.Sender == "" || b.Sender == "pusher") {
		d.m.pushLag.Observe(max(0, time.Since(time.UnixMilli(b.SentTsMs)).Seconds()))
	}
	for _, it := range b.Items {
		switch x := it.Item.(type) {
		case *imv1.PushItem_Event:
			d.onEvent(x.Event, it.Recipients, it.Traceparent)
		case *imv1.PushItem_Duplicate:
			dup := x.Duplicate
			d.seqs.resolveSeq(source, ackKey{dup.SessionId, dup.ClientMsgId, dup.SenderUserId},
				seqResult{seq: dup.Seq, msgID: dup.MsgId, serverTs: dup.OriginalServerTsMs, duplicate: true})
		case *imv1.PushItem_Ephemeral:
			d.onEphemeral(x.Ephemeral, it.Recipients)
		case *imv1.PushItem_Refusal:
			rf := x.Refusal
			d.seqs.resolveSeq(source, ackKey{rf.SessionId, rf.ClientMsgId, rf.SenderUserId},
				seqResult{serverTs: rf.ServerTsMs, refused: apierr.New(rf.Code, rf.Reason),
					uplink: uplinkPos{rf.UplinkPartition, rf.UplinkOffset, true}})
		case *imv1.PushItem_Ack:
			a := x.Ack
			d.seqs.resolveSeq(source, ackKey{a.SessionId, a.ClientMsgId, a.SenderUserId},
				seqResult{seq: a.Seq, msgID: a.MsgId, serverTs: a.ServerTsMs,
					uplink: uplinkPos{a.UplinkPartition, a.UplinkOffset, true}})
		}
	}
}

// onEphemeral writes a typing indicator or a read cursor to its
// recipients' connections here, dropping it for a connection whose queue
// is full.
func (d *downlink) onEphemeral(e *imv1.Ephemeral, recipients []*imv1.Recipient) {
	frame, ok := ephemeralFrame(e)
	if !ok {
		d.m.pushItems.WithLabelValues("dropped_unknown_ephemeral").Inc()
		return
	}
	// Receipts ride along with the connection's next frames (conn.offerLazy);
	// a typing indicator goes out at once.
	_, typing := e.Signal.(*imv1.Ephemeral_Typing)
	for _, r := range recipients {
		c := d.conns.conn(r.ConnId)
		switch {
		case c == nil || c.p.UserID != r.UserId:
			d.m.pushItems.WithLabelValues("dropped_no_conn").Inc()
		case r.UserId == e.SenderUserId:
			// The user's own read cursor: it moves this device's unread
			// counts, and is not shown as a receipt.
			if rd := e.GetRead(); rd != nil {
				c.ownRead(e.SessionId, rd.Seq)
				d.m.pushItems.WithLabelValues("own_read").Inc()
			}
		case !d.offerSignal(c, frame, typing):
			d.m.pushItems.WithLabelValues("dropped_ephemeral_full").Inc()
		default:
			d.m.pushItems.WithLabelValues("ephemeral").Inc()
		}
	}
}

// offerSignal queues a signal's frame on c: a typing indicator at once, a
// receipt with the connection's next write.
func (d *downlink) offerSignal(c *conn, frame []byte, typing bool) bool {
	if typing {
		return c.offer(frame)
	}
	return c.offerLazy(frame)
}

// onEvent delivers one event; with tracing on, its delivery span is a
// child of the event's traceparent (the send span of its uplink).
func (d *downlink) onEvent(ev *imv1.SequencedEvent, recipients []*imv1.Recipient, traceparent string) {
	if d.tracer != nil {
		_, span := d.tracer.Start(telemetry.FromTraceparent(context.Background(), traceparent), "producer-gw.deliver",
			trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(
				attribute.String("session_id", ev.SessionId), attribute.Int64("seq", ev.Seq), attribute.Int("recipients", len(recipients))))
		defer span.End()
	}
	d.members.observe(ev)
	d.seqs.resolveSeq("pusher", ackKey{ev.SessionId, ev.ClientMsgId, ev.SenderUserId},
		seqResult{seq: ev.Seq, msgID: ev.MsgId, serverTs: ev.ServerTsMs,
			uplink: uplinkPos{ev.UplinkPartition, ev.UplinkOffset, true}})
	var (
		frame []byte
		n     *unreadNote
		now   = time.Now()
	)
	note := func() unreadNote {
		if n == nil {
			v := noteOf(ev)
			n = &v
		}
		return *n
	}
	for _, r := range recipients {
		c := d.conns.conn(r.ConnId)
		if c == nil || c.p.UserID != r.UserId {
			d.m.pushItems.WithLabelValues("dropped_no_conn").Inc()
			continue
		}
		if !d.members.mayReceive(ev.SessionId, r.UserId, ev.Seq) {
			d.m.pushItems.WithLabelValues("dropped_not_member").Inc()
			continue
		}
		if frame == nil {
			msg, err := d.bodies.wireEvent(context.Background(), ev)
			if err != nil {
				// No plaintext to push: the clients fill the gap by sync
				// once the key store answers (docs/erasure.md).
				d.log.Warn("open a pushed body; the push is dropped", "session_id", ev.SessionId, "seq", ev.Seq, "err", err)
				d.m.pushItems.WithLabelValues("dropped_key_unavailable").Add(float64(len(recipients)))
				return
			}
			ef := wire.EventFrame{Op: wire.OpEvent, Event: msg}
			if frame, err = ef.AppendJSON(nil); err != nil {
				d.log.Error("encode event frame", "session_id", ev.SessionId, "seq", ev.Seq, "err", err)
				return
			}
		}
		echo := r.UserId == ev.SenderUserId && c.p.DeviceID == ev.SenderDeviceId
		d.pushed(c.deliver(now, ev.SessionId, ev.Seq, frame, echo, note)).Inc()
	}
}

// pushReceivers is how batches reach this gateway: Redis pub/sub always,
// and the pushers' direct TCP stream unless GATEWAY_PUSH_ADDR is "off"
// (pusher/README.md, "Transport"). ready closes once every one of them
// can take batches.
func pushReceivers(cfg Config, rdb redis.UniversalClient, log *slog.Logger, m *metrics) (delivery.Receiver, <-chan struct{}) {
	ready := make(chan struct{})
	n := 1
	if cfg.PushAddr != "off" {
		n++
	}
	var mu sync.Mutex
	up := func() {
		mu.Lock()
		defer mu.Unlock()
		if n--; n == 0 {
			close(ready)
		}
	}
	var once sync.Once
	rejected := func(transport string) delivery.RejectFunc {
		return func(reason string, _ error) { m.pushRejected.WithLabelValues(transport, reason).Inc() }
	}
	rs := []delivery.Receiver{countingReceiver{delivery.NewRedisReceiver(rdb, cfg.PeerKeys, delivery.RedisReceiverOptions{
		Log: log, OnBadBatch: func(error) { m.badBatches.Inc() }, OnRejected: rejected("redis"),
		OnSubscribed: func() { once.Do(up) },
	}), m.pushBatches.WithLabelValues("redis")}}
	if cfg.PushAddr != "off" {
		rs = append(rs, countingReceiver{delivery.NewTCPReceiver(delivery.NewRedisRegistry(rdb, cfg.PeerKeys), cfg.PeerKeys, delivery.TCPReceiverOptions{
			ListenAddr: cfg.PushAddr, AdvertiseAddr: cfg.PushAdvertise, Log: log,
			HandshakeTimeout: cfg.PushHandshakeTimeout, IdleTimeout: cfg.PushIdleTimeout, MaxConns: cfg.PushMaxConns,
			OnBadBatch: func(error) { m.badBatches.Inc() }, OnRejected: rejected("tcp"),
			OnRegistered: func(addr string) {
				log.Info("push stream listening", "addr", addr)
				up()
			},
		}), m.pushBatches.WithLabelValues("tcp")})
	}
	return delivery.Fanin(rs...), ready
}

// countingReceiver counts the batches one transport brings.
type countingReceiver struct {
	delivery.Receiver
	n prometheus.Counter
}

func (r countingReceiver) Receive(ctx context.Context, gatewayID string, h delivery.Handler) error {
	return r.Receiver.Receive(ctx, gatewayID, func(b *imv1.PushBatch) {
		r.n.Inc()
		h(b)
	})
}

var (
	_ seqSink      = (*waiters)(nil)
	_ eventMembers = (*membership)(nil)
	_ connIndex    = (*hub)(nil)
)
