package admin

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestRoutes(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "admin_test_total", Help: "test"})
	reg.MustRegister(c)
	c.Inc()
	var ready error
	srv := httptest.NewServer((&Server{Reg: reg, Ready: func(context.Context) error { return ready }}).Handler())
	defer srv.Close()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tt := range []struct {
		path, want string
		code       int
	}{
		{"/metrics", "admin_test_total 1", 200},
		{"/healthz", "ok", 200},
		{"/readyz", "ready", 200},
		// pprof is off without SEQFLOW_ADMIN_PPROF.
		{"/debug/pprof/", "404", 404},
		{"/debug/pprof/goroutine?debug=1", "404", 404},
		{"/debug/pprof/profile?seconds=1", "404", 404},
	} {
		code, body := get(tt.path)
		if code != tt.code || !strings.Contains(body, tt.want) {
			t.Errorf("GET %s: %d %.200q, want %d containing %q", tt.path, code, body, tt.code, tt.want)
		}
	}
	ready = errors.New("kafka unreachable")
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "kafka unreachable") {
		t.Errorf("GET /readyz when not ready: %d %q", code, body)
	}
}

// TestRunLogsTheBoundAddress: with port 0 the kernel picks the port, and
// the "admin listening" line and the Bound hook name the one it serves on.
func TestRunLogsTheBoundAddress(t *testing.T) {
	// A file, not a buffer: the server's goroutine writes while the test reads.
	logPath := filepath.Join(t.TempDir(), "admin.log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx, cancel := context.WithCancel(context.Background())
	errc, bound := make(chan error, 1), make(chan string, 1)
	go func() {
		errc <- (&Server{Addr: "127.0.0.1:0", Reg: prometheus.NewRegistry(),
			Log: slog.New(slog.NewJSONHandler(f, nil)), Bound: func(a string) { bound <- a }}).Run(ctx)
	}()
	defer func() {
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Errorf("Run: %v", err)
		}
	}()
	var rec struct{ Msg, Addr string }
	for deadline := time.Now().Add(5 * time.Second); rec.Addr == ""; time.Sleep(10 * time.Millisecond) {
		b, _ := os.ReadFile(logPath)
		if time.Now().After(deadline) {
			t.Fatalf("no address logged: %q", b)
		}
		_ = json.Unmarshal(b, &rec)
	}
	if rec.Msg != "admin listening" || strings.HasSuffix(rec.Addr, ":0") {
		t.Fatalf("logged %+v, want admin listening on the bound port", rec)
	}
	if b := <-bound; b != rec.Addr {
		t.Fatalf("Bound got %s, the log says %s", b, rec.Addr)
	}
	resp, err := http.Get("http://" + rec.Addr + "/healthz")
	if err != nil {
		t.Fatalf("nothing serves on the logged address: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /healthz on the logged address: %s", resp.Status)
	}
}
