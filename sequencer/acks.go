package main

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/seqflow/seqflow/internal/dedup"
	"github.com/seqflow/seqflow/internal/delivery"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// Direct ACKs. Once a transaction has committed, its seqs are durable: the
// commit is in the transaction log, and its markers follow whatever fails.
// Without this, a sender learns its seq only once the pusher has read the
// event back (read_committed, so after the markers) and pushed it to the
// sender's gateway. The acker sends each committed batch's seqs, and its
// duplicates' original seqs, straight to the senders' gateways over their
// push stream (internal/delivery's TCP transport, addresses from the Redis
// registry) as SeqAck and DuplicateAck items without recipients. The
// gateway answers a waiting command with whichever comes first (a seq only
// the command of the uplink that got it); the pusher's copy still comes,
// and answers when the direct one was lost.
//
// Nothing here can hold up sequencing: the loop hands a committed batch
// over without waiting, each gateway has its own queue and worker (one
// paused gateway does not delay the others), and whatever does not fit or
// fails is dropped and counted; the pusher path answers those commands.

const (
	// ackBatches is how many committed batches wait for the dispatcher.
	ackBatches = 64
	// ackQueue is how many batches wait per gateway.
	ackQueue = 64
	// ackSendTimeout bounds one send to one gateway.
	ackSendTimeout = 500 * time.Millisecond
	// ackIdle ends a gateway's worker after this long without batches.
	ackIdle = time.Minute
	// ackMaxItems bounds the items merged into one send.
	ackMaxItems = 4096
)

// acker sends committed seqs to the senders' gateways.
type acker struct {
	send delivery.Sender
	log  *slog.Logger
	m    *metrics

	ctx     context.Context
	cancel  context.CancelFunc
	batches chan *batch
	wg      sync.WaitGroup

	mu      sync.Mutex
	workers map[string]chan ackSend
}

// ackSend is what a gateway's worker sends: the items, and when the
// oldest of their transactions' End returned.
type ackSend struct {
	items []*imv1.PushItem
	ended time.Time
}

func newAcker(send delivery.Sender, log *slog.Logger, m *metrics) *acker {
	ctx, cancel := context.WithCancel(context.Background())
	a := &acker{send: send, log: log, m: m, ctx: ctx, cancel: cancel,
		batches: make(chan *batch, ackBatches), workers: map[string]chan ackSend{}}
	a.wg.Add(1)
	go a.dispatch()
	return a
}

// committed hands over a committed batch. It never blocks: with the
// dispatcher behind, the batch's ACKs are dropped (the pusher answers
// them). The batch must not change afterwards.
func (a *acker) committed(b *batch) {
	select {
	case a.batches <- b:
	default:
		a.m.directAcks.WithLabelValues("dropped").Add(float64(b.answered()))
	}
}

// close stops the workers, dropping (and counting) what they hold, and
// closes the transport.
func (a *acker) close() {
	a.cancel()
	a.wg.Wait()
	if err := a.send.Close(); err != nil {
		a.log.Warn("close direct ACK transport", "err", err)
	}
}

func (a *acker) dispatch() {
	defer a.wg.Done()
	for {
		select {
		case <-a.ctx.Done():
			for {
				select {
				case b := <-a.batches:
					a.m.directAcks.WithLabelValues("dropped").Add(float64(b.answered()))
				default:
					return
				}
			}
		case b := <-a.batches:
			for gw, items := range b.acks() {
				a.toGateway(gw, ackSend{items: items, ended: b.ended})
			}
		}
	}
}

// toGateway queues items for gw's worker, starting it if there is none.
func (a *acker) toGateway(gw string, s ackSend) {
	a.mu.Lock()
	defer a.mu.Unlock()
	q := a.workers[gw]
	if q == nil {
		q = make(chan ackSend, ackQueue)
		a.workers[gw] = q
		a.wg.Add(1)
		go a.worker(gw, q)
	}
	select {
	case q <- s:
	default:
		a.m.directAcks.WithLabelValues("dropped").Add(float64(len(s.items)))
	}
}

// worker sends gw's batches in order, merging what queued up meanwhile.
// It ends after ackIdle without batches (under a.mu, with its queue empty,
// so nothing is queued to a worker that is gone).
func (a *acker) worker(gw string, q chan ackSend) {
	defer a.wg.Done()
	idle := time.NewTimer(ackIdle)
	defer idle.Stop()
	for {
		select {
		case <-a.ctx.Done():
			for {
				select {
				case s := <-q:
					a.m.directAcks.WithLabelValues("dropped").Add(float64(len(s.items)))
				default:
					return
				}
			}
		case <-idle.C:
			a.mu.Lock()
			if len(q) == 0 {
				delete(a.workers, gw)
				a.mu.Unlock()
				return
			}
			a.mu.Unlock()
			idle.Reset(ackIdle)
		case s := <-q:
		more:
			for len(s.items) < ackMaxItems {
				select {
				case next := <-q:
					s.items = append(s.items, next.items...)
				default:
					break more
				}
			}
			a.sendTo(gw, s)
			idle.Reset(ackIdle)
		}
	}
}

func (a *acker) sendTo(gw string, s ackSend) {
	ctx, cancel := context.WithTimeout(a.ctx, ackSendTimeout)
	defer cancel()
	items := s.items
	err := a.send.Send(ctx, &imv1.PushBatch{GatewayId: gw, Items: items, SentTsMs: time.Now().UnixMilli(), Sender: "sequencer"})
	result := "sent"
	switch {
	case err == nil:
		if !s.ended.IsZero() {
			a.m.directAckSecs.Observe(time.Since(s.ended).Seconds())
		}
	case errors.Is(err, delivery.ErrNoReceiver):
		result = "no_receiver"
	default:
		result = "failed"
		a.log.Debug("direct ACKs not sent; the pusher answers them", "gateway_id", gw, "items", len(items), "err", err)
	}
	a.m.directAcks.WithLabelValues(result).Add(float64(len(items)))
}

// answered is how many of b's records get an ACK (all but dead letters).
func (b *batch) answered() int {
	n := 0
	for _, pb := range b.parts {
		n += pb.fresh + pb.dups + pb.refused
	}
	return n
}

// acks is what a committed b answers, by the senders' gateways: a SeqAck
// for each record sequenced, a DuplicateAck with the original seq for each
// retry, a Refusal for each command the rules refused. Dead letters get
// none here (their error comes from the pusher), nor do accepted commands
// that change membership or group state (see changesMembership).
func (b *batch) acks() map[string][]*imv1.PushItem {
	out := map[string][]*imv1.PushItem{}
	for _, pb := range b.parts {
		for i := range pb.items {
			it := &pb.items[i]
			if it.bad != nil || it.up == nil || it.up.GatewayId == "" || it.refused == nil && changesMembership(it.up) {
				continue
			}
			u := it.up
			var item *imv1.PushItem
			switch {
			case it.refused != nil:
				item = &imv1.PushItem{Item: &imv1.PushItem_Refusal{Refusal: refusalOf(it, b.nowMs)}}
			case it.dupOf != nil, it.first >= 0:
				var e dedup.Entry
				if it.dupOf != nil {
					e = *it.dupOf
				} else {
					e = pb.items[it.first].entry
				}
				item = &imv1.PushItem{Item: &imv1.PushItem_Duplicate{Duplicate: duplicateOf(u, e, b.nowMs)}}
			default:
				item = &imv1.PushItem{Item: &imv1.PushItem_Ack{Ack: &imv1.SeqAck{
					SessionId: u.SessionId, ClientMsgId: u.ClientMsgId, SenderUserId: u.SenderUserId,
					Seq: it.entry.Seq, MsgId: it.entry.MsgID, ServerTsMs: it.entry.ServerTsMs,
					UplinkPartition: it.rec.Partition, UplinkOffset: it.rec.Offset,
				}}}
			}
			out[u.GatewayId] = append(out[u.GatewayId], item)
		}
	}
	return out
}

// changesMembership reports whether u creates a session or changes its
// members. Those are answered only by the pusher's event: the gateway
// takes the membership from the event before it answers the ACK, so a
// creator's first send right after the ACK is not refused while the store
// lags (producer-gw/README.md, "Membership"). A direct ACK would come
// before that event.
func changesMembership(u *imv1.Uplink) bool {
	switch u.Command.(type) {
	case *imv1.Uplink_SessionCreate, *imv1.Uplink_Membership, *imv1.Uplink_Group:
		return true
	}
	return false
}
