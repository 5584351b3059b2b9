package infra

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"

	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/keystore"
)

// loadCompose loads a compose file the way `docker compose` does: the
// compose specification's schema, interpolation, merging of anchors and
// extensions, and the model's own checks (dependencies, networks, volumes).
func loadCompose(t *testing.T, path string) (*types.Project, error) {
	t.Helper()
	return loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  filepath.Dir(path),
		ConfigFiles: []types.ConfigFile{{Filename: path}},
		Environment: types.Mapping{},
	}, func(o *loader.Options) {
		o.SetProjectName("seqflow", true)
		o.Profiles = []string{"*"}
	})
}

func TestComposeLoads(t *testing.T) {
	root := repoRoot(t)
	p, err := loadCompose(t, filepath.Join(root, "infra", "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, problem := range checkCompose(p, serviceEnv(t, root, services...)) {
		t.Error(problem)
	}
}

// TestComposeRejects pins the loader: each file is wrong in a way it must
// refuse.
func TestComposeRejects(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(repoRoot(t), "infra", "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string][2]string{
		"unknown key":        {"    stop_grace_period: 30s\n", "    stop_grace_periode: 30s\n"},
		"wrong type":         {"      retries: 30\n", "      retries: [30]\n"},
		"unknown dependency": {"      kafka: {condition: service_healthy}\n", "      kafak: {condition: service_healthy}\n"},
		"bad condition":      {"service_completed_successfully", "service_completed"},
		"unknown volume":     {"      - kafka-data:/var/lib/kafka/data\n", "      - kafka-dat:/var/lib/kafka/data\n"},
	} {
		t.Run(name, func(t *testing.T) {
			broken := strings.Replace(string(src), edit[0], edit[1], 1)
			if broken == string(src) {
				t.Fatalf("%q is not in the compose file", edit[0])
			}
			dir := t.TempDir()
			path := filepath.Join(dir, "docker-compose.yml")
			if err := os.WriteFile(path, []byte(broken), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := loadCompose(t, path); err == nil {
				t.Error("loaded without an error")
			} else {
				t.Log(err)
			}
		})
	}
}

// TestCheckComposeCatches pins checkCompose.
func TestCheckComposeCatches(t *testing.T) {
	root := repoRoot(t)
	env := serviceEnv(t, root, services...)
	load := func() *types.Project {
		p, err := loadCompose(t, filepath.Join(root, "infra", "docker-compose.yml"))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	setEnv := func(p *types.Project, svc, k string, v *string) {
		s := p.Services[svc]
		if v == nil {
			delete(s.Environment, k)
		} else {
			s.Environment[k] = v
		}
		p.Services[svc] = s
	}
	val := func(s string) *string { return &s }
	for name, mutate := range map[string]func(p *types.Project){
		"no push advertise":  func(p *types.Project) { setEnv(p, "producer-gw", "GATEWAY_PUSH_ADVERTISE", nil) },
		"push on loopback":   func(p *types.Project) { setEnv(p, "producer-gw", "GATEWAY_PUSH_ADDR", val("127.0.0.1:0")) },
		"advertise nowhere":  func(p *types.Project) { setEnv(p, "producer-gw", "GATEWAY_PUSH_ADVERTISE", val("gateway:9105")) },
		"admin on loopback":  func(p *types.Project) { setEnv(p, "pusher", "PUSHER_ADMIN_ADDR", val("127.0.0.1:9104")) },
		"variable typo":      func(p *types.Project) { setEnv(p, "sequencer", "SEQUENCER_STPE", val("1")) },
		"not kraft":          func(p *types.Project) { setEnv(p, "kafka", "KAFKA_PROCESS_ROLES", val("broker")) },
		"no pusher":          func(p *types.Project) { delete(p.Services, "pusher") },
		"replication 3":      func(p *types.Project) { s := p.Services["setup"]; s.Command[4] = "3"; p.Services["setup"] = s },
		"port beyond host":   func(p *types.Project) { s := p.Services["redis"]; s.Ports[0].HostIP = ""; p.Services["redis"] = s },
		"brokers point away": func(p *types.Project) { setEnv(p, "persister", "SEQFLOW_KAFKA_BROKERS", val("kafak:9092")) },
		"no admin tokens":    func(p *types.Project) { setEnv(p, "producer-gw", "SEQFLOW_ADMIN_TOKENS_FILE", nil) },
		"tokens not mounted": func(p *types.Project) { s := p.Services["pusher"]; s.Volumes = nil; p.Services["pusher"] = s },
		"no KEK":             func(p *types.Project) { setEnv(p, "producer-gw", "SEQFLOW_KEK", nil) },
		"KEK too short":      func(p *types.Project) { setEnv(p, "producer-gw", "SEQFLOW_KEK", val("c2hvcnQ=")) },
		"KEK elsewhere": func(p *types.Project) {
			setEnv(p, "persister", "SEQFLOW_KEK", val("SykdiQKOhGl4j0QVag6bneTiIhPvAD0DdmlXKVtn0EQ="))
		},
		"plaintext chosen": func(p *types.Project) {
			setEnv(p, "producer-gw", "SEQFLOW_KEK", nil)
			setEnv(p, "producer-gw", "SEQFLOW_PLAINTEXT_BODIES", val("true"))
		},
	} {
		t.Run(name, func(t *testing.T) {
			p := load()
			mutate(p)
			if problems := checkCompose(p, env); len(problems) == 0 {
				t.Error("no problem reported")
			} else {
				t.Log(problems)
			}
		})
	}
}

// checkCompose returns what is wrong with the compose project for seqflow.
func checkCompose(p *types.Project, env map[string]map[string]bool) []string {
	var problems []string
	bad := func(f string, a ...any) { problems = append(problems, fmt.Sprintf(f, a...)) }
	get := func(svc, k string) string {
		if v := p.Services[svc].Environment[k]; v != nil {
			return *v
		}
		return ""
	}
	for _, want := range []string{"kafka", "postgres", "redis", "setup", "sequencer", "persister", "pusher", "producer-gw"} {
		if _, ok := p.Services[want]; !ok {
			bad("no service %s", want)
		}
	}
	if k, ok := p.Services["kafka"]; ok {
		if !strings.HasPrefix(k.Image, "apache/kafka:") || get("kafka", "KAFKA_PROCESS_ROLES") != "broker,controller" || get("kafka", "KAFKA_CONTROLLER_QUORUM_VOTERS") != "1@kafka:9093" {
			bad("kafka: image %s, roles %q, voters %q: want apache/kafka in KRaft, one combined node", k.Image, get("kafka", "KAFKA_PROCESS_ROLES"), get("kafka", "KAFKA_CONTROLLER_QUORUM_VOTERS"))
		}
	}
	if s, ok := p.Services["setup"]; ok && !slices.Equal(s.Command, types.ShellCommand{"setup", "-partitions", strconv.Itoa(eventlog.DefaultPartitions), "-replication", "1"}) {
		bad("setup command %q, want %d partitions (docs/operations.md) and replication 1 (one broker)", s.Command, eventlog.DefaultPartitions)
	}
	for name, s := range p.Services {
		for _, port := range s.Ports {
			if port.HostIP != "127.0.0.1" {
				bad("service %s publishes %d beyond loopback (%q)", name, port.Target, port.HostIP)
			}
		}
		if s.Build == nil {
			continue
		}
		svc, ok := imageService(s.Image)
		if !ok || s.Build.Args["SERVICE"] == nil || *s.Build.Args["SERVICE"] != svc {
			bad("service %s: image %s built with SERVICE=%v", name, s.Image, s.Build.Args["SERVICE"])
			continue
		}
		for k := range s.Environment {
			if !env[svc][k] {
				bad("service %s sets %s, which %s does not read", name, k, svc)
			}
		}
		for _, b := range strings.Split(get(name, "SEQFLOW_KAFKA_BROKERS"), ",") {
			if h, _, _ := net.SplitHostPort(b); p.Services[h].Name == "" {
				bad("service %s: broker %q is no service", name, b)
			}
		}
		if addrVar, ok := adminEnv[svc]; ok {
			if h, _, err := net.SplitHostPort(get(name, addrVar)); err != nil || h != "0.0.0.0" {
				bad("service %s: %s %q, want 0.0.0.0:PORT", name, addrVar, get(name, addrVar))
			}
			// The operators' tokens: a file in a volume (internal/admin).
			tokens, mounted := get(name, "SEQFLOW_ADMIN_TOKENS_FILE"), false
			for _, v := range s.Volumes {
				mounted = mounted || (tokens != "" && v.Target == filepath.Dir(tokens) && v.Source != "")
			}
			if !mounted {
				bad("service %s: SEQFLOW_ADMIN_TOKENS_FILE %q is in no volume it mounts", name, tokens)
			}
		}
	}
	for name, s := range p.Services {
		if s.Environment["SEQFLOW_PLAINTEXT_BODIES"] != nil {
			bad("service %s sets SEQFLOW_PLAINTEXT_BODIES: bodies would enter Kafka in plaintext", name)
		}
		if svc, _ := imageService(s.Image); svc != "producer-gw" && s.Environment["SEQFLOW_KEK"] != nil {
			bad("service %s is given SEQFLOW_KEK: only the gateway seals and opens bodies", name)
		}
	}
	if _, ok := p.Services["producer-gw"]; ok {
		if _, err := keystore.ParseKEK(get("producer-gw", "SEQFLOW_KEK")); err != nil {
			bad("producer-gw: SEQFLOW_KEK: %v (bodies are sealed by default; without a KEK the gateway does not start)", err)
		}
		_, port, err := net.SplitHostPort(get("producer-gw", "GATEWAY_PUSH_ADDR"))
		host, advPort, aerr := net.SplitHostPort(get("producer-gw", "GATEWAY_PUSH_ADVERTISE"))
		if err != nil || aerr != nil || port != advPort || port == "0" || p.Services[host].Name == "" || strings.HasPrefix(get("producer-gw", "GATEWAY_PUSH_ADDR"), "127.") {
			bad("producer-gw: GATEWAY_PUSH_ADDR %q, GATEWAY_PUSH_ADVERTISE %q: want 0.0.0.0:PORT and SERVICE:PORT, a name the other containers resolve",
				get("producer-gw", "GATEWAY_PUSH_ADDR"), get("producer-gw", "GATEWAY_PUSH_ADVERTISE"))
		}
	}
	return problems
}
