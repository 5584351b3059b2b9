// Package stack finds the local stack (Kafka, PostgreSQL, Redis) that
// `go tool task up` started, for integration tests and developer commands.
//
// Settings come from the environment (SEQFLOW_KAFKA_BROKERS, SEQFLOW_PG_URL,
// SEQFLOW_REDIS_ADDR, SEQFLOW_KAFKA3_BROKERS), falling back to the env files
// .data/local.env and .data/kafka3.env at the repository root. When the test
// task runs, SEQFLOW_REQUIRE_STACK=1 makes a missing stack a test failure;
// a plain `go test` on a machine without the stack skips integration tests
// and says why.
package stack

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// Stack holds connection settings.
type Stack struct {
	KafkaBrokers  []string
	Kafka3Brokers []string
	PGURL         string
	RedisAddr     string
	BrokerKind    string
	Root          string // repository root
}

// Load reads the settings; fields are empty when unknown.
func Load() Stack {
	root := Root()
	vals := map[string]string{}
	for _, f := range []string{"local.env", "kafka3.env"} {
		readEnvFile(filepath.Join(root, ".data", f), vals)
	}
	get := func(k string) string {
		if v := os.Getenv(k); v != "" {
			return v
		}
		return vals[k]
	}
	split := func(s string) []string {
		var out []string
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
		return out
	}
	return Stack{
		KafkaBrokers:  split(get("SEQFLOW_KAFKA_BROKERS")),
		Kafka3Brokers: split(get("SEQFLOW_KAFKA3_BROKERS")),
		PGURL:         get("SEQFLOW_PG_URL"),
		RedisAddr:     get("SEQFLOW_REDIS_ADDR"),
		BrokerKind:    get("SEQFLOW_KAFKA_BROKER_KIND"),
		Root:          root,
	}
}

// Root returns the repository root: the nearest parent holding go.mod.
func Root() string {
	dir, err := os.Getwd()
	if err != nil {
		return "."
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			return dir
		}
	}
}

func readEnvFile(path string, into map[string]string) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if k, v, ok := strings.Cut(line, "="); ok {
			into[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
}

// Require returns the stack for an integration test. A missing part fails
// the test under the test task (SEQFLOW_REQUIRE_STACK=1) and skips it
// otherwise. parts names what the test needs: "kafka", "pg", "redis", "kafka3".
func Require(t testing.TB, parts ...string) Stack {
	t.Helper()
	s := Load()
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
	return s
}

// LockBrokerFaults takes, until the test ends, an exclusive lock on
// .data/kafka3-faults.lock. Every test that kills brokers of the shared
// three-broker cluster takes it, so two such tests (in packages running in
// parallel) never have two brokers down at once: min.insync.replicas=2
// would stop every write.
func (s Stack) LockBrokerFaults(t testing.TB) {
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
