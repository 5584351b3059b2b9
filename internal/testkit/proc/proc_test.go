package proc

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"
)

// TestAddrReadsTheCurrentRun: Addr returns the address the current run
// logged, not an earlier run's, and fails at once for a run that exits
// without logging one.
func TestAddrReadsTheCurrentRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p := &Proc{Name: "sh", Bin: "/bin/sh", Log: filepath.Join(t.TempDir(), "sh.log"),
		Args: []string{"-c", `echo '{"level":"INFO","msg":"other","addr":"127.0.0.1:1"}'; echo "{\"msg\":\"admin listening\",\"addr\":\"$ADDR\"}"; sleep 30`},
		Env:  []string{"ADDR=127.0.0.1:1111"}}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	if got, err := p.Addr(ctx, "admin listening"); err != nil || got != "127.0.0.1:1111" {
		t.Fatalf("first run: %q, %v; want 127.0.0.1:1111", got, err)
	}
	p.Kill()
	p.Env = append(p.Env, "ADDR=127.0.0.1:2222")
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	if got, err := p.Addr(ctx, "admin listening"); err != nil || got != "127.0.0.1:2222" {
		t.Fatalf("restart: %q, %v; want 127.0.0.1:2222 (the current run's)", got, err)
	}
	p.Kill()
	p.Args = []string{"-c", "echo bind: address already in use; exit 1"}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	if got, err := p.Addr(ctx, "admin listening"); !errors.Is(err, ErrExited) {
		t.Fatalf("exited run: %q, %v; want ErrExited", got, err)
	}
}
