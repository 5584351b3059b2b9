package main

import (
	"sync"
	"time"
)

// ackKey identifies a command awaiting its seq: the sequencer's dedup key
// plus the sender, so nobody's events resolve another user's send.
type ackKey struct{ session, clientMsgID, user string }

// seqResult is what the sequencer decided for a command.
type seqResult struct {
	seq, msgID, serverTs int64
	duplicate            bool
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

// waiters indexes pending commands by key.
type waiters struct {
	mu sync.Mutex
	m  map[ackKey][]*pending
	// answered holds the keys the sequencer's SeqAck answered, until the
	// pusher's copy of the same event comes (see resolveEvent).
	answered map[ackKey]time.Time
}

// maxAnswered bounds answered when the pusher's copies stop coming; past
// it a late copy may answer a quick retry (right seq, duplicate unset).
const maxAnswered = 1 << 17

// answeredTTL is how long an answered key waits for the pusher's copy.
const answeredTTL = time.Minute

func newWaiters() *waiters {
	return &waiters{m: map[ackKey][]*pending{}, answered: map[ackKey]time.Time{}}
}

// resolveDirect is resolve for the sequencer's SeqAck. What it answered
// is remembered, so the pusher's later copy of the same event does not
// answer a retry of the message that arrived in between: that retry is
// owed its own answer, with duplicate set.
func (w *waiters) resolveDirect(k ackKey, r seqResult, now time.Time) bool {
	ok := w.resolve(k, r)
	if ok && !r.duplicate {
		w.mu.Lock()
		if len(w.answered) < maxAnswered {
			w.answered[k] = now
		}
		w.mu.Unlock()
	}
	return ok
}

// resolveEvent is resolve for a sequenced event from the pusher: when the
// sequencer's SeqAck already answered this key, the event is its late
// copy and answers nobody.
func (w *waiters) resolveEvent(k ackKey, r seqResult) bool {
	w.mu.Lock()
	if _, ok := w.answered[k]; ok {
		delete(w.answered, k)
		w.mu.Unlock()
		return false
	}
	w.mu.Unlock()
	return w.resolve(k, r)
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

// resolve hands r to every command waiting on k and forgets them. It
// reports whether any was waiting.
func (w *waiters) resolve(k ackKey, r seqResult) bool {
	w.mu.Lock()
	ps := w.m[k]
	delete(w.m, k)
	w.mu.Unlock()
	for _, p := range ps {
		p.resolve(r)
	}
	return len(ps) > 0
}

// sweep forgets notices past their expiry, and answered keys whose
// pusher copy never came.
func (w *waiters) sweep(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, at := range w.answered {
		if now.Sub(at) > answeredTTL {
			delete(w.answered, k)
		}
	}
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
