package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// clkTck is USER_HZ, the unit of /proc/<pid>/stat times (100 on Linux).
const clkTck = 100

// cpuSnapshot is CPU seconds used so far, by group of processes, plus the
// whole machine's busy and total seconds from /proc/stat, and when it was
// taken.
type cpuSnapshot struct {
	byGroup            map[string]float64
	busy, total, steal float64
	at                 time.Time
}

// takeCPU reads every process's user+system time and sums it by group:
// the named pids (the services, this process), then by command name
// (postgres, redis-server; java whose command line has kafka/single is
// the stack's Kafka), everything else is "other" (other engineers' work).
// Processes that ended between snapshots drop out, so the deltas are a
// lower bound for short-lived ones.
func takeCPU(named map[int]string) cpuSnapshot {
	s := cpuSnapshot{byGroup: map[string]float64{}, at: time.Now()}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		b, err := os.ReadFile(d + "/stat")
		if err != nil {
			continue
		}
		// comm may hold spaces: fields start after the last ')'.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		open := strings.IndexByte(string(b), '(')
		comm := string(b[open+1 : i])
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 13 {
			continue
		}
		ut, _ := strconv.ParseFloat(f[11], 64)
		st, _ := strconv.ParseFloat(f[12], 64)
		group, ok := named[pid]
		switch {
		case ok:
		case comm == "postgres", comm == "redis-server":
			group = comm
		case comm == "java":
			group = "java (other)"
			if c, err := os.ReadFile(d + "/cmdline"); err == nil && strings.Contains(string(c), "kafka/single") {
				group = "kafka"
			}
		default:
			group = "other"
		}
		s.byGroup[group] += (ut + st) / clkTck
	}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		f := strings.Fields(line)
		for j, v := range f[1:] {
			x, _ := strconv.ParseFloat(v, 64)
			s.total += x / clkTck
			if j != 3 && j != 4 { // idle, iowait
				s.busy += x / clkTck
			}
			if j == 7 { // steal: runnable, but the hypervisor ran another guest
				s.steal += x / clkTck
			}
		}
	}
	return s
}

// busyPct is the share of the machine's time between two snapshots that
// was not idle, in percent.
func busyPct(before, after cpuSnapshot) float64 {
	return 100 * (after.busy - before.busy) / max(after.total-before.total, 1e-9)
}

// groupSecs is the CPU seconds a group used between two snapshots.
func groupSecs(before, after cpuSnapshot, group string) float64 {
	return max(after.byGroup[group]-before.byGroup[group], 0)
}

// cpuTable renders the CPU used between two snapshots, by group, per
// 1,000 messages.
func cpuTable(before, after cpuSnapshot, msgs float64) string {
	type row struct {
		name string
		secs float64
	}
	var rows []row
	var sum float64
	for g, v := range after.byGroup {
		d := v - before.byGroup[g]
		if d > 0.005 {
			rows = append(rows, row{g, d})
			sum += d
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].secs > rows[j].secs })
	var b strings.Builder
	total := after.total - before.total
	steal := after.steal - before.steal
	fmt.Fprintf(&b, "Machine busy %.0f%% of %.0f CPU-seconds (`/proc/stat`) during the run; %.1f%% of them stolen by the hypervisor for other guests (steal).\n\n", busyPct(before, after), total, 100*steal/max(total, 1e-9))
	b.WriteString("| process group | CPU s | share of CPU used | CPU ms per 1,000 msgs |\n|---|---|---|---|\n")
	for _, r := range rows {
		per := "—"
		if msgs > 0 {
			per = fmt.Sprintf("%.1f", 1000*1000*r.secs/msgs)
		}
		fmt.Fprintf(&b, "| %s | %.1f | %.0f%% | %s |\n", r.name, r.secs, 100*r.secs/sum, per)
	}
	return b.String()
}
