package chaos

import (
	"context"
	"math"
	"os"
	"path/filepath"
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

// procCPU returns the CPU seconds (user and system) pid used so far, 0
// when it is gone.
func procCPU(pid int) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// comm may hold spaces: the fields after it start past the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}

// commPids returns the pids whose command name is comm.
func commPids(comm string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/comm"); err == nil && strings.TrimSpace(string(b)) == comm {
			out = append(out, pid)
		}
	}
	return out
}

// groupCPU is the CPU seconds used so far by each group of the run's
// processes: every instance of each service, the brokers and the
// controllers of the three-broker cluster, PostgreSQL and Redis (all
// their processes on the machine) and this process (the load, its
// clients, the proxies and the probe).
func (s *suite) groupCPU() map[string]float64 {
	out := map[string]float64{}
	for svc, ps := range s.procs {
		for _, p := range ps {
			out[svc] += procCPU(p.Pid())
		}
	}
	for _, n := range []string{"k3-1", "k3-2", "k3-3", "k3c-1", "k3c-2", "k3c-3"} {
		b, err := os.ReadFile(filepath.Join(s.o.Root, ".data", "kafka", n, "kafka.pid"))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			continue
		}
		g := "kafka brokers"
		if strings.HasPrefix(n, "k3c-") {
			g = "kafka controllers"
		}
		out[g] += procCPU(pid)
	}
	for _, comm := range []string{"postgres", "redis-server"} {
		for _, pid := range commPids(comm) {
			out[comm] += procCPU(pid)
		}
	}
	out["load, proxies and probe"] += procCPU(os.Getpid())
	return out
}

// coresBetween turns two groupCPU snapshots secs apart into cores.
func coresBetween(a, b map[string]float64, secs float64) map[string]float64 {
	out := map[string]float64{}
	if secs <= 0 {
		return out
	}
	for g, v := range b {
		out[g] = math.Round(1000*max(v-a[g], 0)/secs) / 1000
	}
	return out
}

// lagMeter samples the services' consumer groups' lag (records behind
// the log end, by committed offsets) every 10s of the send phase and
// keeps each minute's largest per group.
type lagMeter struct {
	mu  sync.Mutex
	max []map[string]int64 // by minute: group → largest lag seen
}

func (s *suite) measureLag(ctx context.Context, m *lagMeter, until time.Time) {
	groups := map[string]string{"chaos-" + s.id + "-seq": "sequencer", "chaos-" + s.id + "-per": "persister", "chaos-" + s.id + "-push": "pusher"}
	names := make([]string, 0, len(groups))
	for g := range groups {
		names = append(names, g)
	}
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for time.Now().Before(until) {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		lags, err := s.adm.Lag(lctx, names...)
		cancel()
		if err != nil {
			continue
		}
		i := max(int(time.Since(s.sendStart)/time.Minute), 0)
		m.mu.Lock()
		for len(m.max) <= i {
			m.max = append(m.max, map[string]int64{})
		}
		for g, l := range lags {
			if l.Error() == nil {
				m.max[i][groups[g]] = max(m.max[i][groups[g]], l.Lag.Total())
			}
		}
		m.mu.Unlock()
	}
}

// minute returns minute i's largest lag per group (nil: not sampled).
func (m *lagMeter) minute(i int) map[string]int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if i < len(m.max) {
		return m.max[i]
	}
	return nil
}
