package chaos

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// machineTime is the machine's busy and total CPU time so far, in
// /proc/stat's ticks (idle and iowait are not busy).
type machineTime struct{ busy, total float64 }

func readMachineTime() machineTime {
	var t machineTime
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return t
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 2 || f[0] != "cpu" {
		return t
	}
	for j, v := range f[1:] {
		x, _ := strconv.ParseFloat(v, 64)
		t.total += x
		if j != 3 && j != 4 {
			t.busy += x
		}
	}
	return t
}

// busyPct is the share of the time between a and b the machine was busy.
func busyPct(a, b machineTime) float64 {
	if b.total <= a.total {
		return 0
	}
	return 100 * (b.busy - a.busy) / (b.total - a.total)
}

// busyMeter samples the machine's CPU time at the start of the send phase
// and at each minute of it, to tell how busy the machine was per minute
// and over the whole phase.
type busyMeter struct {
	mu      sync.Mutex
	samples []machineTime // samples[i]: i minutes into the send phase
	end     machineTime
}

func (m *busyMeter) run(ctx context.Context, until time.Time) {
	m.mu.Lock()
	m.samples = append(m.samples, readMachineTime())
	m.mu.Unlock()
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	done := time.NewTimer(time.Until(until))
	defer done.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-done.C:
			m.mu.Lock()
			m.end = readMachineTime()
			m.mu.Unlock()
			return
		case <-t.C:
			m.mu.Lock()
			m.samples = append(m.samples, readMachineTime())
			m.mu.Unlock()
		}
	}
}

// minute returns the busy share of minute i of the send phase (0 when it
// was not sampled to its end).
func (m *busyMeter) minute(i int) float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if i+1 < len(m.samples) {
		return busyPct(m.samples[i], m.samples[i+1])
	}
	if i+1 == len(m.samples) && m.end.total > 0 {
		return busyPct(m.samples[i], m.end)
	}
	return 0
}

// whole returns the busy share over the send phase.
func (m *busyMeter) whole() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.samples) == 0 || m.end.total == 0 {
		return 0
	}
	return busyPct(m.samples[0], m.end)
}
