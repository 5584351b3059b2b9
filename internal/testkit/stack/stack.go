// Package stack finds the local stack (Kafka, PostgreSQL, Redis) that
// `go tool task up` started, for integration tests.
//
// Settings come from config.LoadLocal: the environment, falling back to the
// env files of the local stack. When the test task runs,
// SEQFLOW_REQUIRE_STACK=1 makes a missing stack a test failure; a plain
// `go test` on a machine without the stack skips integration tests and
// says why.
package stack

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/seqflow/seqflow/internal/config"
	"github.com/seqflow/seqflow/internal/peerauth"
)

// Stack holds connection settings.
type Stack = config.Local

// Root returns the repository root.
func Root() string { return config.RepoRoot() }

// Require returns the stack for an integration test. A missing part fails
// the test under the test task (SEQFLOW_REQUIRE_STACK=1) and skips it
// otherwise. parts names what the test needs: "kafka", "pg", "redis", "kafka3".
func Require(t testing.TB, parts ...string) Stack {
	t.Helper()
	s := config.LoadLocal()
	var missing []string
	for _, p := range parts {
		switch p {
		case "kafka":
			if len(s.KafkaBrokers) == 0 {
				missing = append(missing, "kafka (SEQFLOW_KAFKA_BROKERS)")
			}
		case "kafka3":
			if len(s.Kafka3Brokers) == 0 {
				missing = append(missing, "kafka3 (SEQFLOW_KAFKA3_BROKERS)")
			}
		case "pg":
			if s.PGURL == "" {
				missing = append(missing, "postgres (SEQFLOW_PG_URL)")
			}
		case "redis":
			if s.RedisAddr == "" {
				missing = append(missing, "redis (SEQFLOW_REDIS_ADDR)")
			}
		}
	}
	if len(missing) > 0 {
		msg := "local stack not found: " + strings.Join(missing, ", ") + "; run `go tool task up` (and `go tool task up:kafka3`)"
		if os.Getenv("SEQFLOW_REQUIRE_STACK") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	peerOnce.Do(func() { exportPeerKeys(&s) })
	s.PeerKeysFile, s.PeerKeys, s.PeerAuth = os.Getenv("SEQFLOW_PEER_KEYS_FILE"), os.Getenv("SEQFLOW_PEER_KEYS"), os.Getenv("SEQFLOW_PEER_AUTH")
	return s
}

var peerOnce sync.Once

// exportPeerKeys puts the stack's peer key ring into this test process's
// environment, which the services it starts inherit (proc.Start), so they
// reach each other's push ports. A stack started before `up` made a ring
// has none: the tests then make one of their own, the same for every
// service this process starts.
func exportPeerKeys(s *Stack) {
	for k, v := range map[string]string{"SEQFLOW_PEER_KEYS_FILE": s.PeerKeysFile, "SEQFLOW_PEER_KEYS": s.PeerKeys, "SEQFLOW_PEER_AUTH": s.PeerAuth} {
		if v != "" && os.Getenv(k) == "" {
			_ = os.Setenv(k, v)
		}
	}
	if s.PeerKeysFile == "" && s.PeerKeys == "" && s.PeerAuth == "" {
		_ = os.Setenv("SEQFLOW_PEER_KEYS", peerauth.NewEntry("test"))
	}
}

// PeerEnv is the peer key ring settings of the stack as environment
// entries, for a service configured from a map (config.FromMap).
func PeerEnv(s Stack) map[string]string {
	m := map[string]string{}
	for k, v := range map[string]string{"SEQFLOW_PEER_KEYS_FILE": s.PeerKeysFile, "SEQFLOW_PEER_KEYS": s.PeerKeys, "SEQFLOW_PEER_AUTH": s.PeerAuth} {
		if v != "" {
			m[k] = v
		}
	}
	return m
}

// LockBrokerFaults takes, until the test ends, an exclusive lock on
// .data/kafka3-faults.lock. Every test that kills brokers of the shared
// three-broker cluster takes it, so two such tests (in packages running in
// parallel) never have two brokers down at once: min.insync.replicas=2
// would stop every write.
func LockBrokerFaults(t testing.TB, s Stack) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(s.Root, ".data", "kafka3-faults.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatalf("lock broker faults: %v", err)
	}
	t.Cleanup(func() { f.Close() }) // closing releases the lock
}
