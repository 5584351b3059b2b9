package config

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
)

// The local stack: `go tool task up` writes its connection settings to
// .data/local.env (and `up:kafka3` to .data/kafka3.env) at the repository
// root. The developer commands and the tests read them through LoadLocal, so
// they work against the local stack with no flags; the variables of the
// process environment win over the files.

// Local holds the connection settings of the local stack.
type Local struct {
	KafkaBrokers  []string
	Kafka3Brokers []string
	PGURL         string
	RedisAddr     string
	BrokerKind    string
	Root          string // repository root
	// The push transport's peer key ring (internal/peerauth): the file
	// `up` generates (SEQFLOW_PEER_KEYS_FILE), an inline ring
	// (SEQFLOW_PEER_KEYS), or SEQFLOW_PEER_AUTH.
	PeerKeysFile, PeerKeys, PeerAuth string
}

// LoadLocal reads the settings; fields are empty when unknown.
func LoadLocal() Local {
	root := RepoRoot()
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
	return Local{
		KafkaBrokers:  split(get("SEQFLOW_KAFKA_BROKERS")),
		Kafka3Brokers: split(get("SEQFLOW_KAFKA3_BROKERS")),
		PGURL:         get("SEQFLOW_PG_URL"),
		RedisAddr:     get("SEQFLOW_REDIS_ADDR"),
		BrokerKind:    get("SEQFLOW_KAFKA_BROKER_KIND"),
		Root:          root,
		PeerKeysFile:  get("SEQFLOW_PEER_KEYS_FILE"),
		PeerKeys:      get("SEQFLOW_PEER_KEYS"),
		PeerAuth:      get("SEQFLOW_PEER_AUTH"),
	}
}

// RepoRoot returns the repository root: the nearest parent holding go.mod.
func RepoRoot() string {
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
