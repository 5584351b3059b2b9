// Package proctest builds seqflow's commands and runs them as real
// processes in integration tests, so tests can kill -9, SIGSTOP and restart
// them like an operator (or a crash) would.
package proctest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/seqflow/seqflow/internal/stack"
)

var (
	buildMu sync.Mutex
	built   = map[string]string{}
	binDir  string
)

// Build compiles the main package pkg (e.g. "./sequencer", relative to the
// repository root) once per test binary and returns the binary's path.
// SEQFLOW_PROC_RACE=1 builds it with the race detector (slow on 2 cores,
// so off by default: the packages' own tests run under -race).
func Build(t testing.TB, pkg string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := built[pkg]; ok {
		return p
	}
	if binDir == "" {
		d, err := os.MkdirTemp("", "seqflow-bin-")
		if err != nil {
			t.Fatalf("make bin dir: %v", err)
		}
		binDir = d
	}
	out := filepath.Join(binDir, strings.ReplaceAll(strings.Trim(pkg, "./"), "/", "-"))
	args := []string{"build", "-o", out}
	if os.Getenv("SEQFLOW_PROC_RACE") == "1" {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Dir = stack.Root()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	built[pkg] = out
	return out
}

// Proc is a running command.
type Proc struct {
	t    testing.TB
	Name string
	Bin  string
	Env  []string
	Log  string // path of combined stdout/stderr, appended across restarts
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Start runs bin with env added to the test's environment. Output goes to a
// log file in the test's temp dir; the test's cleanup kills the process and
// prints the log tail when the test failed.
func Start(t testing.TB, name, bin string, env ...string) *Proc {
	t.Helper()
	dir := os.Getenv("SEQFLOW_PROC_LOG_DIR") // keep logs after the test, for debugging
	if dir == "" {
		dir = t.TempDir()
	}
	p := &Proc{t: t, Name: name, Bin: bin, Env: env, Log: filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_")+"-"+name+".log")}
	p.start()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			b, _ := os.ReadFile(p.Log)
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			t.Logf("--- tail of %s log ---\n%s", name, b)
		}
	})
	return p
}

func (p *Proc) start() {
	p.t.Helper()
	f, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		p.t.Fatalf("open log: %v", err)
	}
	cmd := exec.Command(p.Bin)
	cmd.Env = append(os.Environ(), p.Env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		p.t.Fatalf("start %s: %v", p.Name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); f.Close(); close(done) }()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
}

// Restart starts the process again after it exited (or was killed).
func (p *Proc) Restart() {
	p.t.Helper()
	p.Kill()
	p.start()
}

// Running reports whether the process has not exited.
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Signal sends sig to the process.
func (p *Proc) Signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(sig)
	}
}

// Kill sends SIGKILL (after SIGCONT, so a stopped process dies too) and
// waits for the exit.
func (p *Proc) Kill() {
	p.Signal(syscall.SIGCONT)
	p.Signal(syscall.SIGKILL)
	p.wait(10 * time.Second)
}

// Stop sends SIGTERM and waits up to timeout for a clean exit, then kills.
func (p *Proc) Stop(timeout time.Duration) {
	p.Signal(syscall.SIGTERM)
	if !p.wait(timeout) {
		p.Kill()
	}
}

// Wait waits up to timeout for the process to exit and says whether it did.
func (p *Proc) Wait(timeout time.Duration) bool { return p.wait(timeout) }

func (p *Proc) wait(timeout time.Duration) bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return true
	}
	select {
	case <-done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// Pid returns the current process ID.
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// LogContains reports whether the log holds s.
func (p *Proc) LogContains(s string) bool {
	b, _ := os.ReadFile(p.Log)
	return strings.Contains(string(b), s)
}

// String names the process for messages.
func (p *Proc) String() string { return fmt.Sprintf("%s(pid %d)", p.Name, p.Pid()) }

// FreeAddr returns a 127.0.0.1 address whose port was free a moment ago,
// for a process under test to listen on.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
