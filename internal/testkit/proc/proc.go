// Package proc builds seqflow's commands and runs them as real processes,
// so integration tests, the chaos suite and the benchmark can kill -9,
// SIGSTOP and restart them like an operator (or a crash) would. It is the
// test kit's one process launcher: the error-returning core here serves
// commands (cmd/seqchaos, cmd/seqbench), and testing.go wraps it for tests.
package proc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/seqflow/seqflow/internal/config"
	"github.com/seqflow/seqflow/internal/peerauth"
)

// localPeerEnv is the local stack's peer key ring settings
// (.data/local.env) that the environment does not set already, so the
// services started here reach each other's push ports wherever they were
// started from. A stack started before `up` made a ring has none; the
// services of this process then share a ring made for it.
func localPeerEnv() []string {
	l := config.LoadLocal() // the environment's values win over the file's
	set := map[string]string{"SEQFLOW_PEER_KEYS_FILE": l.PeerKeysFile, "SEQFLOW_PEER_KEYS": l.PeerKeys, "SEQFLOW_PEER_AUTH": l.PeerAuth}
	var out []string
	for k, v := range set {
		if v != "" && os.Getenv(k) == "" {
			out = append(out, k+"="+v)
		}
	}
	if l.PeerKeysFile == "" && l.PeerKeys == "" && l.PeerAuth == "" {
		out = append(out, "SEQFLOW_PEER_KEYS="+processRing())
	}
	return out
}

// processRing is the ring of localPeerEnv when the stack has none.
var processRing = sync.OnceValue(func() string { return peerauth.NewEntry("proc") })

// Compile builds the main packages pkgs (e.g. "./sequencer", relative to
// root) into dir and returns their binaries by package. SEQFLOW_PROC_RACE=1
// builds them with the race detector (slow on 2 cores, so off by default:
// the packages' own tests run under -race).
func Compile(ctx context.Context, root, dir string, pkgs ...string) (map[string]string, error) {
	out := map[string]string{}
	for _, pkg := range pkgs {
		bin := filepath.Join(dir, strings.ReplaceAll(strings.Trim(pkg, "./"), "/", "-"))
		args := []string{"build", "-o", bin}
		if os.Getenv("SEQFLOW_PROC_RACE") == "1" {
			args = append(args, "-race")
		}
		cmd := exec.CommandContext(ctx, "go", append(args, pkg)...)
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
		}
		out[pkg] = bin
	}
	return out, nil
}

// Proc is a command run as a process. Set the exported fields, then Start.
// Output is appended to Log across restarts, each start marked by a line.
type Proc struct {
	Name  string   // for messages and logs, e.g. "sequencer-a"
	Bin   string   // the binary
	Args  []string // its arguments
	Env   []string // added to this process's environment; later entries win
	Log   string   // path of the combined stdout and stderr
	Admin string   // host:port of its /readyz, empty for none

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	err  error // the exit status, once done is closed
}

// startMark begins each run's part of the log.
const startMark = "--- proc: start "

// Start runs the process. It must not be running.
func (p *Proc) Start() error {
	f, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open log of %s: %w", p.Name, err)
	}
	fmt.Fprintf(f, startMark+"%s at %s\n", p.Name, time.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command(p.Bin, p.Args...)
	cmd.Env = append(append(os.Environ(), localPeerEnv()...), p.Env...)
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group, so a signal to the test or the suite's
	// terminal does not reach it: only this package stops it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	done := make(chan struct{})
	go func() {
		err := cmd.Wait()
		f.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(done)
	}()
	p.mu.Lock()
	p.cmd, p.done, p.err = cmd, done, nil
	p.mu.Unlock()
	return nil
}

// Restart kills the process if it runs and starts it again.
func (p *Proc) Restart() error {
	p.Kill()
	return p.Start()
}

// Signal sends sig to the process; it does nothing before Start.
func (p *Proc) Signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(sig)
	}
}

// Kill sends SIGKILL (after SIGCONT, so a stopped process dies too) and
// waits up to 10 s for the exit.
func (p *Proc) Kill() {
	p.Signal(syscall.SIGCONT)
	p.Signal(syscall.SIGKILL)
	p.Wait(10 * time.Second)
}

// Stop asks for a clean exit (SIGCONT, then SIGTERM) and kills the process
// if it has not exited after timeout.
func (p *Proc) Stop(timeout time.Duration) {
	p.Signal(syscall.SIGCONT)
	p.Signal(syscall.SIGTERM)
	if !p.Wait(timeout) {
		p.Kill()
	}
}

// Wait waits up to timeout for the process to exit and says whether it
// did (true when it never started).
func (p *Proc) Wait(timeout time.Duration) bool {
	done := p.Done()
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

// Done is closed when the current run exits; nil before Start.
func (p *Proc) Done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		return nil
	}
	return p.done
}

// Err is the exit status of the last run once it has exited.
func (p *Proc) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Running reports whether the process was started and has not exited.
func (p *Proc) Running() bool {
	done := p.Done()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// Pid returns the current process ID, 0 before Start.
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

// AnyPort is a listen address that lets the kernel pick a free port. A
// service given it logs the port it got (Addr reads it back), so two tests
// never race for one port: a port that "was free a moment ago" may be
// another test's by the time the process binds it.
const AnyPort = "127.0.0.1:0"

// Addr waits until the current run logs a line with message msg ("admin
// listening", "gateway listening") and returns its "addr" attribute. It
// fails when the process exits first or ctx ends.
func (p *Proc) Addr(ctx context.Context, msg string) (string, error) {
	for {
		if addr := p.loggedAddr(msg); addr != "" {
			return addr, nil
		}
		if !p.Running() {
			return "", fmt.Errorf("%s: %w before logging %q (%v; see %s)", p.Name, ErrExited, msg, p.Err(), p.Log)
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("%s did not log %q: %w (see %s)", p.Name, msg, ctx.Err(), p.Log)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// loggedAddr is the "addr" of the first line of the current run whose
// message is msg, or "".
func (p *Proc) loggedAddr(msg string) string {
	b, _ := os.ReadFile(p.Log)
	if i := bytes.LastIndex(b, []byte(startMark)); i >= 0 {
		b = b[i:]
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var rec struct{ Msg, Addr string }
		if json.Unmarshal(line, &rec) == nil && rec.Msg == msg && rec.Addr != "" {
			return rec.Addr
		}
	}
	return ""
}

// ErrExited is returned by Ready and WaitReady for a process that is not
// running.
var ErrExited = errors.New("process exited")

// Ready asks the process's /readyz once.
func (p *Proc) Ready(ctx context.Context) error {
	if !p.Running() {
		return fmt.Errorf("%s: %w (%v; see %s)", p.Name, ErrExited, p.Err(), p.Log)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.Admin+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s /readyz: %s", p.Name, resp.Status)
	}
	return nil
}

// WaitReady polls /readyz every 200 ms until it answers 200, the process
// exits (ErrExited) or ctx ends.
func (p *Proc) WaitReady(ctx context.Context) error {
	for {
		err := p.Ready(ctx)
		if err == nil || errors.Is(err, ErrExited) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w (last: %v)", p.Name, ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
