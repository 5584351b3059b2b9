package load

import (
	"slices"
	"testing"
	"time"
)

func TestWindowMedians(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	// Out of order, as ACKs come: windows [0,100) = {10, 30, 20}, [100,200)
	// is empty, [200,300) = {90, 70}.
	tl := []TimelinePoint{{at(50), 30}, {at(0), 10}, {at(210), 90}, {at(99), 20}, {at(299), 70}}
	got := WindowMedians(tl, 100*time.Millisecond)
	if want := []float64{20, 70}; !slices.Equal(got, want) {
		t.Fatalf("window medians %v, want %v (nearest-rank medians of the non-empty windows, in time order)", got, want)
	}
	if got := WindowMedians(nil, time.Second); got != nil {
		t.Fatalf("no points: %v", got)
	}
}
