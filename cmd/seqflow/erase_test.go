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
