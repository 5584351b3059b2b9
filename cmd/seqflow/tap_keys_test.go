package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seqflow/seqflow/client"
	"github.com/seqflow/seqflow/internal/keystore"
	"github.com/seqflow/seqflow/internal/testkit/clienttest"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// TestTapKeys: through a gateway with a KEK, the log holds sealed bodies.
// `tap` without -keys prints no body text; `tap -keys` prints the text, on
// the sequenced log and the uplink topic alike, and "[erased]" for the
// bodies of a user once `seqflow erase user` destroyed their keys.
func TestTapKeys(t *testing.T) {
	p := clienttest.Start(t)
	kb := make([]byte, keystore.KeyBytes)
	_, _ = rand.Read(kb)
	kek := base64.StdEncoding.EncodeToString(kb)
	gw := p.Gateway(t, "gw-tapkeys", "SEQFLOW_KEK="+kek)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	alice, bob := clienttest.User("alice"), clienttest.User("bob")
	c, err := client.New(client.Options{URLs: []string{gw.URL}, Token: p.Token(t, alice, "d1")})
	if err != nil {
		t.Fatal(err)
	}
	cctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(cctx) }()
	defer func() { stop(); <-done }()
	g, err := c.CreateGroup(ctx, "keys", bob)
	if err != nil {
		t.Fatal(err)
	}
	hello, err := c.Send(ctx, g.SessionID, client.Text("hello in the clear"))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"SEQFLOW_TOPIC_PREFIX": p.Prefix, "SEQFLOW_KAFKA_BROKERS": p.Stack.KafkaBrokers[0],
		"SEQFLOW_PG_URL": p.Stack.PGURL, "SEQFLOW_KEK": kek} {
		t.Setenv(k, v)
	}
	body := func(args ...string) (string, int64) {
		t.Helper()
		for _, ev := range tapEvents(t, ctx, append([]string{"-from", "start", "-session", g.SessionID, "-n", "2", "-idle-exit", "20s"}, args...)...) {
			if ev.ev.Seq == hello.Seq {
				return string(ev.ev.GetMessage().GetBody()), ev.ev.GetMessage().GetKeyId()
			}
		}
		t.Fatalf("tap %v: no seq %d", args, hello.Seq)
		return "", 0
	}
	if b, key := body(); b == "hello in the clear" || key == 0 {
		t.Fatalf("tap without -keys: body %q key %d, want the sealed body", b, key)
	}
	if b, key := body("-keys"); b != "hello in the clear" || key == 0 {
		t.Fatalf("tap -keys: body %q key %d", b, key)
	}
	var up imv1.Uplink
	lines := tapJSON(t, ctx, "-topic", "im.uplink.v1", "-from", "start", "-session", g.SessionID, "-n", "2", "-idle-exit", "20s", "-keys")
	found := false
	for _, l := range lines {
		if err := fromTapJSON(l.Event, &up); err != nil {
			t.Fatal(err)
		}
		found = found || string(up.GetMessage().GetBody()) == "hello in the clear"
	}
	if !found {
		t.Fatalf("tap -keys of the uplink topic: no opened body in %d lines", len(lines))
	}

	if err := erase(ctx, os.Stderr, []string{"user", alice}); err != nil {
		t.Fatal(err)
	}
	if b, _ := body("-keys"); b != "[erased]" {
		t.Fatalf("tap -keys after the erasure: %q, want [erased]", b)
	}
	pool, err := pgxpool.New(ctx, p.Stack.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM seqflow_data_keys WHERE owner_user_id = $1`, alice).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d keys of the erased user left (%v)", n, err)
	}
}
