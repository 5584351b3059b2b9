package main

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// lowerPriority gives every thread of this process the scheduling nice
// value n (0..19), so a background copy yields the CPU to the live
// services on the same machine. Linux keeps a nice value per thread and a
// new thread inherits its creator's, so once the threads that exist are
// lowered the runtime's later threads are too.
func lowerPriority(n int) error {
	if n <= 0 {
		return nil
	}
	if n > 19 {
		return fmt.Errorf("nice %d: at most 19", n)
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return fmt.Errorf("nice: %w", err)
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		// A thread that ended since the listing is not an error.
		if err := syscall.Setpriority(syscall.PRIO_PROCESS, tid, n); err != nil && err != syscall.ESRCH {
			return fmt.Errorf("nice %d for thread %d: %w", n, tid, err)
		}
	}
	return nil
}
