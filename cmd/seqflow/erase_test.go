package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seqflow/seqflow/internal/keystore"
	"github.com/seqflow/seqflow/internal/testkit/stack"
)

// TestEraseUser: `seqflow erase user U` destroys U's keys (a body sealed
// before no longer opens), reports what it did, and refuses bad usage.
func TestEraseUser(t *testing.T) {
	st := stack.Require(t, "pg")
	ctx := context.Background()
	kb := make([]byte, keystore.KeyBytes)
	_, _ = rand.Read(kb)
	kekText := base64.StdEncoding.EncodeToString(kb)
	t.Setenv("SEQFLOW_PG_URL", st.PGURL)
	t.Setenv("SEQFLOW_KEK", kekText)
	pool, err := pgxpool.New(ctx, st.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	kek, _ := keystore.ParseKEK(kekText)
	ks, err := keystore.Open(ctx, pool, kek, keystore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	u, sess := "u-"+uuid.NewString()[:8], "s-"+uuid.NewString()[:8]
	k, err := ks.ForWrite(ctx, u, sess)
	if err != nil {
		t.Fatal(err)
	}
	sealed := k.Seal([]byte("hello"), sess, u)

	for _, bad := range [][]string{nil, {"user"}, {"session", "x"}, {"user", "--actor"}} {
		if err := erase(ctx, &bytes.Buffer{}, bad); err == nil {
			t.Errorf("erase %q accepted", bad)
		}
	}
	var out bytes.Buffer
	if err := erase(ctx, &out, []string{"user", u, "--actor", "dpo"}); err != nil {
		t.Fatal(err)
	}
	var got struct {
		UserID        string `json:"user_id"`
		KeysDestroyed int64  `json:"keys_destroyed"`
		Actor         string `json:"actor"`
		Again         bool   `json:"again"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("output %q: %v", out.String(), err)
	}
	if got.UserID != u || got.KeysDestroyed != 1 || got.Actor != "dpo" || got.Again {
		t.Fatalf("erase printed %+v", got)
	}
	fresh, err := keystore.Open(ctx, pool, kek, keystore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fresh.OpenBody(ctx, k.ID, sealed, sess, u); !errors.Is(err, keystore.ErrDestroyed) {
		t.Fatalf("a body of the erased user: %v, want ErrDestroyed", err)
	}
}

// TestRetentionCommand: set, list and remove a session's policy through
// the CLI, and the usage errors. (ApplyRetention's choice of keys is
// tested in internal/keystore, on a clock of its own: applying here would
// use this database's real keys.)
func TestRetentionCommand(t *testing.T) {
	st := stack.Require(t, "pg")
	ctx := context.Background()
	kb := make([]byte, keystore.KeyBytes)
	_, _ = rand.Read(kb)
	t.Setenv("SEQFLOW_PG_URL", st.PGURL)
	t.Setenv("SEQFLOW_KEK", base64.StdEncoding.EncodeToString(kb))
	sess := "s-" + uuid.NewString()[:8]
	for _, bad := range [][]string{nil, {"set"}, {"set", "--keep", "1ms", "--session", sess}, {"drop"}, {"list", "extra"}} {
		if err := retention(ctx, &bytes.Buffer{}, bad); err == nil {
			t.Errorf("retention %q accepted", bad)
		}
	}
	listed := func() map[string]string {
		t.Helper()
		var out bytes.Buffer
		if err := retention(ctx, &out, []string{"list"}); err != nil {
			t.Fatal(err)
		}
		var ps []map[string]string
		if err := json.Unmarshal(out.Bytes(), &ps); err != nil {
			t.Fatalf("list printed %q: %v", out.String(), err)
		}
		m := map[string]string{}
		for _, p := range ps {
			m[p["scope"]] = p["keep"]
		}
		return m
	}
	if err := retention(ctx, &bytes.Buffer{}, []string{"set", "--keep", "720h", "--session", sess}); err != nil {
		t.Fatal(err)
	}
	if got := listed()[sess]; got != "720h0m0s" {
		t.Fatalf("the session's policy is listed as %q", got)
	}
	if err := retention(ctx, &bytes.Buffer{}, []string{"set", "--keep", "0", "--session", sess}); err != nil {
		t.Fatal(err)
	}
	if got, ok := listed()[sess]; ok {
		t.Fatalf("the removed policy is still listed: %q", got)
	}
}

// TestKeysCommand: `keys status` counts keys per KEK; `keys rotate` with
// the old KEK in SEQFLOW_KEK_PREVIOUS moves them under SEQFLOW_KEK.
func TestKeysCommand(t *testing.T) {
	st := stack.Require(t, "pg")
	ctx := context.Background()
	kek := func() (string, *keystore.LocalKEK) {
		b := make([]byte, keystore.KeyBytes)
		_, _ = rand.Read(b)
		s := base64.StdEncoding.EncodeToString(b)
		k, err := keystore.ParseKEK(s)
		if err != nil {
			t.Fatal(err)
		}
		return s, k
	}
	oldText, old := kek()
	newText, _ := kek()
	pool, err := pgxpool.New(ctx, st.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ks, err := keystore.Open(ctx, pool, old, keystore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ks.ForWrite(ctx, "u-"+uuid.NewString()[:8], "s"); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SEQFLOW_PG_URL", st.PGURL)
	t.Setenv("SEQFLOW_KEK", newText)
	t.Setenv("SEQFLOW_KEK_PREVIOUS", oldText)
	for _, bad := range [][]string{nil, {"spin"}, {"status", "x"}} {
		if err := keys(ctx, &bytes.Buffer{}, bad); err == nil {
			t.Errorf("keys %q accepted", bad)
		}
	}
	underOld := func() int64 {
		t.Helper()
		var out bytes.Buffer
		if err := keys(ctx, &out, []string{"status"}); err != nil {
			t.Fatal(err)
		}
		var uses []struct {
			KEKID string `json:"kek_id"`
			Keys  int64  `json:"keys"`
		}
		if err := json.Unmarshal(out.Bytes(), &uses); err != nil {
			t.Fatalf("status printed %q: %v", out.String(), err)
		}
		for _, u := range uses {
			if u.KEKID == old.ID() {
				return u.Keys
			}
		}
		return 0
	}
	if n := underOld(); n != 1 {
		t.Fatalf("keys under the old KEK before the rotation: %d, want 1", n)
	}
	var out bytes.Buffer
	if err := keys(ctx, &out, []string{"rotate"}); err != nil {
		t.Fatal(err)
	}
	if n := underOld(); n != 0 {
		t.Fatalf("keys under the old KEK after the rotation: %d (rotate printed %s)", n, out.String())
	}
}
