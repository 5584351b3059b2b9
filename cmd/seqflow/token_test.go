package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/seqflow/seqflow/internal/auth"
)

func TestTokenCommand(t *testing.T) {
	const secret = "0123456789abcdef0123456789abcdef"
	var keys bytes.Buffer
	if err := token(&keys, []string{"--new-key"}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(keys.String()), "\n") {
		k, v, _ := strings.Cut(l, "=")
		env[k] = v
	}
	pub, err := auth.ParseEd25519PublicKey(env["GATEWAY_JWT_ED25519_PUBLIC_KEY"])
	if err != nil {
		t.Fatalf("--new-key public key: %v", err)
	}
	hsV, _ := auth.NewHS256Verifier([]byte(secret))
	edV, _ := auth.NewEd25519Verifier(pub)
	cases := []struct {
		name     string
		args     []string
		v        *auth.Verifier
		wantErr  bool
		platform string
	}{
		{"hs256", []string{"--user", "u1", "--device", "d1", "--secret", secret}, hsV, false, ""},
		{"platform", []string{"--user", "u1", "--device", "d1", "--secret", secret, "--platform", "ios"}, hsV, false, "ios"},
		{"bad platform", []string{"--user", "u1", "--device", "d1", "--secret", secret, "--platform", "i o s"}, nil, true, ""},
		{"ed25519", []string{"--user", "u1", "--device", "d1", "--secret", "", "--ed25519-private-key", env["GATEWAY_DEV_JWT_ED25519_PRIVATE_KEY"]}, edV, false, ""},
		{"missing device", []string{"--user", "u1", "--secret", secret}, nil, true, ""},
		{"no key", []string{"--user", "u1", "--device", "d1", "--secret", "", "--ed25519-private-key", ""}, nil, true, ""},
		{"short secret", []string{"--user", "u1", "--device", "d1", "--secret", "short"}, nil, true, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			err := token(&out, c.args)
			if c.wantErr {
				if err == nil {
					t.Fatalf("token %v succeeded", c.args)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			p, err := c.v.Verify(strings.TrimSpace(out.String()))
			if err != nil || p.UserID != "u1" || p.DeviceID != "d1" || p.Platform != c.platform {
				t.Fatalf("minted token: %+v, %v", p, err)
			}
		})
	}
}
