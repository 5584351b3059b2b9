// Package infra holds the tests of the deployment files under infra/: the
// Kubernetes overlays built with kustomize and validated with kubeconform,
// the compose file loaded by the compose specification's loader, and what
// seqflow needs of both (probes on the real admin endpoints, variables the
// services read, a push address other pods can reach, budgets, partitions).
package infra

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// repoRoot is the directory holding go.mod.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			t.Fatalf("no go.mod above %s", dir)
		}
	}
}

// envRead matches a variable read through internal/config's Env, os.Getenv
// or os.LookupEnv, or config.LoadLocal's get.
var envRead = regexp.MustCompile(`\b(?:e\.(?:String|Int|Duration|Bool|List|Required|Optional)|os\.(?:Getenv|LookupEnv)|get)\(\s*"([A-Z][A-Z0-9_]*)"`)

// serviceEnv returns the variables each binary reads, by its package path
// ("sequencer", "producer-gw", "cmd/seqflow", ...): those its own package
// reads and those of the internal packages (a superset of what it links,
// which is what a check of names can afford).
func serviceEnv(t *testing.T, root string, pkgs ...string) map[string]map[string]bool {
	t.Helper()
	read := func(dirs ...string) map[string]bool {
		vars := map[string]bool{}
		for _, dir := range dirs {
			err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d os.DirEntry, err error) error {
				if err != nil {
					return err
				}
				if d.IsDir() && p != filepath.Join(root, dir) && dir != "internal" {
					return filepath.SkipDir // the package itself, not its children
				}
				if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") || strings.Contains(p, "testkit") {
					return nil
				}
				src, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				for _, m := range envRead.FindAllSubmatch(src, -1) {
					vars[string(m[1])] = true
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		return vars
	}
	out := map[string]map[string]bool{}
	for _, p := range pkgs {
		out[p] = read(p, "internal")
		if len(out[p]) < 5 {
			t.Fatalf("%s reads %d variables: is the pattern still right?", p, len(out[p]))
		}
	}
	return out
}

// imageService maps an image name of the manifests to the package its
// binary is built from (infra/docker/service.Dockerfile's SERVICE).
func imageService(image string) (string, bool) {
	name, _, _ := strings.Cut(image, ":")
	name = name[strings.LastIndex(name, "/")+1:]
	switch name {
	case "sequencer", "persister", "pusher", "producer-gw":
		return name, true
	case "seqflow":
		return "cmd/seqflow", true
	}
	return "", false
}

// services are the packages whose binaries run in the deployments.
var services = []string{"sequencer", "persister", "pusher", "producer-gw", "cmd/seqflow"}

// adminEnv names each service's admin address variable.
var adminEnv = map[string]string{
	"sequencer":   "SEQUENCER_ADMIN_ADDR",
	"persister":   "PERSISTER_ADMIN_ADDR",
	"pusher":      "PUSHER_ADMIN_ADDR",
	"producer-gw": "GATEWAY_ADMIN_ADDR",
}

// instanceEnv names the variable that must be unique and stable per
// instance (docs/operations.md, "Instance IDs").
var instanceEnv = map[string]string{
	"sequencer":   "SEQUENCER_INSTANCE_ID",
	"persister":   "PERSISTER_INSTANCE_ID",
	"pusher":      "PUSHER_INSTANCE_ID",
	"producer-gw": "GATEWAY_ID",
}

func TestMain(m *testing.M) {
	code := m.Run()
	if kubeSchemaDir.dir != "" {
		os.RemoveAll(kubeSchemaDir.dir)
	}
	os.Exit(code)
}
