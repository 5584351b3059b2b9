// Package admin serves a service's operational HTTP endpoints: /metrics
// (Prometheus), /healthz (the process is up), /readyz (its dependencies
// answer and, for consumers, partitions are assigned) and /debug/pprof/
// (Go's profiles, e.g. `go tool pprof http://ADDR/debug/pprof/profile`).
// The profiles cost nothing until asked for; like the rest of the admin
// port they are for operators, so the port belongs on loopback or a private
// network (every default address is loopback).
package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ReadyFunc reports nil when the service is ready.
type ReadyFunc func(ctx context.Context) error

// Server is the admin HTTP server.
type Server struct {
	Addr  string
	Reg   *prometheus.Registry
	Ready ReadyFunc
	// Routes are a service's own operator endpoints, by ServeMux pattern
	// ("POST /erase/user").
	Routes map[string]http.Handler
	// Log, when set, gets an "admin listening" line with the bound address
	// ("addr"): with port 0 in Addr the kernel picks a free port, and the
	// line is how a supervisor (or a test) learns which.
	Log *slog.Logger
	// Bound, when set, is called with the bound address once the server
	// listens (an in-process caller's way to learn a port 0's port).
	Bound func(addr string)
}

// Handler returns the admin routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.Reg, promhttp.HandlerOpts{Registry: s.Reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if s.Ready != nil {
			if err := s.Ready(ctx); err != nil {
				http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		fmt.Fprintln(w, "ready")
	})
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	for pattern, h := range s.Routes {
		mux.Handle(pattern, h)
	}
	return mux
}

// Run serves until ctx ends. An empty Addr disables the server.
func (s *Server) Run(ctx context.Context) error {
	if s.Addr == "" {
		<-ctx.Done()
		return ctx.Err()
	}
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return fmt.Errorf("listen admin %s: %w", s.Addr, err)
	}
	if s.Log != nil {
		s.Log.Info("admin listening", "addr", ln.Addr().String())
	}
	if s.Bound != nil {
		s.Bound(ln.Addr().String())
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve admin: %w", err)
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(shut); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("shut down admin: %w", err)
	}
	<-errc
	return ctx.Err()
}
