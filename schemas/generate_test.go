package schemas_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGeneratedCodeIsFresh regenerates imv1 into a temp dir and fails when
// the committed files differ: run `go tool task generate` and commit.
func TestGeneratedCodeIsFresh(t *testing.T) {
	if _, err := exec.LookPath("protoc"); err != nil {
		t.Fatalf("protoc not found (Debian package protobuf-compiler); `go tool task test` installs it: %v", err)
	}
	out := t.TempDir()
	cmd := exec.Command("bash", "generate.sh")
	cmd.Env = append(os.Environ(), "OUT="+out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("generate.sh: %v\n%s", err, b)
	}
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
