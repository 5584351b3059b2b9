package proc

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seqflow/seqflow/internal/config"
)

var (
	buildMu sync.Mutex
	built   = map[string]string{}
	binDir  string
)

// Build compiles the main package pkg (e.g. "./sequencer", relative to the
// repository root) once per test binary and returns the binary's path.
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
	bins, err := Compile(context.Background(), config.RepoRoot(), binDir, pkg)
	if err != nil {
		t.Fatal(err)
	}
	built[pkg] = bins[pkg]
	return bins[pkg]
}

// Start runs bin with env added to the test's environment. Output goes to a
// log file in the test's temp dir (or SEQFLOW_PROC_LOG_DIR, to keep it); the
// test's cleanup kills the process and prints the log's tail when the test
// failed.
func Start(t testing.TB, name, bin string, env ...string) *Proc {
	t.Helper()
	dir := os.Getenv("SEQFLOW_PROC_LOG_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	p := &Proc{Name: name, Bin: bin, Env: env,
		Log: filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_")+"-"+name+".log")}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
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

// FreeAddr returns a 127.0.0.1 address whose port was free a moment ago:
// an address where nothing listens, for a test of a dead peer. A process
// under test should listen on AnyPort and report its port (LoggedAddr):
// another test may take a port between FreeAddr and the bind.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// LoggedAddr waits up to 90 s for p to log msg with its listen address (see
// Proc.Addr and AnyPort) and returns it, failing the test otherwise. It
// pins the address: envVar=addr joins p.Env, so a restart comes back on the
// port the kernel gave the first run, where the test looks for it.
func LoggedAddr(t testing.TB, p *Proc, msg, envVar string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	addr, err := p.Addr(ctx, msg)
	if err != nil {
		t.Fatal(err)
	}
	p.Env = append(p.Env, envVar+"="+addr)
	return addr
}
