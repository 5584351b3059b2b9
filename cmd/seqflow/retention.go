package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seqflow/seqflow/internal/keystore"
)

// runRetention sets and applies how long message bodies are kept
// (docs/erasure.md, "Retention"):
//
//	seqflow retention set --keep 720h [--session S]   (no --session: every session)
//	seqflow retention set --keep 0 [--session S]      (remove the policy)
//	seqflow retention list
//	seqflow retention apply                           (from cron: destroy expired keys)
//
// It needs SEQFLOW_PG_URL (the key store) and SEQFLOW_KEK (to check the key
// store is the gateways'). Each prints JSON.
func runRetention(ctx context.Context, args []string) error {
	return retention(ctx, os.Stdout, args)
}

const retentionUsage = "usage: seqflow retention set --keep DURATION [--session S] | list | apply"

func retention(ctx context.Context, out io.Writer, args []string) error {
	if len(args) == 0 {
		return errors.New(retentionUsage)
	}
	fs := flag.NewFlagSet("retention "+args[0], flag.ContinueOnError)
	keep := fs.Duration("keep", -1, "how long bodies are kept (0: forever)")
	session := fs.String("session", keystore.AllSessions, "the session the policy is for (default: every session without its own)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return errors.New(retentionUsage)
	}
	if args[0] == "set" && *keep < 0 {
		return errors.New("retention set needs --keep (a duration such as 720h, or 0 for forever)")
	}
	if args[0] != "set" && args[0] != "list" && args[0] != "apply" {
		return errors.New(retentionUsage)
	}
	ks, closeKS, err := openKeyStore(ctx)
	if err != nil {
		return err
	}
	defer closeKS()
	enc := json.NewEncoder(out)
	switch args[0] {
	case "set":
		if err := ks.SetRetention(ctx, *session, *keep); err != nil {
			return err
		}
		return enc.Encode(map[string]any{"scope": *session, "keep": keep.String()})
	case "list":
		ps, err := ks.Retentions(ctx)
		if err != nil {
			return err
		}
		list := make([]map[string]any, 0, len(ps))
		for _, p := range ps {
			list = append(list, map[string]any{"scope": p.Scope, "keep": p.Keep.String()})
		}
		return enc.Encode(list)
	default:
		start := time.Now()
		n, err := ks.ApplyRetention(ctx)
		if err != nil {
			return err
		}
		return enc.Encode(map[string]any{"keys_destroyed": n, "elapsed_ms": time.Since(start).Milliseconds()})
	}
}

// openKeyStore opens the key store of SEQFLOW_PG_URL with SEQFLOW_KEK (and
// SEQFLOW_KEK_PREVIOUS).
func openKeyStore(ctx context.Context) (*keystore.Store, func(), error) {
	kek, err := keystore.ParseKEK(os.Getenv("SEQFLOW_KEK"))
	if err != nil {
		return nil, nil, errors.New("SEQFLOW_KEK: " + err.Error())
	}
	prev, err := keystore.ParsePrevious(os.Getenv("SEQFLOW_KEK_PREVIOUS"))
	if err != nil {
		return nil, nil, errors.New("SEQFLOW_KEK_PREVIOUS: " + err.Error())
	}
	url := os.Getenv("SEQFLOW_PG_URL")
	if url == "" {
		return nil, nil, errors.New("SEQFLOW_PG_URL is required (the key store's database)")
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, nil, err
	}
	ks, err := keystore.Open(ctx, pool, kek, keystore.Options{Previous: prev})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return ks, pool.Close, nil
}
