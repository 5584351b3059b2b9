package main

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seqflow/seqflow/internal/delivery"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// Direct seq ACKs.
//
// A sender's gateway learns its message's seq from the event's PushBatch,
// which the pusher sends once it has read the event: after the commit
// markers are written, the last stable offset has moved, and the pusher's
// read_committed fetch, its presence lookups and its publish have run. On
// this box that is most of the ACK's time. The sequencer knows the seq
// earlier: when EndTxn succeeds the commit is decided and durable (the
// coordinator has logged PrepareCommit; the markers follow). So after each
// committed transaction it publishes a SeqAck per message uplink to the
// gateway the uplink names, on the gateway's push channel.
//
// What this does not change: an ACK still means the message is in the
// committed log; the pusher's event and duplicate ACK still go out and
// answer whatever the direct ACK did not (Redis down, a gateway that
// restarted, a full queue). Only message uplinks are acked this way:
// session and membership commands are answered from their event, after the
// gateway has observed it, so the client's next command sees the session.
// Publishing never blocks sequencing: committed batches queue for one
// goroutine, which builds and publishes their ACKs; when the queue is full
// a batch's ACKs are dropped (counted) and the pusher's copy answers.

// ackQueue is how many committed transactions may wait for Redis. Each
// holds its records until published, so it is short.
const ackQueue = 16

// ackTimeout bounds one publish.
const ackTimeout = time.Second

type acker struct {
	send func(context.Context, *imv1.PushBatch) error
	q    chan *batch
	sent *prometheus.CounterVec // by outcome: sent, no_receiver, error, dropped
	log  *slog.Logger
}

func newAcker(send func(context.Context, *imv1.PushBatch) error, reg prometheus.Registerer, log *slog.Logger) *acker {
	a := &acker{send: send, q: make(chan *batch, ackQueue), log: log,
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seqflow_sequencer_direct_acks_total",
			Help: "PushBatches of seq ACKs published to gateways, by outcome (sent, no_receiver, error; dropped counts whole transactions: the queue was full).",
		}, []string{"outcome"})}
	reg.MustRegister(a.sent)
	return a
}

// acks builds, per gateway, the SeqAcks of b's message uplinks, in the
// batch's order (per partition, offset order), stamped sentMs.
func (b *batch) acks(sentMs int64) []*imv1.PushBatch {
	by := map[string]*imv1.PushBatch{}
	var out []*imv1.PushBatch
	for _, pb := range b.parts {
		for i := range pb.items {
			it := &pb.items[i]
			if it.bad != nil || it.up == nil || it.up.GatewayId == "" {
				continue
			}
			if _, ok := it.up.Command.(*imv1.Uplink_Message); !ok {
				continue
			}
			a := &imv1.SeqAck{SessionId: it.up.SessionId, ClientMsgId: it.up.ClientMsgId, SenderUserId: it.up.SenderUserId}
			switch {
			case it.dupOf != nil:
				a.Seq, a.MsgId, a.ServerTsMs, a.Duplicate = it.dupOf.Seq, it.dupOf.MsgID, it.dupOf.ServerTsMs, true
			case it.first >= 0:
				e := pb.items[it.first].entry
				a.Seq, a.MsgId, a.ServerTsMs, a.Duplicate = e.Seq, e.MsgID, e.ServerTsMs, true
			default:
				a.Seq, a.MsgId, a.ServerTsMs = it.entry.Seq, it.entry.MsgID, it.entry.ServerTsMs
			}
			pbt := by[it.up.GatewayId]
			if pbt == nil {
				pbt = &imv1.PushBatch{GatewayId: it.up.GatewayId, SentTsMs: sentMs}
				by[it.up.GatewayId] = pbt
				out = append(out, pbt)
			}
			pbt.Items = append(pbt.Items, &imv1.PushItem{Item: &imv1.PushItem_Ack{Ack: a}})
		}
	}
	return out
}

// enqueue hands a committed transaction to run without waiting.
func (a *acker) enqueue(b *batch) {
	select {
	case a.q <- b:
	default:
		a.sent.WithLabelValues("dropped").Inc()
	}
}

// run publishes the ACKs of queued transactions until ctx ends.
func (a *acker) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case tb := <-a.q:
			for _, b := range tb.acks(time.Now().UnixMilli()) {
				sctx, cancel := context.WithTimeout(ctx, ackTimeout)
				err := a.send(sctx, b)
				cancel()
				switch {
				case err == nil:
					a.sent.WithLabelValues("sent").Inc()
				case errors.Is(err, delivery.ErrNoReceiver):
					a.sent.WithLabelValues("no_receiver").Inc()
				default:
					a.sent.WithLabelValues("error").Inc()
					if ctx.Err() == nil {
						a.log.Debug("direct seq ACK not published; the pusher's copy answers", "gateway_id", b.GatewayId, "err", err)
					}
				}
			}
		}
	}
}
