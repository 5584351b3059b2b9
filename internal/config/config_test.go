package config

import (
	"strings"
	"testing"
	"time"
)

func TestEnv(t *testing.T) {
	e := FromMap(map[string]string{
		"A": "7", "B": "99", "D": "2s", "L": "x, y,,z", "BAD_D": "soon", "T": "true", "OFF": "", "CODEC": "zstd", "BAD_CODEC": "gzip",
	})
	if got := e.Int("A", 1, 0, 10); got != 7 {
		t.Errorf("Int A = %d, want 7", got)
	}
	if got := e.Int("MISSING", 3, 0, 10); got != 3 {
		t.Errorf("Int default = %d, want 3", got)
	}
	if got := e.Int("B", 5, 0, 10); got != 5 {
		t.Errorf("out of range Int should fall back to default, got %d", got)
	}
	if got := e.Duration("D", time.Second, 0, time.Hour); got != 2*time.Second {
		t.Errorf("Duration = %s", got)
	}
	e.Duration("BAD_D", time.Second, 0, time.Hour)
	if got := e.List("L", nil); strings.Join(got, "|") != "x|y|z" {
		t.Errorf("List = %q", got)
	}
	if !e.Bool("T", false) {
		t.Error("Bool T should be true")
	}
	if got := e.Optional("OFF", "on"); got != "" {
		t.Errorf("Optional set to empty = %q, want empty", got)
	}
	if got := e.Optional("UNSET", "on"); got != "on" {
		t.Errorf("Optional unset = %q, want default", got)
	}
	if got := e.OneOf("CODEC", "snappy", "snappy", "zstd"); got != "zstd" {
		t.Errorf("OneOf = %q, want zstd", got)
	}
	if got := e.OneOf("UNSET", "snappy", "snappy", "zstd"); got != "snappy" {
		t.Errorf("OneOf unset = %q, want the default", got)
	}
	e.OneOf("BAD_CODEC", "snappy", "snappy", "zstd")
	e.Required("NEEDED")
	err := e.Err()
	if err == nil {
		t.Fatal("want errors for B, BAD_D, BAD_CODEC and NEEDED")
	}
	for _, want := range []string{"B=", "BAD_D=", `BAD_CODEC="gzip": want one of snappy, zstd`, "NEEDED is required"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}
