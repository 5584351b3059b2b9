// Package segment hands out per-session seqs from ranges reserved in a
// durable store (seed 000's 号段 mode). A Book holds, in memory, the ranges
// one owner (a sequencer partition) reserved; seqs are taken from it without
// any I/O. Reserving extends a session's row atomically, so a range is never
// handed out twice, to anyone, whatever crashes or pauses.
//
// A Book keeps at most Step unconfirmed seqs per session (unused, or used by
// a transaction not yet committed): a shortfall asks for max(Step, demand) -
// remaining and a top-up (prefetch) for Step - (remaining + in flight). With
// demand per batch at most Step, that bounds the gap a crash or a partition
// move can leave to one step.
package segment

import (
	"context"
	"fmt"
	"sort"
)

// Range is the closed interval [Lo, Hi] of seqs.
type Range struct{ Lo, Hi int64 }

// Len is the number of seqs in r.
func (r Range) Len() int64 { return r.Hi - r.Lo + 1 }

// Request asks to extend a session's reservation by N seqs.
//
// After, when above 0, is the session's last committed seq as its new owner
// read it from the log: the reservation then restarts right after it, as
// [After+1, After+N], and takes back whatever was reserved beyond After and
// never committed (the unused and aborted seqs of owners that crashed). That
// keeps the gap after any number of crashes in a row at one step, and a
// store restored from an old backup can never hand out a committed seq
// again. Only an owner that has fenced every previous owner of the session
// and read the log to its end may set it: the sequencer does, once per
// session after a partition is assigned (its transactional commits are
// fenced by the group generation, and it waits until no transaction is open
// on the partition before reading).
type Request struct {
	SessionID string
	N         int64
	After     int64
}

// Grant is a range reserved for a session.
type Grant struct {
	SessionID string
	Range     Range
}

// Store reserves ranges. One Reserve call is one round trip; when it returns
// nil the grants are durable and exclusive to the caller. Requests name each
// session at most once. Reserve must not be called concurrently with itself
// for the same session from one owner (different owners may race: the store
// serializes them).
type Store interface {
	Reserve(ctx context.Context, reqs []Request) ([]Grant, error)
	// Release gives unused ranges back, each only if nobody reserved past
	// it since (the session's maximum is still the range's end), and
	// returns how many were given back. Call it only for ranges no
	// transaction of the caller can still use.
	Release(ctx context.Context, ranges []Grant) (int, error)
}

// Book is the in-memory reservations of one owner. Not safe for concurrent
// use.
type Book struct {
	step     int64
	lowWater int64
	sessions map[string]*ranges
	// taken records, per session, the seqs taken since Begin, for Rewind.
	taken map[string][]int64
	// resume is, per session not yet reserved for, its last committed seq
	// (see Resume).
	resume map[string]int64
}

type ranges struct {
	rs  []Range
	top int64 // highest seq ever held, to refuse a range handed out twice
}

func (r *ranges) remaining() int64 {
	var n int64
	for _, x := range r.rs {
		n += x.Len()
	}
	return n
}

// NewBook returns a Book that reserves step seqs at a time and tops a
// session up once fewer than lowWater remain (lowWater <= 0 means step/2).
func NewBook(step, lowWater int64) *Book {
	if step <= 0 {
		panic(fmt.Sprintf("segment: step %d must be positive", step))
	}
	if lowWater <= 0 || lowWater > step {
		lowWater = (step + 1) / 2
	}
	return &Book{step: step, lowWater: lowWater, sessions: map[string]*ranges{}, taken: map[string][]int64{}}
}

// Step returns the configured step.
func (b *Book) Step() int64 { return b.step }

// Remaining returns how many seqs the book holds for session.
func (b *Book) Remaining(session string) int64 {
	if r := b.sessions[session]; r != nil {
		return r.remaining()
	}
	return 0
}

// Resume tells the book each session's last committed seq, as a new owner
// read it from the log after fencing the previous owners: the first request
// for such a session carries it as Request.After. last is kept, not copied.
func (b *Book) Resume(last map[string]int64) { b.resume = last }

// Shortfall returns the requests needed so that every session of demand
// has at least that many seqs, sorted by session ID.
func (b *Book) Shortfall(demand map[string]int) []Request {
	var out []Request
	for s, d := range demand {
		have := b.Remaining(s)
		if have >= int64(d) {
			continue
		}
		out = append(out, Request{SessionID: s, N: max(b.step, int64(d)) - have, After: b.resume[s]})
	}
	sortRequests(out)
	return out
}

// Low returns top-up requests for the sessions among touched that hold
// fewer than the low-water mark, sorted by session ID. Seqs taken since
// Begin count as held: until their batch commits they may yet be wasted, so
// held plus in-flight never exceeds one step.
func (b *Book) Low(touched []string) []Request {
	var out []Request
	for _, s := range touched {
		have := b.Remaining(s) + int64(len(b.taken[s]))
		if have < b.lowWater {
			out = append(out, Request{SessionID: s, N: b.step - have, After: b.resume[s]})
		}
	}
	sortRequests(out)
	return out
}

// Add installs grants. Ranges of a session are kept ascending; a grant below
// what the book already holds would mean the store handed out a range twice,
// which is reported as an error and not installed.
func (b *Book) Add(grants []Grant) error {
	for _, g := range grants {
		if g.Range.Len() <= 0 {
			return fmt.Errorf("segment: empty grant %+v", g)
		}
		r := b.sessions[g.SessionID]
		if r == nil {
			r = &ranges{}
			b.sessions[g.SessionID] = r
		}
		delete(b.resume, g.SessionID) // reserved: later requests extend
		if r.top >= g.Range.Lo {
			return fmt.Errorf("segment: grant %+v for session %s is not above seq %d already held", g.Range, g.SessionID, r.top)
		}
		r.top = g.Range.Hi
		if n := len(r.rs); n > 0 && r.rs[n-1].Hi+1 == g.Range.Lo {
			r.rs[n-1].Hi = g.Range.Hi // contiguous: extend
		} else {
			r.rs = append(r.rs, g.Range)
		}
	}
	return nil
}

// Take returns the next seq of session, or false when the book holds none.
func (b *Book) Take(session string) (int64, bool) {
	r := b.sessions[session]
	if r == nil || len(r.rs) == 0 {
		return 0, false
	}
	seq := r.rs[0].Lo
	if r.rs[0].Lo == r.rs[0].Hi {
		r.rs = r.rs[1:]
	} else {
		r.rs[0].Lo++
	}
	b.taken[session] = append(b.taken[session], seq)
	return seq, true
}

// Begin starts a batch: seqs taken from now on can be given back by Rewind.
func (b *Book) Begin() { clear(b.taken) }

// Commit forgets the seqs taken since Begin: they are spent for good.
func (b *Book) Commit() { clear(b.taken) }

// Rewind gives back every seq taken since Begin. Call it only when the
// batch that used them is known not to have committed (its Kafka transaction
// aborted), so the seqs were never visible to anybody.
func (b *Book) Rewind() {
	for s, seqs := range b.taken {
		r := b.sessions[s]
		if r == nil {
			r = &ranges{}
			b.sessions[s] = r
		}
		var back []Range
		for _, q := range seqs {
			if n := len(back); n > 0 && back[n-1].Hi+1 == q {
				back[n-1].Hi = q
				continue
			}
			back = append(back, Range{q, q})
		}
		if len(back) > 0 && len(r.rs) > 0 && back[len(back)-1].Hi+1 == r.rs[0].Lo {
			r.rs[0].Lo = back[len(back)-1].Lo
			back = back[:len(back)-1]
		}
		r.rs = append(back, r.rs...)
	}
	clear(b.taken)
}

// Unused returns, per session, the last range the book holds: the only
// part of its reservation that can be given back to the store, since it
// ends at the highest seq the book ever held.
func (b *Book) Unused() []Grant {
	var out []Grant
	for s, r := range b.sessions {
		if n := len(r.rs); n > 0 && r.rs[n-1].Hi == r.top {
			out = append(out, Grant{SessionID: s, Range: r.rs[n-1]})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].SessionID < out[j].SessionID })
	return out
}

// Sessions returns how many sessions the book holds ranges for.
func (b *Book) Sessions() int { return len(b.sessions) }

func sortRequests(rs []Request) {
	sort.Slice(rs, func(i, j int) bool { return rs[i].SessionID < rs[j].SessionID })
}
