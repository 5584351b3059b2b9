package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// build compiles the main packages pkgs (e.g. "./sequencer", relative to
// root) into dir and returns their paths by package. internal/proctest does
// the same for tests; the suite is a library run by a command, so it cannot
// use a testing.TB.
func build(ctx context.Context, root, dir string, pkgs ...string) (map[string]string, error) {
	out := map[string]string{}
	for _, pkg := range pkgs {
		bin := filepath.Join(dir, strings.ReplaceAll(strings.Trim(pkg, "./"), "/", "-"))
		cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg)
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
		}
		out[pkg] = bin
	}
	return out, nil
}

// proc is a service instance run as a real process, so a fault can be a
// real kill -9 or SIGSTOP. Output is appended to Log across restarts.
type proc struct {
	Name string // e.g. "sequencer-a"
	Kind string // service type: sequencer, persister, pusher, gateway
	Bin  string
	Args []string
	Env  []string
	Log  string
	// Admin is the /readyz address, empty for none.
	Admin string

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	stopped bool // SIGSTOPped
}

func (p *proc) start() error {
	f, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open log of %s: %w", p.Name, err)
	}
	fmt.Fprintf(f, "--- chaos: start %s at %s\n", p.Name, time.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command(p.Bin, p.Args...)
	cmd.Env = append(os.Environ(), p.Env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); f.Close(); close(done) }()
	p.mu.Lock()
	p.cmd, p.done, p.stopped = cmd, done, false
	p.mu.Unlock()
	return nil
}

func (p *proc) signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(sig)
		switch sig {
		case syscall.SIGSTOP:
			p.stopped = true
		case syscall.SIGCONT:
			p.stopped = false
		}
	}
}

// kill sends SIGKILL (after SIGCONT, so a stopped process dies too) and
// waits for the exit.
func (p *proc) kill() {
	p.signal(syscall.SIGCONT)
	p.signal(syscall.SIGKILL)
	p.wait(10 * time.Second)
}

// stop asks for a clean exit (SIGTERM), killing after timeout.
func (p *proc) stop(timeout time.Duration) {
	p.signal(syscall.SIGCONT)
	p.signal(syscall.SIGTERM)
	if !p.wait(timeout) {
		p.kill()
	}
}

func (p *proc) wait(timeout time.Duration) bool {
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

// running reports whether the process has not exited.
func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

func (p *proc) String() string { return fmt.Sprintf("%s(pid %d)", p.Name, p.pid()) }
