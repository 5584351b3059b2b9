package schemas_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	generateOnce sync.Once
	generated    string
	generateErr  string
)

// TestMain removes generate's temp dir after the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if generated != "" {
		os.RemoveAll(generated)
	}
	os.Exit(code)
}

// generate runs generate.sh once per test binary into a temp dir and
// returns the dir: the tests of the Go code and of the descriptor set
// share one run.
func generate(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("protoc"); err != nil {
		t.Fatalf("protoc not found (Debian package protobuf-compiler); `go tool task test` installs it: %v", err)
	}
	generateOnce.Do(func() {
		out, err := os.MkdirTemp("", "seqflow-generate-")
		if err != nil {
			generateErr = err.Error()
			return
		}
		cmd := exec.Command("bash", "generate.sh")
		cmd.Env = append(os.Environ(), "OUT="+out)
		if b, err := cmd.CombinedOutput(); err != nil {
			generateErr = "generate.sh: " + err.Error() + "\n" + string(b)
			return
		}
		generated = out
	})
	if generateErr != "" {
		t.Fatal(generateErr)
	}
	return generated
}

// TestGeneratedCodeIsFresh regenerates imv1 into a temp dir and fails when
// the committed files differ: run `go tool task generate` and commit.
func TestGeneratedCodeIsFresh(t *testing.T) {
	out := generate(t)
	fresh, err := filepath.Glob(filepath.Join(out, "*.pb.go"))
	if err != nil || len(fresh) == 0 {
		t.Fatalf("no generated files in %s (err %v)", out, err)
	}
	committed, _ := filepath.Glob(filepath.Join("imv1", "*.pb.go"))
	if len(committed) != len(fresh) {
		t.Fatalf("imv1 has %d generated files, generator makes %d: run `go tool task generate`", len(committed), len(fresh))
	}
	for _, f := range fresh {
		want, _ := os.ReadFile(f)
		have, err := os.ReadFile(filepath.Join("imv1", filepath.Base(f)))
		if err != nil {
			t.Fatalf("imv1/%s missing: run `go tool task generate`", filepath.Base(f))
		}
		if !bytes.Equal(want, have) {
			t.Errorf("imv1/%s is stale: run `go tool task generate` and commit", filepath.Base(f))
		}
	}
}
