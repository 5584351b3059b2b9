package infra

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/yannh/kubeconform/pkg/validator"
	"go.yaml.in/yaml/v3"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/keystore"
)

// overlays are the deployable kustomizations under infra/k8s/overlays.
var overlays = []string{"quickstart", "services-only"}

// obj is one Kubernetes object as decoded from YAML.
type obj = map[string]any

// build runs kustomize on dir and returns its output.
func build(t *testing.T, dir string) []byte {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out, err := m.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// decode splits a multi-document YAML stream into objects.
func decode(t *testing.T, src []byte) []obj {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(src))
	var out []obj
	for {
		var o obj
		err := dec.Decode(&o)
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if o != nil {
			out = append(out, o)
		}
	}
}

// kubeconform validates every object of src strictly against the pinned
// release's schemas and returns one line per problem.
func kubeconform(t *testing.T, name string, src []byte) []string {
	t.Helper()
	v, err := validator.New([]string{kubeSchemas(t) + schemaLocation}, validator.Opts{
		KubernetesVersion: k8sVersion,
		Strict:            true,
	})
	if err != nil {
		t.Fatal(err)
	}
	var problems []string
	n := 0
	for _, r := range v.Validate(name, io.NopCloser(bytes.NewReader(src))) {
		if r.Status == validator.Empty {
			continue
		}
		n++
		if r.Status == validator.Valid {
			continue
		}
		sig, _ := r.Resource.Signature()
		what := "?"
		if sig != nil {
			what = sig.Kind + " " + sig.Name
		}
		problems = append(problems, fmt.Sprintf("%s: %v", what, r.Err))
	}
	if n == 0 {
		problems = append(problems, "no object validated")
	}
	return problems
}

func TestKustomizeOverlaysKubeconform(t *testing.T) {
	root := repoRoot(t)
	for _, o := range overlays {
		t.Run(o, func(t *testing.T) {
			out := build(t, filepath.Join(root, "infra", "k8s", "overlays", o))
			for _, p := range kubeconform(t, o, out) {
				t.Error(p)
			}
		})
	}
}

// TestKubeconformRejects pins the validation itself: each manifest is
// wrong in one way kubeconform -strict must catch.
func TestKubeconformRejects(t *testing.T) {
	base := `apiVersion: apps/v1
kind: Deployment
metadata: {name: x}
spec:
  selector: {matchLabels: {a: b}}
  template:
    metadata: {labels: {a: b}}
    spec:
      containers:
        - name: x
          image: x
          readinessProbe: {httpGet: {path: /readyz, port: 9101}}
          resources: {requests: {cpu: 1, memory: 1Gi}}
`
	if p := kubeconform(t, "valid", []byte(base)); len(p) != 0 {
		t.Fatalf("the valid manifest is rejected: %v", p)
	}
	for name, broken := range map[string]string{
		"unknown field":         strings.Replace(base, "readinessProbe", "readinesProbe", 1),
		"wrong type":            strings.Replace(base, "port: 9101", "port: [9101]", 1),
		"missing required":      strings.Replace(base, "        - name: x\n          image: x\n", "        - image: x\n", 1),
		"unknown field in meta": strings.Replace(base, "metadata: {name: x}", "metadata: {name: x, namespcae: y}", 1),
		"bad quantity":          strings.Replace(base, "memory: 1Gi", "memory: 1Gb", 1),
		"bad apiVersion":        strings.Replace(base, "apps/v1", "apps/v1beta9", 1),
		"duplicate key":         strings.Replace(base, "image: x\n", "image: x\n          image: y\n", 1),
	} {
		t.Run(name, func(t *testing.T) {
			if broken == base {
				t.Fatal("the replacement did not apply")
			}
			if p := kubeconform(t, name, []byte(broken)); len(p) == 0 {
				t.Errorf("kubeconform accepted:\n%s", broken)
			}
		})
	}
}

func TestKustomizeOverlaysSeqflow(t *testing.T) {
	root := repoRoot(t)
	env := serviceEnv(t, root, services...)
	for _, o := range overlays {
		t.Run(o, func(t *testing.T) {
			objs := decode(t, build(t, filepath.Join(root, "infra", "k8s", "overlays", o)))
			for _, p := range checkDeployment(objs, env, o == "quickstart") {
				t.Error(p)
			}
		})
	}
}

// TestCheckDeploymentCatches pins checkDeployment: each mutation of the
// quickstart build breaks one rule it must report.
func TestCheckDeploymentCatches(t *testing.T) {
	root := repoRoot(t)
	env := serviceEnv(t, root, services...)
	src := build(t, filepath.Join(root, "infra", "k8s", "overlays", "quickstart"))
	if p := checkDeployment(decode(t, src), env, true); len(p) != 0 {
		t.Fatalf("the quickstart build has problems: %v", p)
	}
	for name, mutate := range map[string]func(objs []obj){
		"no push advertise": func(objs []obj) {
			c := container(find(objs, "Deployment", "seqflow-producer-gw"))
			c["env"] = slices.DeleteFunc(c["env"].([]any), func(e any) bool { return str(e, "name") == "GATEWAY_PUSH_ADVERTISE" })
		},
		"push advertise on loopback": func(objs []obj) {
			setEnv(container(find(objs, "Deployment", "seqflow-producer-gw")), "GATEWAY_PUSH_ADVERTISE", "127.0.0.1:9105")
		},
		"readiness on a wrong path": func(objs []obj) {
			c := container(find(objs, "StatefulSet", "seqflow-sequencer"))
			c["readinessProbe"].(obj)["httpGet"].(obj)["path"] = "/ready"
		},
		"liveness on another port": func(objs []obj) {
			c := container(find(objs, "Deployment", "seqflow-pusher"))
			c["livenessProbe"].(obj)["httpGet"].(obj)["port"] = 9999
		},
		"admin on loopback": func(objs []obj) {
			setEnv(container(find(objs, "Deployment", "seqflow-persister")), "PERSISTER_ADMIN_ADDR", "127.0.0.1:9102")
		},
		"variable nobody reads": func(objs []obj) {
			c := container(find(objs, "Deployment", "seqflow-pusher"))
			c["env"] = append(c["env"].([]any), obj{"name": "PUSHER_TYPO", "value": "1"})
		},
		"config key nobody reads": func(objs []obj) {
			find(objs, "ConfigMap", "seqflow")["data"].(obj)["SEQFLOW_REDIS_ADRR"] = "x"
		},
		"no resources": func(objs []obj) {
			delete(container(find(objs, "StatefulSet", "kafka")), "resources")
		},
		"no budget": func(objs []obj) {
			find(objs, "PodDisruptionBudget", "seqflow-pusher")["kind"] = "ConfigMap"
		},
		"budget selects nothing": func(objs []obj) {
			find(objs, "PodDisruptionBudget", "kafka")["spec"].(obj)["selector"] = obj{"matchLabels": obj{"app.kubernetes.io/name": "kafkaa"}}
		},
		"more sequencers than partitions": func(objs []obj) {
			find(objs, "StatefulSet", "seqflow-sequencer")["spec"].(obj)["replicas"] = 13
		},
		"partitions not the default": func(objs []obj) {
			c := container(find(objs, "Job", "seqflow-setup"))
			c["args"] = []any{"setup", "-partitions", "6", "-replication", "3"}
		},
		"replication above the brokers": func(objs []obj) {
			find(objs, "StatefulSet", "kafka")["spec"].(obj)["replicas"] = 2
		},
		"voters not the pods": func(objs []obj) {
			setEnv(container(find(objs, "StatefulSet", "kafka")), "KAFKA_CONTROLLER_QUORUM_VOTERS", "0@kafka-0.kafka-headless:9093")
		},
		"not kraft": func(objs []obj) {
			setEnv(container(find(objs, "StatefulSet", "kafka")), "KAFKA_PROCESS_ROLES", "broker")
		},
		"brokers point nowhere": func(objs []obj) {
			find(objs, "ConfigMap", "seqflow")["data"].(obj)["SEQFLOW_KAFKA_BROKERS"] = "kafak:9092"
		},
		"instance id shared": func(objs []obj) {
			setEnv(container(find(objs, "Deployment", "seqflow-persister")), "PERSISTER_INSTANCE_ID", "p")
		},
		"no admin policy": func(objs []obj) {
			find(objs, "NetworkPolicy", "seqflow-admin")["kind"] = "ConfigMap"
		},
		"admin port open to all": func(objs []obj) {
			delete(list(find(objs, "NetworkPolicy", "seqflow-admin"), "spec", "ingress")[0].(obj), "from")
		},
		"admin port open to the namespace": func(objs []obj) {
			r := list(find(objs, "NetworkPolicy", "seqflow-admin"), "spec", "ingress")[0].(obj)
			r["from"] = append(r["from"].([]any), obj{"podSelector": obj{}})
		},
		"every port open to all": func(objs []obj) {
			find(objs, "NetworkPolicy", "seqflow-producer-gw-clients")["spec"].(obj)["ingress"] = []any{obj{}}
		},
		"push port open to all": func(objs []obj) {
			delete(list(find(objs, "NetworkPolicy", "seqflow-producer-gw-push"), "spec", "ingress")[0].(obj), "from")
		},
		"push port open to the persister": func(objs []obj) {
			r := list(find(objs, "NetworkPolicy", "seqflow-producer-gw-push"), "spec", "ingress")[0].(obj)
			e := list(r["from"].([]any)[0], "podSelector", "matchExpressions")[0].(obj)
			e["values"] = append(e["values"].([]any), "seqflow-persister")
		},
		"no client policy": func(objs []obj) {
			find(objs, "NetworkPolicy", "seqflow-producer-gw-clients")["kind"] = "ConfigMap"
		},
		"no admin tokens volume": func(objs []obj) {
			delete(podSpec(find(objs, "Deployment", "seqflow-pusher")), "volumes")
		},
		"admin tokens elsewhere": func(objs []obj) {
			find(objs, "ConfigMap", "seqflow")["data"].(obj)["SEQFLOW_ADMIN_TOKENS_FILE"] = "/etc/tokens"
		},
		"no KEK": func(objs []obj) {
			c := container(find(objs, "Deployment", "seqflow-producer-gw"))
			c["env"] = slices.DeleteFunc(c["env"].([]any), func(e any) bool { return str(e, "name") == "SEQFLOW_KEK" })
		},
		"plaintext chosen": func(objs []obj) {
			c := container(find(objs, "Deployment", "seqflow-producer-gw"))
			c["env"] = slices.DeleteFunc(c["env"].([]any), func(e any) bool { return str(e, "name") == "SEQFLOW_KEK" })
			c["env"] = append(c["env"].([]any), obj{"name": "SEQFLOW_PLAINTEXT_BODIES", "value": "true"})
		},
		"plaintext in the config": func(objs []obj) {
			find(objs, "ConfigMap", "seqflow")["data"].(obj)["SEQFLOW_PLAINTEXT_BODIES"] = "true"
		},
		"KEK as a literal": func(objs []obj) {
			setEnv(container(find(objs, "Deployment", "seqflow-producer-gw")), "SEQFLOW_KEK", "o8QSTczQTh4UQV29KsJBCzUO6US26vlAd+0zAzmAtyg=")
		},
		"KEK optional": func(objs []obj) {
			kek := envOf(container(find(objs, "Deployment", "seqflow-producer-gw")))["SEQFLOW_KEK"]
			kek["valueFrom"].(obj)["secretKeyRef"].(obj)["optional"] = true
		},
		"KEK secret not shipped": func(objs []obj) {
			find(objs, "Secret", "seqflow-kek")["metadata"].(obj)["name"] = "seqflow-kek-old"
		},
		"KEK too short": func(objs []obj) {
			find(objs, "Secret", "seqflow-kek")["stringData"].(obj)["SEQFLOW_KEK"] = "c2hvcnQ="
		},
		"KEK handed to every service": func(objs []obj) {
			c := container(find(objs, "Deployment", "seqflow-pusher"))
			c["envFrom"] = append(c["envFrom"].([]any), obj{"secretRef": obj{"name": "seqflow-kek"}})
		},
		"service port nobody serves": func(objs []obj) {
			find(objs, "Service", "redis")["spec"].(obj)["ports"] = []any{obj{"name": "redis", "port": 6379, "targetPort": "redsi"}}
		},
	} {
		t.Run(name, func(t *testing.T) {
			objs := decode(t, src)
			mutate(objs)
			if p := checkDeployment(objs, env, true); len(p) == 0 {
				t.Error("no problem reported")
			} else {
				t.Log(p)
			}
		})
	}
}

func find(objs []obj, kind, name string) obj {
	for _, o := range objs {
		if o["kind"] == kind && str(o, "metadata", "name") == name {
			return o
		}
	}
	panic(kind + " " + name + " not found")
}

func setEnv(c obj, name, value string) {
	for _, e := range c["env"].([]any) {
		if str(e, "name") == name {
			e.(obj)["value"] = value
			delete(e.(obj), "valueFrom")
			return
		}
	}
	panic("no variable " + name)
}

// at walks v along keys.
func at(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(obj)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func str(v any, keys ...string) string {
	switch x := at(v, keys...).(type) {
	case string:
		return x
	case int:
		return strconv.Itoa(x)
	}
	return ""
}

func list(v any, keys ...string) []any { l, _ := at(v, keys...).([]any); return l }

func num(v any, keys ...string) (int, bool) {
	n, ok := at(v, keys...).(int)
	return n, ok
}

// podSpec returns a workload's pod spec, or nil for other kinds.
func podSpec(o obj) obj {
	switch o["kind"] {
	case "Deployment", "StatefulSet", "Job", "DaemonSet":
		s, _ := at(o, "spec", "template", "spec").(obj)
		return s
	}
	return nil
}

// container returns a workload's first container.
func container(o obj) obj { return list(podSpec(o), "containers")[0].(obj) }

// envOf returns a container's variables set by value or reference.
func envOf(c obj) map[string]obj {
	out := map[string]obj{}
	for _, e := range list(c, "env") {
		out[str(e, "name")] = e.(obj)
	}
	return out
}

func labelsMatch(selector, labels any) bool {
	sel, _ := selector.(obj)
	lab, _ := labels.(obj)
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if lab[k] != v {
			return false
		}
	}
	return true
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// checkDeployment returns what is wrong with an overlay's objects for
// seqflow; quickstart also checks the Kafka, PostgreSQL and Redis it
// deploys and that the services point at them.
func checkDeployment(objs []obj, env map[string]map[string]bool, quickstart bool) []string {
	var problems []string
	bad := func(f string, a ...any) { problems = append(problems, fmt.Sprintf(f, a...)) }
	all := map[string]bool{}
	for _, vars := range env {
		for v := range vars {
			all[v] = true
		}
	}
	kinds := map[string]int{}
	var setupArgs []string
	seen := map[string]bool{}
	for _, o := range objs {
		kind, name := str(o, "kind"), str(o, "metadata", "name")
		kinds[kind]++
		if (kind == "ConfigMap" && name == "seqflow") || (kind == "Secret" && name == "seqflow") {
			for _, key := range []string{"data", "stringData"} {
				data, _ := at(o, key).(obj)
				for k := range data {
					if !all[k] {
						bad("%s %s sets %s, which no service reads", kind, name, k)
					}
				}
			}
		}
		spec := podSpec(o)
		if spec == nil {
			continue
		}
		for _, c := range list(spec, "containers") {
			c := c.(obj)
			where := fmt.Sprintf("%s %s container %s", kind, name, str(c, "name"))
			if str(c, "resources", "requests", "cpu") == "" || str(c, "resources", "requests", "memory") == "" || str(c, "resources", "limits", "memory") == "" {
				bad("%s: want CPU and memory requests and a memory limit", where)
			}
			if kind != "Job" && (at(c, "readinessProbe") == nil || at(c, "livenessProbe") == nil) {
				bad("%s: want a readiness and a liveness probe", where)
			}
			svc, ours := imageService(str(c, "image"))
			if !ours {
				continue
			}
			seen[svc] = true
			vars := envOf(c)
			for v, e := range vars {
				if env[svc][v] {
					continue
				}
				// A helper that only feeds another variable, $(POD_IP).
				used := false
				for _, other := range vars {
					for _, m := range varRef.FindAllStringSubmatch(str(other, "value"), -1) {
						used = used || m[1] == v
					}
				}
				if !used || at(e, "valueFrom") == nil {
					bad("%s sets %s, which %s does not read", where, v, svc)
				}
			}
			if svc == "cmd/seqflow" {
				for _, a := range list(c, "args") {
					setupArgs = append(setupArgs, str(a))
				}
				continue
			}
			if id := vars[instanceEnv[svc]]; str(id, "valueFrom", "fieldRef", "fieldPath") != "metadata.name" {
				bad("%s: %s must be the pod name (unique and stable per instance)", where, instanceEnv[svc])
			}
			problems = append(problems, checkAdmin(where, c, str(vars[adminEnv[svc]], "value"))...)
			if svc == "producer-gw" {
				problems = append(problems, checkPushAddress(where, c, vars)...)
			}
			if replicas, _ := num(o, "spec", "replicas"); svc != "producer-gw" && replicas > eventlog.DefaultPartitions {
				bad("%s: %d replicas, more than the %d partitions (the extra ones idle)", where, replicas, eventlog.DefaultPartitions)
			}
		}
		if replicas, ok := num(o, "spec", "replicas"); kind != "Job" && (!ok || replicas > 1) {
			covered := false
			for _, b := range objs {
				covered = covered || (b["kind"] == "PodDisruptionBudget" && labelsMatch(at(b, "spec", "selector", "matchLabels"), at(o, "spec", "template", "metadata", "labels")))
			}
			if !covered {
				bad("%s %s: %d replicas and no PodDisruptionBudget selecting its pods", kind, name, replicas)
			}
		}
	}
	for _, s := range services {
		if !seen[s] {
			bad("no workload runs %s", s)
		}
	}
	for _, o := range objs {
		problems = append(problems, checkSelects(o, objs)...)
	}
	problems = append(problems, checkAdminAccess(objs)...)
	if !slices.Equal(setupArgs, []string{"setup", "-partitions", strconv.Itoa(eventlog.DefaultPartitions), "-replication", "3"}) {
		bad("setup job args %q, want %d partitions (docs/operations.md) and replication 3", setupArgs, eventlog.DefaultPartitions)
	}
	problems = append(problems, checkSealed(objs, quickstart)...)
	if quickstart {
		problems = append(problems, checkQuickstart(objs)...)
	} else {
		for _, o := range objs {
			if spec := podSpec(o); spec != nil {
				if _, ours := imageService(str(container(o), "image")); !ours {
					bad("services-only deploys %s %s (%s)", o["kind"], str(o, "metadata", "name"), str(container(o), "image"))
				}
			}
		}
	}
	return problems
}

// checkSealed: bodies are sealed by default (docs/erasure.md). Every
// gateway gets SEQFLOW_KEK from a Secret it cannot start without, nothing
// chooses SEQFLOW_PLAINTEXT_BODIES, no other service is handed the KEK,
// and an overlay that ships the Secret ships a valid KEK in it.
func checkSealed(objs []obj, shipsSecrets bool) []string {
	var problems []string
	bad := func(f string, a ...any) { problems = append(problems, fmt.Sprintf(f, a...)) }
	isTrue := func(v string) bool { b, _ := strconv.ParseBool(v); return b }
	type ref struct{ secret, key string }
	keks := map[ref]bool{}
	for _, o := range objs {
		kind, name := str(o, "kind"), str(o, "metadata", "name")
		if kind == "ConfigMap" || kind == "Secret" {
			for _, key := range []string{"data", "stringData"} {
				if v, ok := at(o, key, "SEQFLOW_PLAINTEXT_BODIES").(string); ok && (isTrue(v) || key == "data") {
					bad("%s %s sets SEQFLOW_PLAINTEXT_BODIES: bodies would enter Kafka in plaintext", kind, name)
				}
			}
		}
		spec := podSpec(o)
		if spec == nil {
			continue
		}
		for _, c := range list(spec, "containers") {
			c := c.(obj)
			where := fmt.Sprintf("%s %s container %s", kind, name, str(c, "name"))
			svc, _ := imageService(str(c, "image"))
			vars := envOf(c)
			if e, ok := vars["SEQFLOW_PLAINTEXT_BODIES"]; ok && (isTrue(str(e, "value")) || at(e, "valueFrom") != nil) {
				bad("%s sets SEQFLOW_PLAINTEXT_BODIES: bodies would enter Kafka in plaintext", where)
			}
			kek, hasKEK := vars["SEQFLOW_KEK"]
			if svc != "producer-gw" {
				if hasKEK {
					bad("%s is given SEQFLOW_KEK: only the gateways seal and open bodies", where)
				}
				continue
			}
			r := ref{str(kek, "valueFrom", "secretKeyRef", "name"), str(kek, "valueFrom", "secretKeyRef", "key")}
			switch {
			case !hasKEK || r.secret == "" || r.key == "":
				bad("%s: SEQFLOW_KEK must come from a Secret (valueFrom.secretKeyRef): without it the gateway refuses to start, or writes plaintext bodies", where)
			case at(kek, "valueFrom", "secretKeyRef", "optional") == true:
				bad("%s: SEQFLOW_KEK's Secret is optional: a pod without it must not start", where)
			default:
				keks[r] = true
			}
		}
	}
	for _, o := range objs {
		if spec := podSpec(o); spec != nil {
			for _, c := range list(spec, "containers") {
				for _, from := range list(c, "envFrom") {
					for r := range keks {
						if str(from, "secretRef", "name") == r.secret {
							bad("%s %s container %s takes every key of Secret %s, the KEK's", o["kind"], str(o, "metadata", "name"), str(c, "name"), r.secret)
						}
					}
				}
			}
		}
	}
	if !shipsSecrets {
		return problems
	}
	for r := range keks {
		var secret obj
		for _, o := range objs {
			if o["kind"] == "Secret" && str(o, "metadata", "name") == r.secret {
				secret = o
			}
		}
		if secret == nil {
			bad("the gateways take SEQFLOW_KEK from Secret %s, which the overlay does not ship", r.secret)
			continue
		}
		v, ok := at(secret, "stringData", r.key).(string)
		if !ok {
			enc, _ := at(secret, "data", r.key).(string)
			b, err := base64.StdEncoding.DecodeString(enc)
			v, ok = string(b), err == nil && enc != ""
		}
		if !ok {
			bad("Secret %s has no key %s", r.secret, r.key)
		} else if _, err := keystore.ParseKEK(v); err != nil {
			bad("Secret %s key %s: %v", r.secret, r.key, err)
		}
	}
	return problems
}

// checkAdmin: the admin listener is reachable from other pods, and the
// probes ask its /readyz and /healthz (internal/admin).
func checkAdmin(where string, c obj, addr string) []string {
	var problems []string
	host, port, err := net.SplitHostPort(addr)
	if err != nil || (host != "0.0.0.0" && host != "") {
		return []string{fmt.Sprintf("%s: admin address %q, want 0.0.0.0:PORT (probes and Prometheus reach it from outside the pod)", where, addr)}
	}
	portOf := func(p any) string {
		if n, ok := p.(int); ok {
			return strconv.Itoa(n)
		}
		for _, cp := range list(c, "ports") {
			if str(cp, "name") == p {
				return str(cp, "containerPort")
			}
		}
		return ""
	}
	for probe, path := range map[string]string{"readinessProbe": "/readyz", "livenessProbe": "/healthz"} {
		if got := str(c, probe, "httpGet", "path"); got != path {
			problems = append(problems, fmt.Sprintf("%s: %s path %q, want %s", where, probe, got, path))
		}
		if got := portOf(at(c, probe, "httpGet", "port")); got != port {
			problems = append(problems, fmt.Sprintf("%s: %s on port %q, want the admin port %s", where, probe, got, port))
		}
	}
	return problems
}

// checkPushAddress: the gateway listens for the pushers' stream beyond
// loopback and registers its pod IP and that port.
func checkPushAddress(where string, c obj, vars map[string]obj) []string {
	var problems []string
	host, port, err := net.SplitHostPort(str(vars["GATEWAY_PUSH_ADDR"], "value"))
	if err != nil || (host != "0.0.0.0" && host != "") || port == "0" {
		problems = append(problems, fmt.Sprintf("%s: GATEWAY_PUSH_ADDR %q, want 0.0.0.0:PORT", where, str(vars["GATEWAY_PUSH_ADDR"], "value")))
	}
	adv := str(vars["GATEWAY_PUSH_ADVERTISE"], "value")
	m := regexp.MustCompile(`^\$\(([A-Za-z_0-9]+)\):(\d+)$`).FindStringSubmatch(adv)
	if m == nil || m[2] != port || str(vars[m[1]], "valueFrom", "fieldRef", "fieldPath") != "status.podIP" {
		problems = append(problems, fmt.Sprintf("%s: GATEWAY_PUSH_ADVERTISE %q, want $(V):%s with V the pod IP (status.podIP)", where, adv, port))
	}
	exposed := false
	for _, cp := range list(c, "ports") {
		exposed = exposed || str(cp, "containerPort") == port
	}
	if !exposed {
		problems = append(problems, fmt.Sprintf("%s: push port %s is not a container port", where, port))
	}
	return problems
}

// checkSelects: every Service and budget selects pods of this overlay, and
// a Service's named target ports are ports of those pods.
func checkSelects(o obj, objs []obj) []string {
	var sel any
	switch o["kind"] {
	case "Service":
		sel = at(o, "spec", "selector")
	case "PodDisruptionBudget":
		sel = at(o, "spec", "selector", "matchLabels")
	default:
		return nil
	}
	var problems []string
	for _, w := range objs {
		if podSpec(w) == nil || !labelsMatch(sel, at(w, "spec", "template", "metadata", "labels")) {
			continue
		}
		for _, p := range list(o, "spec", "ports") {
			target, named := at(p, "targetPort").(string)
			if !named {
				continue
			}
			found := false
			for _, cp := range list(container(w), "ports") {
				found = found || str(cp, "name") == target
			}
			if !found {
				problems = append(problems, fmt.Sprintf("%s %s: target port %q is no port of %s", o["kind"], str(o, "metadata", "name"), target, str(w, "metadata", "name")))
			}
		}
		return problems
	}
	return append(problems, fmt.Sprintf("%s %s selects no pods", o["kind"], str(o, "metadata", "name")))
}

// checkQuickstart: Kafka runs KRaft on as many nodes as the replication
// needs, its quorum is its pods, and the services point at the Kafka,
// PostgreSQL and Redis of the overlay.
func checkQuickstart(objs []obj) []string {
	var problems []string
	bad := func(f string, a ...any) { problems = append(problems, fmt.Sprintf(f, a...)) }
	kafka := find(objs, "StatefulSet", "kafka")
	replicas, _ := num(kafka, "spec", "replicas")
	vars := envOf(container(kafka))
	val := func(k string) string { return str(vars[k], "value") }
	if val("KAFKA_PROCESS_ROLES") != "broker,controller" {
		bad("kafka: KAFKA_PROCESS_ROLES %q, want broker,controller (KRaft, combined)", val("KAFKA_PROCESS_ROLES"))
	}
	var want []string
	for i := range replicas {
		want = append(want, fmt.Sprintf("%d@kafka-%d.%s:9093", i, i, str(kafka, "spec", "serviceName")))
	}
	if got := val("KAFKA_CONTROLLER_QUORUM_VOTERS"); got != strings.Join(want, ",") {
		bad("kafka: voters %q, want the %d pods %q", got, replicas, strings.Join(want, ","))
	}
	if str(vars["KAFKA_NODE_ID"], "valueFrom", "fieldRef", "fieldPath") != "metadata.labels['apps.kubernetes.io/pod-index']" {
		bad("kafka: KAFKA_NODE_ID must be the pod's ordinal")
	}
	rf, _ := strconv.Atoi(val("KAFKA_DEFAULT_REPLICATION_FACTOR"))
	isr, _ := strconv.Atoi(val("KAFKA_MIN_INSYNC_REPLICAS"))
	txnRF, _ := strconv.Atoi(val("KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"))
	txnISR, _ := strconv.Atoi(val("KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"))
	if replicas < 3 || rf != 3 || txnRF != 3 || isr != 2 || txnISR != 2 {
		bad("kafka: %d nodes, replication %d (transactions %d), min ISR %d (%d): want 3 nodes, 3 and 2, as the setup job's replication 3 needs", replicas, rf, txnRF, isr, txnISR)
	}
	svcs := map[string]bool{}
	for _, o := range objs {
		if o["kind"] == "Service" {
			svcs[str(o, "metadata", "name")] = true
		}
	}
	cfg := find(objs, "ConfigMap", "seqflow")
	for _, b := range strings.Split(str(cfg, "data", "SEQFLOW_KAFKA_BROKERS"), ",") {
		if h, _, _ := net.SplitHostPort(b); !svcs[h] {
			bad("SEQFLOW_KAFKA_BROKERS names %q, no Service of the overlay", b)
		}
	}
	if h, _, _ := net.SplitHostPort(str(cfg, "data", "SEQFLOW_REDIS_ADDR")); !svcs[h] {
		bad("SEQFLOW_REDIS_ADDR names %q, no Service of the overlay", h)
	}
	pg := str(find(objs, "Secret", "seqflow"), "stringData", "SEQFLOW_PG_URL")
	if m := regexp.MustCompile(`@([^:/]+):`).FindStringSubmatch(pg); m == nil || !svcs[m[1]] {
		bad("SEQFLOW_PG_URL %q names no Service of the overlay", pg)
	}
	return problems
}

// selects reports whether a label selector (matchLabels and
// matchExpressions with In, NotIn, Exists, DoesNotExist) selects labels;
// an empty selector selects everything.
func selects(sel, labels any) bool {
	lab, _ := labels.(obj)
	ml, _ := at(sel, "matchLabels").(obj)
	for k, v := range ml {
		if lab[k] != v {
			return false
		}
	}
	for _, e := range list(sel, "matchExpressions") {
		v, has := lab[str(e, "key")]
		in := false
		for _, x := range list(e, "values") {
			in = in || (has && x == v)
		}
		switch str(e, "operator") {
		case "In":
			if !in {
				return false
			}
		case "NotIn":
			if in {
				return false
			}
		case "Exists":
			if !has {
				return false
			}
		case "DoesNotExist":
			if has {
				return false
			}
		}
	}
	return true
}

// checkAdminAccess: every service mounts the Secret seqflow-admin where
// SEQFLOW_ADMIN_TOKENS_FILE points, and the NetworkPolicies let only
// namespaces (monitoring, operators) reach the admin ports, only the
// pushers and sequencers the gateway's push port, everyone its client
// port, and nothing reach any other port of a service's pods.
func checkAdminAccess(objs []obj) []string {
	var problems []string
	bad := func(f string, a ...any) { problems = append(problems, fmt.Sprintf(f, a...)) }
	var cm obj
	for _, o := range objs {
		if o["kind"] == "ConfigMap" && str(o, "metadata", "name") == "seqflow" {
			cm = o
		}
	}
	tokens := str(cm, "data", "SEQFLOW_ADMIN_TOKENS_FILE")
	if tokens == "" {
		bad("ConfigMap seqflow: no SEQFLOW_ADMIN_TOKENS_FILE (the operators' tokens)")
	}
	workloads := map[string]obj{} // service -> workload
	for _, o := range objs {
		if spec := podSpec(o); spec != nil && o["kind"] != "Job" {
			if svc, ours := imageService(str(container(o), "image")); ours {
				workloads[svc] = o
			}
		}
	}
	for svc, w := range workloads {
		mounted := false
		for _, v := range list(podSpec(w), "volumes") {
			if str(v, "secret", "secretName") != "seqflow-admin" {
				continue
			}
			for _, m := range list(container(w), "volumeMounts") {
				mounted = mounted || (str(m, "name") == str(v, "name") && tokens != "" && filepath.Dir(tokens) == str(m, "mountPath"))
			}
		}
		if !mounted {
			bad("%s: the Secret seqflow-admin is not mounted where SEQFLOW_ADMIN_TOKENS_FILE (%q) points", svc, tokens)
		}
	}
	labelsOf := func(w obj) any { return at(w, "spec", "template", "metadata", "labels") }
	for svc, w := range workloads {
		ports := map[string]string{} // number -> name
		for _, cp := range list(container(w), "ports") {
			ports[str(cp, "containerPort")] = str(cp, "name")
		}
		peers := map[string][]any{} // port name -> peers; a nil peer: everyone
		isolated := false
		for _, np := range objs {
			if np["kind"] != "NetworkPolicy" || !selects(at(np, "spec", "podSelector"), labelsOf(w)) {
				continue
			}
			if !slices.Contains(list(np, "spec", "policyTypes"), any("Ingress")) {
				continue
			}
			isolated = true
			for _, r := range list(np, "spec", "ingress") {
				covered := []string{}
				for _, p := range list(r, "ports") {
					if name, ok := at(p, "port").(string); ok {
						covered = append(covered, name)
					} else {
						covered = append(covered, ports[str(p, "port")])
					}
				}
				if len(list(r, "ports")) == 0 {
					for _, name := range ports {
						covered = append(covered, name)
					}
				}
				from := list(r, "from")
				if len(from) == 0 {
					from = []any{nil}
				}
				for _, name := range covered {
					peers[name] = append(peers[name], from...)
				}
			}
		}
		if !isolated {
			bad("%s: no NetworkPolicy selects its pods: every port is open to every pod", svc)
			continue
		}
		for name, ps := range peers {
			for _, peer := range ps {
				switch {
				case name == "client":
				case name == "admin" && peer != nil && at(peer, "namespaceSelector") != nil && at(peer, "podSelector") == nil && at(peer, "ipBlock") == nil &&
					len(at(peer, "namespaceSelector").(obj)) > 0:
				case name == "push" && svc == "producer-gw" && peer != nil && at(peer, "podSelector") != nil && at(peer, "namespaceSelector") == nil:
					for other, ow := range workloads {
						// Gateways push typing and receipt signals to each other.
						if selects(at(peer, "podSelector"), labelsOf(ow)) != (other == "pusher" || other == "sequencer" || other == "producer-gw") {
							bad("%s: the push port's peer %v selects %s: want the pushers, sequencers and gateways only", svc, peer, other)
						}
					}
				default:
					bad("%s: port %q is open to %v", svc, name, peer)
				}
			}
		}
		if len(peers["admin"]) == 0 {
			bad("%s: nobody may reach the admin port (Prometheus)", svc)
		}
		if svc == "producer-gw" && (len(peers["push"]) == 0 || !slices.Contains(peers["client"], nil)) {
			bad("%s: push port peers %v, client port peers %v: want the pushers, sequencers and gateways, and everyone", svc, peers["push"], peers["client"])
		}
	}
	return problems
}
