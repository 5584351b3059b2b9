package main

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/seqflow/seqflow/internal/testkit/proc"
)

// TestFatalErrorExitsNonZero: an error that ends Run (here a malformed
// collector address, which fails before anything is dialled) is printed
// and exits 1. It used to exit 0 in silence, because stop() had already
// cancelled the context that tells a signal from an error, so a supervisor
// saw a clean exit and did not restart the service.
func TestFatalErrorExitsNonZero(t *testing.T) {
	cmd := exec.Command(proc.Build(t, "./pusher"))
	cmd.Env = []string{
		"SEQFLOW_KAFKA_BROKERS=127.0.0.1:1", "SEQFLOW_REDIS_ADDR=127.0.0.1:1",
		"SEQFLOW_OTLP_ENDPOINT=no-port-here", "PUSHER_ADMIN_ADDR=off", "SEQFLOW_PEER_AUTH=insecure-none",
	}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("exit: %v, want status 1; output:\n%s", err, out)
	}
	if !strings.Contains(string(out), "pusher:") || !strings.Contains(string(out), "SEQFLOW_OTLP_ENDPOINT") {
		t.Fatalf("output does not name the error:\n%s", out)
	}
}
