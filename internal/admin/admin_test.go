package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
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
		{"/debug/pprof/", "goroutine", 200},
		{"/debug/pprof/goroutine?debug=1", "goroutine profile", 200},
		{"/debug/pprof/heap?debug=1", "heap profile", 200},
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

// syncBuf is a bytes.Buffer safe for the server's goroutine and the test.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRunLogsTheBoundAddress: with port 0 the kernel picks the port, and
// the "admin listening" line names the one it serves on.
func TestRunLogsTheBoundAddress(t *testing.T) {
	var buf syncBuf
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- (&Server{Addr: "127.0.0.1:0", Reg: prometheus.NewRegistry(),
			Log: slog.New(slog.NewJSONHandler(&buf, nil))}).Run(ctx)
	}()
	defer func() {
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Errorf("Run: %v", err)
		}
	}()
	var rec struct{ Msg, Addr string }
	for deadline := time.Now().Add(5 * time.Second); rec.Addr == ""; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no address logged: %q", buf.String())
		}
		_ = json.Unmarshal([]byte(buf.String()), &rec)
	}
	if rec.Msg != "admin listening" || strings.HasSuffix(rec.Addr, ":0") {
		t.Fatalf("logged %+v, want admin listening on the bound port", rec)
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
