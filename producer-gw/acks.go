package main

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/seqflow/seqflow/internal/apierr"
)

// ackKey identifies a command awaiting its seq: the sequencer's dedup key
// plus the sender, so nobody's events resolve another user's send.
type ackKey struct{ session, clientMsgID, user string }

// seqResult is what the sequencer decided for a command.
type seqResult struct {
	seq, msgID, serverTs int64
	duplicate            bool
	// uplink is where the sequenced uplink was in im.uplink.v1, for a
	// result that is not a duplicate (see waiters.resolve); zero: unknown.
	uplink uplinkPos
	source string // who sent it: sequencer or pusher
	// refused: the sequencer refused the command by the session's rules
	// (a Refusal); no seq.
	refused *apierr.Error
}

// uplinkPos is an uplink record's place in the log; set is false when it
// is not known.
type uplinkPos struct {
	partition int32
	offset    int64
	set       bool
}

// pending is one command awaiting its sequenced event or duplicate ACK.
// resolve hands the result to the waiting request, or, once the request
// answered "accepted", to its notice function.
type pending struct {
	key     ackKey
	started time.Time
	ch      chan seqResult // buffered 1

	mu      sync.Mutex
	done    bool
	notice  func(seqResult)
	expires time.Time
	uplink  uplinkPos  // this command's uplink, once Kafka acknowledged it
	early   *seqResult // a sequenced result that came before uplink was known
}

// produced records where Kafka put this command's uplink, and hands over a
// result that came before (see answers) if it was this uplink's. It
// returns that result and true if it did: the caller then removes p from
// the waiters.
func (p *pending) produced(partition int32, offset int64) (seqResult, bool) {
	p.mu.Lock()
	p.uplink = uplinkPos{partition, offset, true}
	early := p.early
	p.early = nil
	p.mu.Unlock()
	if early == nil || early.uplink != p.uplink {
		return seqResult{}, false
	}
	p.resolve(*early)
	return *early, true
}

// answers reports whether r is this command's result. A duplicate ACK
// answers every command waiting on its key (each is a retry of a message
// that has its seq). A sequenced message answers only the command whose
// uplink it was: a seq comes twice (the sequencer's direct ACK, then the
// pusher's event), and the second copy must not answer a retry sent after
// the first copy was answered, which gets its own duplicate ACK. While
// this command's own position is unknown (Kafka's answer to its produce
// is still on its way), r is kept for produced to decide.
func (p *pending) answers(r seqResult) bool {
	if r.duplicate || !r.uplink.set {
		return true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.uplink.set {
		if p.early == nil || p.early.uplink != r.uplink {
			p.early = &r // a second copy of the same seq keeps the first's source
		}
		return false
	}
	return p.uplink == r.uplink
}

func (p *pending) resolve(r seqResult) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return
	}
	p.done = true
	if p.notice != nil {
		p.notice(r)
		return
	}
	p.ch <- r
}

// toNotice switches p to notice mode after its wait ended. It returns the
// result and true when one raced in first.
func (p *pending) toNotice(fn func(seqResult), until time.Time) (seqResult, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return <-p.ch, true
	}
	p.notice, p.expires = fn, until
	return seqResult{}, false
}

// waiters reconciles commands with their seqs: it indexes the commands
// awaiting one by key, takes each seq that arrives (resolveSeq: the
// sequencer's direct ACK, the pusher's event or duplicate ACK, whichever
// comes first) and hands it to the command it answers, or keeps it until
// Kafka's answer to the command's produce says whether it is its own
// (produced). None of its methods block; Run forgets expired notices.
type waiters struct {
	metrics *metrics // nil in unit tests of the index alone
	now     func() time.Time

	mu sync.Mutex
	m  map[ackKey][]*pending
}

func newWaiters(m *metrics, now func() time.Time) *waiters {
	return &waiters{metrics: m, now: now, m: map[ackKey][]*pending{}}
}

// resolveSeq answers the commands waiting on k with r. A seq may come
// twice, from the sequencer's direct ACK and from the pusher: the first
// answers, the second finds nothing waiting. source is who sent it
// (seqflow_gateway_seq_results_total).
func (w *waiters) resolveSeq(source string, k ackKey, r seqResult) {
	r.source = source
	if !r.duplicate && r.refused == nil && r.serverTs > 0 {
		w.metrics.seqArrival.WithLabelValues(source).Observe(max(0, time.Since(time.UnixMilli(r.serverTs)).Seconds()))
	}
	matched := w.resolve(k, r)
	w.metrics.seqResults.WithLabelValues(source, strconv.FormatBool(matched)).Inc()
}

// produced records where Kafka put p's uplink. If p's seq came before
// (see pending.answers), p is answered now and forgotten.
func (w *waiters) produced(p *pending, partition int32, offset int64) {
	if early, ok := p.produced(partition, offset); ok {
		w.remove(p)
		w.metrics.seqResults.WithLabelValues(early.source, "true").Inc()
		w.metrics.seqEarly.Inc()
	}
}

// Run forgets notices past their expiry once a second until ctx ends, and
// returns ctx.Err().
func (w *waiters) Run(ctx context.Context) error {
	return every(ctx, time.Second, func() { w.sweep(w.now()) })
}

func (w *waiters) add(k ackKey, now time.Time) *pending {
	p := &pending{key: k, started: now, ch: make(chan seqResult, 1)}
	w.mu.Lock()
	w.m[k] = append(w.m[k], p)
	w.mu.Unlock()
	return p
}

func (w *waiters) remove(p *pending) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ps := w.m[p.key]
	for i, q := range ps {
		if q == p {
			ps = append(ps[:i], ps[i+1:]...)
			break
		}
	}
	if len(ps) == 0 {
		delete(w.m, p.key)
	} else {
		w.m[p.key] = ps
	}
}

// resolve hands r to every command waiting on k that it answers (see
// pending.answers) and forgets them. It reports whether any was answered.
func (w *waiters) resolve(k ackKey, r seqResult) bool {
	w.mu.Lock()
	var hit, keep []*pending
	for _, p := range w.m[k] {
		if p.answers(r) {
			hit = append(hit, p)
		} else {
			keep = append(keep, p)
		}
	}
	if len(keep) == 0 {
		delete(w.m, k)
	} else {
		w.m[k] = keep
	}
	w.mu.Unlock()
	for _, p := range hit {
		p.resolve(r)
	}
	return len(hit) > 0
}

// sweep forgets notices past their expiry.
func (w *waiters) sweep(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, ps := range w.m {
		keep := ps[:0]
		for _, p := range ps {
			p.mu.Lock()
			expired := p.notice != nil && now.After(p.expires)
			p.mu.Unlock()
			if !expired {
				keep = append(keep, p)
			}
		}
		if len(keep) == 0 {
			delete(w.m, k)
		} else {
			w.m[k] = keep
		}
	}
}

func (w *waiters) len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.m)
}
