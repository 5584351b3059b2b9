package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
)

// runKeys shows and rotates the key-encryption key (docs/erasure.md,
// "Rotating the KEK"):
//
//	seqflow keys status   how many live data keys each KEK wraps
//	seqflow keys rotate   rewrap every key under SEQFLOW_KEK_PREVIOUS with SEQFLOW_KEK
//
// with SEQFLOW_PG_URL, SEQFLOW_KEK and SEQFLOW_KEK_PREVIOUS. Each prints JSON.
func runKeys(ctx context.Context, args []string) error {
	return keys(ctx, os.Stdout, args)
}

func keys(ctx context.Context, out io.Writer, args []string) error {
	if len(args) != 1 || (args[0] != "status" && args[0] != "rotate") {
		return errors.New("usage: seqflow keys status | rotate")
	}
	ks, closeKS, err := openKeyStore(ctx)
	if err != nil {
		return err
	}
	defer closeKS()
	enc := json.NewEncoder(out)
	if args[0] == "rotate" {
		moved, left, err := ks.Rewrap(ctx)
		if err != nil {
			return err
		}
		return enc.Encode(map[string]any{"rewrapped": moved, "left_under_other_keks": left})
	}
	uses, err := ks.KEKs(ctx)
	if err != nil {
		return err
	}
	list := make([]map[string]any, 0, len(uses))
	for _, u := range uses {
		list = append(list, map[string]any{"kek_id": u.KEKID, "keys": u.Keys})
	}
	return enc.Encode(list)
}
