package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
)

// runErase erases a user by crypto-shredding (docs/erasure.md):
//
//	seqflow erase user U [--actor NAME]
//
// It destroys every data key U owns in the key store (SEQFLOW_PG_URL), so
// every body U ever sent stops opening in every copy (the log, the uplink
// topic, dead letters, the store, replays, taps, exports), and stops keys
// from being made for U again. It needs SEQFLOW_KEK only to check the key
// store is the one the gateways use. It prints what it did as JSON.
func runErase(ctx context.Context, args []string) error {
	return erase(ctx, os.Stdout, args)
}

func erase(ctx context.Context, out io.Writer, args []string) error {
	if len(args) < 2 || args[0] != "user" {
		return errors.New("usage: seqflow erase user USER_ID [--actor NAME]")
	}
	user := args[1]
	fs := flag.NewFlagSet("erase user", flag.ContinueOnError)
	actor := fs.String("actor", os.Getenv("USER"), "who asked for the erasure, recorded with it")
	if err := fs.Parse(args[2:]); err != nil {
		return err
	}
	if user == "" || user[0] == '-' {
		return errors.New("usage: seqflow erase user USER_ID [--actor NAME]")
	}
	if *actor == "" {
		*actor = "seqflow-cli"
	}
	ks, closeKS, err := openKeyStore(ctx)
	if err != nil {
		return err
	}
	defer closeKS()
	e, err := ks.EraseUser(ctx, user, *actor)
	if err != nil {
		return err
	}
	return json.NewEncoder(out).Encode(map[string]any{
		"user_id": e.UserID, "keys_destroyed": e.KeysDestroyed, "erased_at": e.ErasedAt, "again": e.Again,
		"actor": *actor,
	})
}
