package msgid

import (
	"errors"
	"testing"
	"time"

	"github.com/bwmarrin/snowflake"
)

// fakeClock is an in-process clock for unit tests: Sleep advances it.
type fakeClock struct{ ms int64 }

func (c *fakeClock) NowMs() int64 { return c.ms }
func (c *fakeClock) Sleep(d time.Duration) {
	if d < time.Millisecond {
		d = time.Millisecond
	}
	c.ms += d.Milliseconds()
}

func TestGeneratorIncreasesAcrossBackwardsClock(t *testing.T) {
	c := &fakeClock{ms: 1_700_000_000_000}
	g, err := NewGenerator(7, c, 50*time.Millisecond, 0)
	if err != nil {
		t.Fatal(err)
	}
	g.SetValidUntil(c.ms + 3_600_000)
	var last snowflake.ID
	for i := 0; i < 10_000; i++ {
		switch i {
		case 3000:
			c.ms -= 20 // small step back: waited out
		case 6000:
			c.ms += 1
		}
		id, err := g.Next()
		if err != nil {
			t.Fatalf("id %d: %v", i, err)
		}
		if id <= last {
			t.Fatalf("id %d: %d is not above %d", i, id, last)
		}
		if id.Node() != 7 {
			t.Fatalf("node = %d, want 7", id.Node())
		}
		last = id
	}
	if got := last.Time(); got < 1_700_000_000_000 {
		t.Fatalf("timestamp %d lost", got)
	}
}

func TestGeneratorRefusesLongBackwardsClock(t *testing.T) {
	c := &fakeClock{ms: 1_700_000_000_000}
	g, _ := NewGenerator(1, c, 50*time.Millisecond, 0)
	g.SetValidUntil(c.ms + 3_600_000)
	first, err := g.Next()
	if err != nil {
		t.Fatal(err)
	}
	c.ms -= 5000
	_, err = g.Next()
	var back *ClockBackwardsError
	if !errors.As(err, &back) || back.LastMs-back.NowMs != 5000 {
		t.Fatalf("want ClockBackwardsError of 5000 ms, got %v", err)
	}
	c.ms += 5001
	next, err := g.Next()
	if err != nil || next <= first {
		t.Fatalf("after the clock caught up: id %d (first %d), err %v", next, first, err)
	}
}

func TestGeneratorStopsWhenLeaseLapses(t *testing.T) {
	c := &fakeClock{ms: 1_700_000_000_000}
	g, _ := NewGenerator(1, c, time.Second, 0)
	if _, err := g.Next(); !errors.Is(err, ErrLeaseLapsed) {
		t.Fatalf("no lease: want ErrLeaseLapsed, got %v", err)
	}
	g.SetValidUntil(c.ms + 10)
	if _, err := g.Next(); err != nil {
		t.Fatal(err)
	}
	c.ms += 11
	if _, err := g.Next(); !errors.Is(err, ErrLeaseLapsed) {
		t.Fatalf("past deadline: want ErrLeaseLapsed, got %v", err)
	}
}

func TestGeneratorStartsAfterPreviousHolderPromise(t *testing.T) {
	c := &fakeClock{ms: 1_700_000_000_000}
	promise := c.ms + 30 // previous holder may have issued ids up to here
	g, _ := NewGenerator(1, c, time.Second, promise)
	g.SetValidUntil(c.ms + 60_000)
	id, err := g.Next()
	if err != nil {
		t.Fatal(err)
	}
	if id.Time() < promise {
		t.Fatalf("id time %d precedes the previous holder's promise %d", id.Time(), promise)
	}
}

func TestGeneratorStepOverflowMovesToNextMs(t *testing.T) {
	c := &fakeClock{ms: 1_700_000_000_000}
	g, _ := NewGenerator(1, c, time.Second, 0)
	g.SetValidUntil(c.ms + 60_000)
	ids := make([]int64, 3*4096)
	if err := g.NextN(ids); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			t.Fatalf("ids[%d]=%d not above ids[%d]=%d", i, ids[i], i-1, ids[i-1])
		}
	}
	if c.ms < 1_700_000_000_002 {
		t.Fatalf("4096 ids per ms is the limit; clock should have moved, at %d", c.ms)
	}
}
