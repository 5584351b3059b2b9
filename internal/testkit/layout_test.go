// Package testkit holds seqflow's test tooling, apart from the product:
// the process launcher (proc), the local stack finder (stack), the
// whole-pipeline harness for SDK tests (clienttest), the push-transport
// conformance suite (deliverytest), the guarantee checker of the log
// (logcheck), the reliability suite (chaos, run by cmd/seqchaos) and the
// benchmark's floor (floor, run by cmd/seqfloor and cmd/seqbench).
//
// This file holds the rules that keep the two apart, checked on the
// import graph that `go list` reports.
package testkit

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/seqflow/seqflow"

type pkg struct {
	path, name string
	imports    []string // non-test imports
}

func listPackages(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}} {{.Name}} {{join .Imports \" \"}}", module+"/...")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		pkgs = append(pkgs, pkg{path: f[0], name: f[1], imports: f[2:]})
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found %d packages; expected the whole module", len(pkgs))
	}
	return pkgs
}

// testTools are the commands built on the test kit: they may import it.
var testTools = []string{module + "/cmd/seqchaos", module + "/cmd/seqbench", module + "/cmd/seqfloor"}

func inTestKit(path string) bool {
	return path == module+"/internal/testkit" || strings.HasPrefix(path, module+"/internal/testkit/")
}

func TestProductDoesNotImportTestKit(t *testing.T) {
	for _, p := range listPackages(t) {
		if inTestKit(p.path) || slices.Contains(testTools, p.path) {
			continue
		}
		for _, imp := range p.imports {
			if inTestKit(imp) {
				t.Errorf("%s imports %s: only the test kit, its commands and _test.go files may", p.path, imp)
			}
		}
	}
}

// The services and the shared packages under internal/ serve clients; they
// never link the client SDK (the operator CLI and the test tools may).
func TestProductDoesNotImportClient(t *testing.T) {
	services := []string{"/producer-gw", "/sequencer", "/persister", "/pusher", "/schemas"}
	for _, p := range listPackages(t) {
		rel := strings.TrimPrefix(p.path, module)
		product := strings.HasPrefix(rel, "/internal/") && !inTestKit(p.path)
		for _, s := range services {
			product = product || rel == s || strings.HasPrefix(rel, s+"/")
		}
		if !product {
			continue
		}
		for _, imp := range p.imports {
			if imp == module+"/client" || strings.HasPrefix(imp, module+"/client/") {
				t.Errorf("%s imports %s", p.path, imp)
			}
		}
	}
}

// Two packages of one name make a reader (and a grep) guess which is meant.
func TestPackageNamesUnique(t *testing.T) {
	seen := map[string]string{}
	for _, p := range listPackages(t) {
		if p.name == "main" {
			continue
		}
		if other, ok := seen[p.name]; ok {
			t.Errorf("package name %q is used by %s and %s", p.name, other, p.path)
		}
		seen[p.name] = p.path
	}
}

// The operator CLI links no test code: neither the test kit nor the
// standard library's testing package.
func TestOperatorCLILinksNoTestCode(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", module+"/cmd/seqflow").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, module+"/internal/config") {
		t.Fatalf("go list -deps of cmd/seqflow lacks internal/config; the listing is wrong: %v", deps)
	}
	for _, d := range deps {
		if d == "testing" || inTestKit(d) {
			t.Errorf("cmd/seqflow links %s", d)
		}
	}
}
