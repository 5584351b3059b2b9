package peerauth

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoad(t *testing.T) {
	k1, k2 := NewEntry("k1"), NewEntry("k2")
	file := filepath.Join(t.TempDir(), "ring")
	if err := os.WriteFile(file, []byte("# the ring\n"+k2+"\n\n"+k1+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name     string
		env      map[string]string
		ids      []string
		insecure bool
		wantErr  string
	}{
		{name: "nothing set refuses", env: nil, wantErr: "SEQFLOW_PEER_KEYS_FILE"},
		{name: "inline ring, first signs", env: map[string]string{EnvKeys: k1 + "," + k2}, ids: []string{"k1", "k2"}},
		{name: "file wins over inline", env: map[string]string{EnvKeysFile: file, EnvKeys: k1}, ids: []string{"k2", "k1"}},
		{name: "missing file", env: map[string]string{EnvKeysFile: file + ".gone"}, wantErr: EnvKeysFile},
		{name: "insecure by name", env: map[string]string{EnvAuth: InsecureNone}, ids: []string{InsecureNone}, insecure: true},
		{name: "hmac still needs a ring", env: map[string]string{EnvAuth: "hmac"}, wantErr: "peer key ring required"},
		{name: "unknown mode", env: map[string]string{EnvAuth: "none", EnvKeys: k1}, wantErr: EnvAuth},
		{name: "short key", env: map[string]string{EnvKeys: "k:c2hvcnQ="}, wantErr: "at least 32"},
		{name: "not base64", env: map[string]string{EnvKeys: "k:!!!"}, wantErr: "not base64"},
		{name: "no id", env: map[string]string{EnvKeys: strings.TrimPrefix(k1, "k1:")}, wantErr: "want id:base64key"},
		{name: "duplicate id", env: map[string]string{EnvKeys: k1 + "," + NewEntry("k1")}, wantErr: "twice"},
		{name: "bad id", env: map[string]string{EnvKeys: "a b" + strings.TrimPrefix(k1, "k1")}, wantErr: "want id:base64key"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			k, err := Load(func(key string) (string, bool) { v, ok := c.env[key]; return v, ok })
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want one mentioning %q", err, c.wantErr)
				}
				if strings.Contains(err.Error(), strings.TrimPrefix(k1, "k1:")) {
					t.Fatalf("the error shows a key: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(k.IDs(), ","); got != strings.Join(c.ids, ",") || k.SigningID() != c.ids[0] || k.IsInsecure() != c.insecure {
				t.Fatalf("ring %s (insecure %v), want %v", got, k.IsInsecure(), c.ids)
			}
		})
	}
	if _, err := Load(func(string) (string, bool) { return "", false }); !errors.Is(err, ErrNoKeys) {
		t.Fatalf("no settings: %v, want ErrNoKeys", err)
	}
}

func TestMACFraming(t *testing.T) {
	key := []byte("k")
	if Equal(MAC(key, []byte("ab"), []byte("c")), MAC(key, []byte("a"), []byte("bc"))) {
		t.Fatal("two part lists share a MAC")
	}
}
