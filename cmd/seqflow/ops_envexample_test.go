package main

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/seqflow/seqflow/internal/testkit/stack"
)

// envRead matches a variable read by a service: the string literal first
// argument of internal/config's readers, or of os.Getenv / os.LookupEnv.
var envRead = regexp.MustCompile(`\b(?:e\.(?:String|Int|Duration|Bool|List|Required|Optional|OneOf)|os\.(?:Getenv|LookupEnv))\(\s*"([A-Z][A-Z0-9_]*)"`)

// literalDefault matches a read whose default is a string or bool literal.
var literalDefault = regexp.MustCompile(`\be\.(?:String|Optional|Bool)\(\s*"([A-Z][A-Z0-9_]*)",\s*("[^"]*"|true|false)\s*\)`)

// envLine matches "VAR=value" or a commented-out "# VAR=".
var envLine = regexp.MustCompile(`^(?:#\s*)?([A-Z][A-Z0-9_]*)=`)

// serviceEnv returns every variable the services read, with the files
// that read it. A service is a top-level folder with a config.go; the
// admin server's variables (internal/admin/config.go) are every service's.
func serviceEnv(t *testing.T, root string) map[string][]string {
	t.Helper()
	configs, err := filepath.Glob(filepath.Join(root, "*", "config.go"))
	if err != nil || len(configs) < 4 {
		t.Fatalf("found %d service config.go files (%v), want at least the 4 services", len(configs), err)
	}
	vars := map[string][]string{}
	for _, cfg := range append(configs, filepath.Join(root, "internal", "admin", "config.go")) {
		files, _ := filepath.Glob(filepath.Join(filepath.Dir(cfg), "*.go"))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			rel, _ := filepath.Rel(root, f)
			for _, m := range envRead.FindAllSubmatch(src, -1) {
				vars[string(m[1])] = append(vars[string(m[1])], rel)
			}
		}
	}
	return vars
}

// exampleEnv returns the variables .env.example lists, and the ones it
// lists twice.
func exampleEnv(src string) (vars map[string]bool, twice []string) {
	vars = map[string]bool{}
	for _, l := range strings.Split(src, "\n") {
		if m := envLine.FindStringSubmatch(strings.TrimSpace(l)); m != nil {
			if vars[m[1]] {
				twice = append(twice, m[1])
			}
			vars[m[1]] = true
		}
	}
	return vars, twice
}

func TestEnvExampleListsEveryServiceVariable(t *testing.T) {
	root := stack.Root()
	src, err := os.ReadFile(filepath.Join(root, ".env.example"))
	if err != nil {
		t.Fatal(err)
	}
	listed, twice := exampleEnv(string(src))
	read := serviceEnv(t, root)
	if len(read) < 50 {
		t.Fatalf("found only %d variables in the services: is the pattern still right?", len(read))
	}
	var missing, stale []string
	for v, files := range read {
		if !listed[v] {
			missing = append(missing, v+" (read in "+strings.Join(files, ", ")+")")
		}
	}
	for v := range listed {
		if read[v] == nil {
			stale = append(stale, v)
		}
	}
	sort.Strings(missing)
	sort.Strings(stale)
	for _, v := range missing {
		t.Errorf(".env.example lacks %s", v)
	}
	for _, v := range stale {
		t.Errorf(".env.example lists %s, which no service reads any more", v)
	}
	for _, v := range twice {
		t.Errorf(".env.example lists %s twice", v)
	}
}

// TestEnvPatterns pins the two patterns the test above relies on, so that
// it cannot pass by matching nothing.
func TestEnvExampleDefaultsMatchLiterals(t *testing.T) {
	root := stack.Root()
	src, err := os.ReadFile(filepath.Join(root, ".env.example"))
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]string{}
	for _, l := range strings.Split(string(src), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok && !strings.HasPrefix(k, "#") {
			values[k] = v
		}
	}
	configs, _ := filepath.Glob(filepath.Join(root, "*", "config.go"))
	checked := 0
	for _, cfg := range configs {
		code, err := os.ReadFile(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range literalDefault.FindAllStringSubmatch(string(code), -1) {
			name, def := m[1], strings.Trim(m[2], `"`)
			if def == "" && strings.HasPrefix(m[0], "e.Optional") {
				continue // a feature that is off unless set: the example may set it
			}
			got, ok := values[name]
			if !ok {
				continue // commented out or required: TestEnvExampleListsEveryServiceVariable covers presence
			}
			checked++
			if got != def {
				t.Errorf(".env.example %s=%s, but %s defaults to %q", name, got, filepath.Base(filepath.Dir(cfg)), def)
			}
		}
	}
	if checked < 10 {
		t.Errorf("checked only %d literal defaults: is the pattern still right?", checked)
	}
}

func TestEnvPatterns(t *testing.T) {
	reads := []struct {
		src  string
		want string
	}{
		{`Group: e.String("PUSHER_GROUP", "seqflow-pusher"),`, "PUSHER_GROUP"},
		{`e.Duration("GATEWAY_ACK_WAIT", 2*time.Second, 0, 30*time.Second)`, "GATEWAY_ACK_WAIT"},
		{`PGURL: e.Required("SEQFLOW_PG_URL"),`, "SEQFLOW_PG_URL"},
		{`e.Optional(` + "\n\t\t" + `"SEQUENCER_ADMIN_ADDR", "127.0.0.1:9101")`, "SEQUENCER_ADMIN_ADDR"},
		{`if os.Getenv("SEQUENCER_KAFKA_DEBUG") == "1" {`, "SEQUENCER_KAFKA_DEBUG"},
		{`e.List(key, nil)`, ""},
		{`fmt.Errorf("GATEWAY_ID=%q: %w", id, err)`, ""},
	}
	for _, c := range reads {
		t.Run(c.src, func(t *testing.T) {
			got := ""
			if m := envRead.FindStringSubmatch(c.src); m != nil {
				got = m[1]
			}
			if got != c.want {
				t.Errorf("read %q, want %q", got, c.want)
			}
		})
	}
	vars, twice := exampleEnv("# comment\nA_B=1\n#  C_D=\n# E is documented here\nlower=1\nA_B=2\n")
	if len(vars) != 2 || !vars["A_B"] || !vars["C_D"] || len(twice) != 1 {
		t.Errorf("parsed %v twice %v, want A_B and C_D with A_B twice", vars, twice)
	}
}
