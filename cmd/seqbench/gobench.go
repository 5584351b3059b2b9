package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// BenchLine is one result line of `go test -bench`: the benchmark's name
// without the -GOMAXPROCS suffix and its metrics by unit.
type BenchLine struct {
	Name    string
	N       int64
	Metrics map[string]float64
}

// ParseBench reads the result lines of `go test -bench` output; other
// lines (logs, PASS, ok) are skipped.
func ParseBench(out []byte) []BenchLine {
	var lines []BenchLine
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil || n <= 0 {
			continue
		}
		name := f[0]
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		l := BenchLine{Name: name, N: n, Metrics: map[string]float64{}}
		ok := true
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				ok = false
				break
			}
			l.Metrics[f[i+1]] = v
		}
		if ok {
			lines = append(lines, l)
		}
	}
	return lines
}

// metric returns unit of the last line named name.
func metric(lines []BenchLine, name, unit string) (float64, error) {
	for i := len(lines) - 1; i >= 0; i-- {
		if lines[i].Name == name {
			if v, ok := lines[i].Metrics[unit]; ok {
				return v, nil
			}
		}
	}
	return 0, fmt.Errorf("%s %s: %w", name, unit, ErrNoResult)
}

// goBench runs `go test -run XXX -bench <pattern> <args> <pkg>` in the
// repository root with extra env, logs its output to logPath and returns
// the parsed result lines. The command is returned for the doc.
func (b *Bench) goBench(ctx context.Context, logPath string, env []string, pkg, pattern string, args ...string) ([]BenchLine, error) {
	argv := append([]string{"test", "-run", "XXX", "-bench", pattern}, args...)
	argv = append(argv, pkg)
	cmd := exec.CommandContext(ctx, "go", argv...)
	cmd.Dir = b.cfg.Root
	cmd.Env = append(os.Environ(), append([]string{"SEQFLOW_REQUIRE_STACK=1"}, env...)...)
	out, err := cmd.CombinedOutput()
	if werr := os.WriteFile(logPath, out, 0o644); werr != nil {
		b.log.Warn("write benchmark log", "path", logPath, "err", werr)
	}
	if err != nil {
		return nil, fmt.Errorf("go %s (log %s): %w", strings.Join(argv, " "), logPath, err)
	}
	return ParseBench(out), nil
}
