// Package msgid issues snowflake message IDs (github.com/bwmarrin/snowflake
// layout: 41 bits of milliseconds since snowflake.Epoch, 10 bits of node ID,
// 12 bits of sequence). Node IDs are leased from PostgreSQL (see Lease), so
// no two running instances share one; a Generator stops issuing IDs when its
// lease lapses, and never issues a duplicate or smaller ID when the clock
// moves backwards: it waits a short step back out, and fails loudly on a
// longer one.
package msgid

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/bwmarrin/snowflake"
)

const (
	nodeBits = 10
	stepBits = 12
	stepMask = 1<<stepBits - 1
	// MaxNode is the highest node ID.
	MaxNode = 1<<nodeBits - 1
)

// ErrLeaseLapsed means the node lease is not (or no longer) valid: the
// generator must not issue IDs, since another instance may hold the node.
var ErrLeaseLapsed = errors.New("msgid: node lease lapsed")

// ClockBackwardsError reports a clock that moved back more than the
// generator is willing to wait out.
type ClockBackwardsError struct {
	LastMs, NowMs int64
}

func (e *ClockBackwardsError) Error() string {
	return fmt.Sprintf("msgid: clock moved backwards by %d ms (last id at %d, now %d); refusing to issue ids", e.LastMs-e.NowMs, e.LastMs, e.NowMs)
}

// Clock is the time source; tests inject one.
type Clock interface {
	NowMs() int64
	Sleep(time.Duration)
}

type wallClock struct{}

func (wallClock) NowMs() int64          { return time.Now().UnixMilli() }
func (wallClock) Sleep(d time.Duration) { time.Sleep(d) }

// WallClock is the system clock.
var WallClock Clock = wallClock{}

// Generator issues IDs for one node. Safe for concurrent use.
type Generator struct {
	mu      sync.Mutex
	clock   Clock
	node    int64
	lastMs  int64
	step    int64
	maxWait time.Duration
	// validUntilMs is the lease deadline on this clock; no ID carries a
	// later timestamp. Zero means no lease check (tests of the layout only).
	validUntilMs int64
}

// NewGenerator returns a generator for node that waits out a backwards
// clock of at most maxWait. notBeforeMs is the earliest timestamp it may use
// (the previous holder's promise, from the lease).
func NewGenerator(node int64, clock Clock, maxWait time.Duration, notBeforeMs int64) (*Generator, error) {
	if node < 0 || node > MaxNode {
		return nil, fmt.Errorf("msgid: node %d out of [0, %d]", node, MaxNode)
	}
	if clock == nil {
		clock = WallClock
	}
	return &Generator{clock: clock, node: node, lastMs: notBeforeMs, step: stepMask, maxWait: maxWait}, nil
}

// Node returns the node ID.
func (g *Generator) Node() int64 { return g.node }

// SetValidUntil moves the lease deadline (milliseconds on the generator's
// clock). Lease renewal calls it; 0 disables issuing.
func (g *Generator) SetValidUntil(ms int64) {
	g.mu.Lock()
	g.validUntilMs = ms
	g.mu.Unlock()
}

// Next returns a new ID, strictly greater than every ID this generator
// issued before.
func (g *Generator) Next() (snowflake.ID, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.next()
}

// NextN fills ids with len(ids) new IDs in increasing order.
func (g *Generator) NextN(ids []int64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := range ids {
		id, err := g.next()
		if err != nil {
			return err
		}
		ids[i] = int64(id)
	}
	return nil
}

func (g *Generator) next() (snowflake.ID, error) {
	now := g.clock.NowMs()
	if now < g.lastMs {
		back := time.Duration(g.lastMs-now) * time.Millisecond
		if back > g.maxWait {
			return 0, &ClockBackwardsError{LastMs: g.lastMs, NowMs: now}
		}
		g.clock.Sleep(back)
		if now = g.clock.NowMs(); now < g.lastMs {
			return 0, &ClockBackwardsError{LastMs: g.lastMs, NowMs: now}
		}
	}
	if now == g.lastMs {
		if g.step == stepMask { // this millisecond is used up
			for now <= g.lastMs {
				g.clock.Sleep(100 * time.Microsecond)
				now = g.clock.NowMs()
			}
			g.step = 0
		} else {
			g.step++
		}
	} else {
		g.step = 0
	}
	if g.validUntilMs == 0 || now > g.validUntilMs {
		return 0, ErrLeaseLapsed
	}
	g.lastMs = now
	t := now - snowflake.Epoch
	return snowflake.ID(t<<(nodeBits+stepBits) | g.node<<stepBits | g.step), nil
}
