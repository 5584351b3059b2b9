package client

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/seqflow/seqflow/internal/wire"
)

func ev(session string, seq int64) wire.Message {
	return wire.Message{SessionID: session, Seq: seq, Kind: wire.KindMessage, MsgID: fmt.Sprint(seq)}
}

func seqs(ms []wire.Message) []int64 {
	out := make([]int64, len(ms))
	for i, m := range ms {
		out[i] = m.Seq
	}
	return out
}

func TestTrackerPush(t *testing.T) {
	t0 := time.Unix(1000, 0)
	cases := []struct {
		name      string
		cursors   map[string]int64
		skip      bool
		pushes    []int64
		delivered []int64
		dups      int
		fills     int
	}{
		{name: "in order from the first seq", pushes: []int64{1, 2, 3}, delivered: []int64{1, 2, 3}},
		{name: "a repeated push is dropped", pushes: []int64{1, 2, 2, 1, 3}, delivered: []int64{1, 2, 3}, dups: 2},
		{name: "a gap holds later pushes and starts one fill", pushes: []int64{1, 3, 4}, delivered: []int64{1}, fills: 1},
		{name: "the missing seq arriving late closes the gap", pushes: []int64{1, 3, 4, 2}, delivered: []int64{1, 2, 3, 4}, fills: 1},
		{name: "a buffered repeat is a duplicate", pushes: []int64{1, 3, 3}, delivered: []int64{1}, dups: 1, fills: 1},
		{name: "resume after a cursor", cursors: map[string]int64{"s": 5}, pushes: []int64{4, 5, 6}, delivered: []int64{6}, dups: 2},
		{name: "unknown session with history starts at 0", pushes: []int64{7}, fills: 1},
		{name: "unknown session skipping history starts at its first push", skip: true, pushes: []int64{7, 8}, delivered: []int64{7, 8}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := newTracker(c.cursors, c.skip)
			var got []int64
			dups, fills := 0, 0
			for _, s := range c.pushes {
				r := tr.push(ev("s", s), t0)
				got = append(got, seqs(r.deliver)...)
				if r.duplicate {
					dups++
				}
				if r.startFill {
					fills++
				}
			}
			if !slices.Equal(got, c.delivered) || dups != c.dups || fills != c.fills {
				t.Fatalf("delivered %v dups %d fills %d, want %v %d %d", got, dups, fills, c.delivered, c.dups, c.fills)
			}
		})
	}
}

func TestTrackerSynced(t *testing.T) {
	t0 := time.Unix(1000, 0)
	page := func(ss ...int64) []wire.Message {
		var out []wire.Message
		for _, s := range ss {
			out = append(out, ev("s", s))
		}
		return out
	}
	cases := []struct {
		name     string
		pushes   []int64
		page     []int64
		hasMore  bool
		at       time.Time
		deliver  []int64
		done     bool
		gaveUp   bool
		nextFrom int64
	}{
		{name: "the store fills the hole", pushes: []int64{1, 4}, page: []int64{2, 3, 4}, deliver: []int64{2, 3, 4}, done: true, nextFrom: 4},
		{name: "a skipped seq is known empty once the store passes it", pushes: []int64{1, 4}, page: []int64{2, 4}, deliver: []int64{2, 4}, done: true, nextFrom: 4},
		{name: "the store lags: fill goes on", pushes: []int64{1, 4}, page: []int64{2}, deliver: []int64{2}, nextFrom: 2},
		{name: "the store lags but the next push follows its page", pushes: []int64{1, 3}, page: []int64{2}, deliver: []int64{2, 3}, done: true, nextFrom: 3},
		{name: "more pages to come", pushes: []int64{1, 9}, page: []int64{2, 3}, hasMore: true, deliver: []int64{2, 3}, nextFrom: 3},
		{name: "gap timeout hands over past the hole", pushes: []int64{1, 5, 7}, page: []int64{2}, at: t0.Add(11 * time.Second), deliver: []int64{2, 5, 7}, done: true, gaveUp: true, nextFrom: 7},
		{name: "no gap timeout while pages remain", pushes: []int64{1, 5}, page: []int64{2}, hasMore: true, at: t0.Add(11 * time.Second), deliver: []int64{2}, nextFrom: 2},
		{name: "a page overlapping what pushes delivered", pushes: []int64{1, 2, 4}, page: []int64{1, 2, 3}, deliver: []int64{3, 4}, done: true, nextFrom: 4},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := newTracker(nil, false)
			for _, s := range c.pushes {
				tr.push(ev("s", s), t0)
			}
			at := c.at
			if at.IsZero() {
				at = t0.Add(time.Second)
			}
			r := tr.synced("s", page(c.page...), c.hasMore, at, 10*time.Second)
			if got := seqs(r.deliver); !slices.Equal(got, c.deliver) || r.done != c.done || r.gaveUp != c.gaveUp || tr.fillFrom("s") != c.nextFrom {
				t.Fatalf("deliver %v done %v gaveUp %v next %d, want %v %v %v %d", got, r.done, r.gaveUp, tr.fillFrom("s"), c.deliver, c.done, c.gaveUp, c.nextFrom)
			}
		})
	}
}

func TestTrackerCatchUp(t *testing.T) {
	t0 := time.Unix(1000, 0)
	cases := []struct {
		name    string
		cursors map[string]int64
		skip    bool
		changes []wire.SessionChange
		held    []wire.Message
		fill    []string
		haves   map[string]int64
	}{
		{name: "moved sessions are filled, others not", cursors: map[string]int64{"a": 3, "b": 5},
			changes: []wire.SessionChange{{SessionID: "a", MaxSeq: 7}, {SessionID: "b", MaxSeq: 5}},
			fill:    []string{"a"}, haves: map[string]int64{"a": 3, "b": 5}},
		{name: "a new session is synced from 0", changes: []wire.SessionChange{{SessionID: "n", MaxSeq: 2}}, fill: []string{"n"}, haves: map[string]int64{"n": 0}},
		{name: "a new session skipping history starts at max_seq", skip: true, changes: []wire.SessionChange{{SessionID: "n", MaxSeq: 9}}, haves: map[string]int64{"n": 9}},
		{name: "pushes held during catch-up wait for the fill", cursors: map[string]int64{"a": 3},
			changes: []wire.SessionChange{{SessionID: "a", MaxSeq: 5}}, held: []wire.Message{ev("a", 6)},
			fill: []string{"a"}, haves: map[string]int64{"a": 3}},
		{name: "the next seq is not held", cursors: map[string]int64{"a": 3},
			changes: []wire.SessionChange{{SessionID: "a", MaxSeq: 4}}, held: []wire.Message{ev("a", 4)}, haves: map[string]int64{"a": 4}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := newTracker(c.cursors, c.skip)
			tr.holding = true
			for _, m := range c.held {
				if r := tr.push(m, t0); r.startFill {
					t.Fatal("a fill started while holding")
				}
			}
			fill := tr.catchUp(c.changes, t0)
			if !slices.Equal(fill, c.fill) {
				t.Fatalf("fill %v, want %v", fill, c.fill)
			}
			for s, want := range c.haves {
				if got := tr.cursor(s); got != want {
					t.Fatalf("cursor %s = %d, want %d", s, got, want)
				}
			}
			if tr.holding {
				t.Fatal("still holding after catch-up")
			}
		})
	}
}
