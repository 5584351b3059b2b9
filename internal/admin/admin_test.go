package admin

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

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
