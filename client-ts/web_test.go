package clientts

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

// webSDK is the compiled browser entry the gateway embeds for its demo
// chat page (producer-gw/web.go), committed because the gateway builds
// without Node.
const webSDK = "../producer-gw/web/sdk"

// TestWebSDKFresh fails when the committed copy of the SDK's browser entry
// under producer-gw/web/sdk is not what scripts/build-web.mjs writes from
// src now: a changed module, a missing one or one the entry no longer
// imports. It needs Node, not the stack: without Node it is skipped, and
// fails under SEQFLOW_REQUIRE_STACK=1, where a skip could hide a stale page.
func TestWebSDKFresh(t *testing.T) {
	if _, err := exec.LookPath("node"); err != nil {
		msg := "node not found (Node 20 or newer; `go tool task test:packages` installs it): " + err.Error()
		if os.Getenv("SEQFLOW_REQUIRE_STACK") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	if err := npmInstall(); err != nil {
		t.Fatal(err)
	}
	fresh := t.TempDir()
	if b, err := exec.Command("node", "scripts/build-web.mjs", fresh).CombinedOutput(); err != nil {
		t.Fatalf("node scripts/build-web.mjs: %v\n%s", err, b)
	}
	want, got := readDir(t, fresh), readDir(t, webSDK)
	if len(want) == 0 {
		t.Fatal("scripts/build-web.mjs wrote no file")
	}
	const fix = "run `go tool task web:sdk` and commit producer-gw/web/sdk"
	for _, name := range sortedKeys(want) {
		b, ok := got[name]
		switch {
		case !ok:
			t.Errorf("producer-gw/web/sdk lacks %s: %s", name, fix)
		case !bytes.Equal(b, want[name]):
			t.Errorf("producer-gw/web/sdk/%s differs from a fresh build of src: %s", name, fix)
		}
	}
	for _, name := range sortedKeys(got) {
		if _, ok := want[name]; !ok {
			t.Errorf("producer-gw/web/sdk/%s is not part of the browser entry any more: %s", name, fix)
		}
	}
}

// readDir reads the regular files of dir, by name (a directory in it is
// an error: the gateway serves one path segment).
func readDir(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			t.Errorf("%s/%s is not a regular file", dir, e.Name())
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = b
	}
	return out
}

func sortedKeys(m map[string][]byte) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
