// Package admin serves a service's operational HTTP endpoints. /metrics
// (Prometheus), /healthz (the process is up) and /readyz (its dependencies
// answer and, for consumers, partitions are assigned) are open to anyone
// who reaches the port, as probes and Prometheus need. Everything else is
// an operator endpoint: a service's own routes (the gateway's
// POST /erase/user) and, with SEQFLOW_ADMIN_PPROF=true, Go's profiles
// under /debug/pprof/.
//
// Operators authenticate with bearer tokens read from a file
// (SEQFLOW_ADMIN_TOKENS_FILE, lines "name:token": Tokens), not with mTLS:
// a file of tokens rotates without a CA, each token names the actor that
// is recorded with what it does, and the same header serves a CLI, curl
// and a service calling another. An operator endpoint reads the token
// from the Authorization header only (no cookie, no query parameter: a
// browser adds neither header nor token to a cross-site request), takes
// only application/json bodies (a form post is refused 415), and answers
// errors as JSON {"code", "reason"} (errors.go). With no tokens file every
// operator endpoint refuses (403 operator_auth_off), whatever it is sent.
// The port still belongs on loopback or a private network (every default
// address is loopback; the Kubernetes base adds NetworkPolicies).
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
	// ("POST /erase/user"), each behind the operator checks (Actor names
	// the caller).
	Routes map[string]http.Handler
	// Config: the tokens file and pprof (LoadConfig).
	Config Config
	// Log, when set, gets an "admin listening" line with the bound address
	// ("addr"): with port 0 in Addr the kernel picks a free port, and the
	// line is how a supervisor (or a test) learns which.
	Log *slog.Logger
	// Bound, when set, is called with the bound address once the server
	// listens (an in-process caller's way to learn a port 0's port).
	Bound func(addr string)
}

// Handler returns the admin routes. A tokens file that cannot be read
// leaves the operator endpoints refusing until it can (Run refuses to
// start instead).
func (s *Server) Handler() http.Handler {
	tok, _ := s.tokens()
	return s.handler(tok)
}

// tokens opens the configured tokens file; nil without one.
func (s *Server) tokens() (*Tokens, error) {
	if s.Config.TokensFile == "" {
		return nil, nil
	}
	return OpenTokens(s.Config.TokensFile)
}

func (s *Server) handler(tok *Tokens) http.Handler {
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
	if s.Config.Pprof {
		mux.Handle("GET /debug/pprof/", Operator(tok, s.Log, http.HandlerFunc(pprof.Index)))
		mux.Handle("GET /debug/pprof/cmdline", Operator(tok, s.Log, http.HandlerFunc(pprof.Cmdline)))
		mux.Handle("GET /debug/pprof/profile", Operator(tok, s.Log, http.HandlerFunc(pprof.Profile)))
		mux.Handle("GET /debug/pprof/symbol", Operator(tok, s.Log, http.HandlerFunc(pprof.Symbol)))
		mux.Handle("GET /debug/pprof/trace", Operator(tok, s.Log, http.HandlerFunc(pprof.Trace)))
	}
	for pattern, h := range s.Routes {
		mux.Handle(pattern, Operator(tok, s.Log, h))
	}
	return mux
}

// Run serves until ctx ends. An empty Addr disables the server.
func (s *Server) Run(ctx context.Context) error {
	if s.Addr == "" {
		<-ctx.Done()
		return ctx.Err()
	}
	tok, err := s.tokens()
	if err != nil {
		return fmt.Errorf("admin tokens: %w", err)
	}
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return fmt.Errorf("listen admin %s: %w", s.Addr, err)
	}
	if s.Log != nil {
		auth := "tokens file"
		if tok == nil {
			auth = "off (" + EnvTokensFile + " unset): operator endpoints refuse every request"
		}
		s.Log.Info("admin listening", "addr", ln.Addr().String(), "operator_auth", auth, "operator_routes", len(s.Routes),
			"pprof", s.Config.Pprof)
	}
	if s.Bound != nil {
		s.Bound(ln.Addr().String())
	}
	srv := &http.Server{Handler: s.handler(tok), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second,
		IdleTimeout: 2 * time.Minute}
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
