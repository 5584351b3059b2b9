package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/seqflow/seqflow/internal/testkit/proc"
)

// TestUsageHidesSecrets runs the binary's usage text of every command that
// reads a secret from the environment as a flag default, with those
// variables set: no value may appear, and the flags still take them.
func TestUsageHidesSecrets(t *testing.T) {
	bin := proc.Build(t, "./cmd/seqflow")
	secrets := map[string]string{
		"GATEWAY_JWT_HS256_SECRET":            "hs256-secret-from-the-environment-0123",
		"SEQFLOW_TOKEN":                       "token-from-the-environment",
		"GATEWAY_DEV_JWT_ED25519_PRIVATE_KEY": "ed25519-key-from-the-environment",
	}
	env := []string{"PATH=/usr/bin:/bin"}
	for k, v := range secrets {
		env = append(env, k+"="+v)
	}
	for _, cmd := range []string{"token", "send", "chat", "tail", "load"} {
		t.Run(cmd, func(t *testing.T) {
			c := exec.Command(bin, cmd, "-h")
			c.Env = env
			out, _ := c.CombinedOutput()
			if !strings.Contains(string(out), "-secret") && !strings.Contains(string(out), "-token") {
				t.Fatalf("no usage text: %s", out)
			}
			for k, v := range secrets {
				if strings.Contains(string(out), v) {
					t.Errorf("the usage text prints %s's value:\n%s", k, out)
				}
			}
		})
	}
	// The environment still supplies the value.
	c := exec.Command(bin, "token", "-user", "u1", "-device", "d1")
	c.Env = []string{"PATH=/usr/bin:/bin", "GATEWAY_JWT_HS256_SECRET=" + secrets["GATEWAY_JWT_HS256_SECRET"]}
	out, err := c.CombinedOutput()
	if err != nil || strings.Count(string(out), ".") != 2 {
		t.Fatalf("token from GATEWAY_JWT_HS256_SECRET: %v %s", err, out)
	}
}
