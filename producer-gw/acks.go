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
}

func newWaiters() *waiters { return &waiters{m: map[ackKey][]*pending{}} }

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
