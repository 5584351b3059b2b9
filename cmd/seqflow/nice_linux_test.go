package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// TestLowerPriorityAllThreads: in a child process (so the test binary
// keeps its priority), lowerPriority gives the threads that exist and
// those the runtime starts later the nice value.
func TestLowerPriorityAllThreads(t *testing.T) {
	if os.Getenv("SEQFLOW_NICE_CHILD") == "1" {
		if err := lowerPriority(7); err != nil {
			fmt.Println("lowerPriority:", err)
			os.Exit(1)
		}
		// Threads started after it: each locked goroutine holds one.
		var wg sync.WaitGroup
		release := make(chan struct{})
		for range 4 {
			wg.Add(1)
			go func() {
				lockThread()
				wg.Done()
				<-release
			}()
		}
		wg.Wait()
		nices, err := threadNices()
		close(release)
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		fmt.Println("nices", nices)
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestLowerPriorityAllThreads$")
	cmd.Env = append(os.Environ(), "SEQFLOW_NICE_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	line := strings.TrimSpace(string(out))
	i := strings.Index(line, "nices [")
	if i < 0 {
		t.Fatalf("child printed %q", line)
	}
	fields := strings.Fields(strings.Trim(line[i+len("nices "):strings.Index(line[i:], "]")+i], "[]"))
	if len(fields) < 5 {
		t.Fatalf("only %d threads seen: %q", len(fields), line)
	}
	for _, f := range fields {
		if f != "7" {
			t.Fatalf("a thread with nice %s, want 7 for all: %q", f, line)
		}
	}
	if err := lowerPriority(20); err == nil {
		t.Error("nice 20 accepted")
	}
}

// threadNices reads each thread's nice value (field 19 of its stat).
func threadNices() ([]int, error) {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil, err
	}
	var out []int
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + task.Name() + "/stat")
		if err != nil {
			continue // ended
		}
		// The command name (field 2) may hold spaces: count after ')'.
		rest := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		n, err := strconv.Atoi(rest[16]) // field 19 is the 17th after the name
		if err != nil {
			return nil, fmt.Errorf("stat of %s: %v", task.Name(), err)
		}
		out = append(out, n)
	}
	return out, nil
}

func lockThread() { runtime.LockOSThread() }
