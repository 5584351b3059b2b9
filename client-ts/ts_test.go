// Package clientts runs the TypeScript SDK's tests (client-ts/test, with
// Node's test runner) against the whole pipeline, so `go test ./...` and
// `go tool task test` run them: it installs the npm packages from
// package-lock.json when node_modules does not match it, compiles with the
// pinned tsc, starts sequencer, persister, pusher and a producer-gw as
// processes on the local stack (internal/testkit/clienttest), and runs
// `node --test` with the gateway's URL and a control URL through which the
// Node tests mint tokens, kill -9 and restart the gateway, and read the
// message store. Node's result decides: a failed, cancelled or skipped
// Node test fails this test. Then headless Chromium loads the compiled
// browser entry against the same gateway (browser_test.go).
package clientts

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/seqflow/seqflow/internal/auth"
	"github.com/seqflow/seqflow/internal/testkit/clienttest"
)

// TestTypeScriptSDK builds the SDK and runs its unit and integration tests.
func TestTypeScriptSDK(t *testing.T) {
	began := time.Now()
	build := make(chan error, 1)
	// npm ci and tsc run while the pipeline starts: both are slow on 2 cores.
	go func() { build <- npmBuild() }()
	p := clienttest.Start(t)
	gw := p.Gateway(t, "ts-gw")
	if err := <-build; err != nil {
		t.Fatal(err)
	}
	t.Logf("pipeline up and SDK built in %v", time.Since(began).Round(time.Millisecond))

	signer, err := auth.NewHS256Signer([]byte(clienttest.Secret))
	if err != nil {
		t.Fatal(err)
	}
	ctl := &control{p: p, gw: gw, signer: signer}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: ctl.mux()}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	t.Run("node", func(t *testing.T) { runNode(t, gw, ln.Addr().String(), began) })
	ctl.unpause(t)
	t.Run("browser", func(t *testing.T) { runBrowser(t, gw, signer) })
}

// runNode runs the compiled Node tests (unit and integration) with the
// gateway's URL and the control URL.
func runNode(t *testing.T, gw *clienttest.Gateway, controlAddr string, began time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), 80*time.Second)
	defer cancel()
	files, err := filepath.Glob(filepath.Join(".build", "test", "*", "*.test.js"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no compiled tests under .build/test (%v)", err)
	}
	cmd := exec.CommandContext(ctx, "node", append([]string{"--test", "--test-reporter=tap"}, files...)...)
	cmd.Env = append(os.Environ(),
		"SEQFLOW_TS_GATEWAY="+gw.URL,
		"SEQFLOW_TS_CONTROL=http://"+controlAddr,
		"SEQFLOW_REQUIRE_STACK=1", // the Node tests fail rather than skip without these
	)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	runErr := cmd.Run()
	// The whole TAP output, diagnostics included, for a closer look.
	_ = os.WriteFile(filepath.Join(".build", "node-test.tap"), out.Bytes(), 0o644)
	t.Logf("node --test (%v):\n%s", time.Since(began).Round(time.Millisecond), summary(out.String()))
	counts := tapCounts(out.String())
	switch {
	case runErr != nil:
		t.Fatalf("node --test: %v\n%s", runErr, failures(out.String()))
	case counts["pass"] == 0:
		t.Fatalf("node --test passed no test:\n%s", out.String())
	case counts["fail"]+counts["cancelled"]+counts["skipped"]+counts["todo"] > 0:
		t.Fatalf("node --test: %v (a skipped or unfinished test does not pass)\n%s", counts, failures(out.String()))
	}
	t.Logf("node tests: %v", counts)
}

// npmBuild installs the locked packages (npmInstall), then compiles src
// and test with the pinned tsc.
func npmBuild() error {
	run := func(name string, args ...string) error {
		cmd := exec.Command(name, args...)
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, b)
		}
		return nil
	}
	if err := npmInstall(); err != nil {
		return err
	}
	tsc := filepath.Join("node_modules", ".bin", "tsc")
	if err := run(tsc, "-p", "tsconfig.json"); err != nil { // src and test, for node --test
		return err
	}
	return run(tsc, "-p", "tsconfig.build.json") // dist/, which the browser test loads
}

// npmInstall installs the locked packages when node_modules does not match
// package-lock.json (npm ci on a fresh machine).
func npmInstall() error {
	if _, err := exec.LookPath("node"); err != nil {
		return fmt.Errorf("node not found (Node 20 or newer; `go tool task test:packages` installs it): %w", err)
	}
	lock, err := os.ReadFile("package-lock.json")
	if err != nil {
		return err
	}
	// npm writes node_modules/.package-lock.json with what it installed.
	installed, _ := os.ReadFile(filepath.Join("node_modules", ".package-lock.json"))
	if !sameLock(lock, installed) {
		if b, err := exec.Command("npm", "ci", "--no-audit", "--no-fund").CombinedOutput(); err != nil {
			return fmt.Errorf("npm ci: %w\n%s", err, b)
		}
	}
	return nil
}

// sameLock reports whether node_modules holds the packages of the lock
// file, name and version for each.
func sameLock(lock, installed []byte) bool {
	type pkgs struct {
		Packages map[string]struct {
			Version string `json:"version"`
		} `json:"packages"`
	}
	var l, i pkgs
	if json.Unmarshal(lock, &l) != nil || json.Unmarshal(installed, &i) != nil {
		return false
	}
	n := 0
	for name, p := range l.Packages {
		if name == "" {
			continue // the package itself
		}
		if q, ok := i.Packages[name]; ok {
			if q.Version != p.Version {
				return false
			}
			n++
		} else if !strings.Contains(name, "@typescript/typescript-") {
			return false // platform binaries of other platforms are not installed
		}
	}
	return n > 0
}

// control is what the Node tests ask of the harness over HTTP.
type control struct {
	p      *clienttest.Pipeline
	gw     *clienttest.Gateway
	signer *auth.Signer
	mu     sync.Mutex
	paused bool // SIGSTOPped by /gateway/pause and not yet killed
}

func (c *control) mux() *http.ServeMux {
	m := http.NewServeMux()
	// GET /token?user=&device= mints a one-hour token.
	m.HandleFunc("GET /token", func(w http.ResponseWriter, r *http.Request) {
		tok, err := c.signer.Mint(r.URL.Query().Get("user"), r.URL.Query().Get("device"), time.Hour)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprint(w, tok)
	})
	// POST /gateway/pause stops the gateway with SIGSTOP: what is sent to
	// it until the kill below waits for an answer.
	m.HandleFunc("POST /gateway/pause", func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.gw.Proc.Signal(syscall.SIGSTOP)
		c.paused = true
		fmt.Fprintf(w, `{"paused_pid":%d}`, c.gw.Proc.Pid())
	})
	// POST /gateway/kill kills the gateway with SIGKILL, waits pause_ms,
	// starts it again on the same address and answers once it listens.
	m.HandleFunc("POST /gateway/kill", func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		defer c.mu.Unlock()
		pause, _ := strconv.Atoi(r.URL.Query().Get("pause_ms"))
		pid := c.gw.Proc.Pid()
		if err := c.restart(time.Duration(pause) * time.Millisecond); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprintf(w, `{"killed_pid":%d,"pid":%d}`, pid, c.gw.Proc.Pid())
	})
	// GET /stored?session= counts the stored chat messages of a session by
	// client_msg_id.
	m.HandleFunc("GET /stored", func(w http.ResponseWriter, r *http.Request) {
		rows, err := c.p.Pool.Query(r.Context(), `SELECT client_msg_id, count(*) FROM messages WHERE session_id = $1 AND kind = 'message' GROUP BY client_msg_id`, r.URL.Query().Get("session"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer rows.Close()
		out := map[string]int{}
		for rows.Next() {
			var id string
			var k int
			if err := rows.Scan(&id, &k); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			out[id] = k
		}
		_ = json.NewEncoder(w).Encode(out)
	})
	// GET /delivered?session=&user=&device= is the stored delivered cursor
	// of a device (0 when none).
	m.HandleFunc("GET /delivered", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		var seq int64
		_ = c.p.Pool.QueryRow(r.Context(), `SELECT delivered_seq FROM delivery_cursors WHERE session_id = $1 AND user_id = $2 AND device_id = $3`,
			q.Get("session"), q.Get("user"), q.Get("device")).Scan(&seq)
		fmt.Fprint(w, seq)
	})
	return m
}

// restart kills the gateway with SIGKILL, waits pause, starts it again on
// the same address and waits until it listens. The caller holds c.mu.
func (c *control) restart(pause time.Duration) error {
	c.gw.Proc.Kill()
	c.paused = false
	time.Sleep(pause)
	if err := c.gw.Proc.Start(); err != nil {
		return err
	}
	return waitListening(c.gw.Addr, 30*time.Second)
}

// unpause restarts the gateway if a Node test paused it and ended before
// its kill (a failed or timed-out test), so the browser subtest runs
// against a gateway that answers and fails only for its own reasons.
func (c *control) unpause(t *testing.T) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.paused {
		return
	}
	t.Logf("the Node tests left the gateway paused (pid %d): restarting it", c.gw.Proc.Pid())
	if err := c.restart(0); err != nil {
		t.Fatalf("restart the paused gateway: %v", err)
	}
}

func waitListening(addr string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		resp, err := http.Get("http://" + addr + "/v1/changes")
		if err == nil {
			resp.Body.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("gateway %s not listening after %v: %w", addr, d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var tapCount = regexp.MustCompile(`^# (tests|suites|pass|fail|cancelled|skipped|todo) (\d+)$`)

// tapCounts reads the totals at the end of Node's TAP output.
func tapCounts(out string) map[string]int {
	counts := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if m := tapCount.FindStringSubmatch(sc.Text()); m != nil {
			n, _ := strconv.Atoi(m[2])
			counts[m[1]] = n
		}
	}
	return counts
}

// summary keeps the test lines of the TAP output, each with its
// duration, and the totals.
func summary(out string) string {
	var lines []string
	last := -1 // index of the latest test line, which a duration_ms follows
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		l := sc.Text()
		t := strings.TrimLeft(l, " ")
		switch {
		case strings.HasPrefix(t, "ok ") || strings.HasPrefix(t, "not ok "):
			lines = append(lines, l)
			last = len(lines) - 1
		case strings.HasPrefix(t, "duration_ms: ") && last >= 0:
			ms, _ := strconv.ParseFloat(strings.TrimPrefix(t, "duration_ms: "), 64)
			lines[last] += fmt.Sprintf(" (%.1fs)", ms/1000)
			last = -1
		case strings.HasPrefix(l, "# ") && tapCount.MatchString(l):
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "\n")
}

// failures returns the output from the first failing test on (it is
// where the assertion's message and stack are), or all of it.
func failures(out string) string {
	if i := strings.Index(out, "not ok "); i >= 0 {
		return out[max(0, i-2000):]
	}
	return out
}
