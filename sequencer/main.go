// Command sequencer gives every uplink its per-session seq and snowflake
// message ID and emits it to im.sequenced.v1, exactly once. See README.md.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/seqflow/seqflow/internal/config"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("service", "sequencer")
	cfg, err := LoadConfig(config.FromOS())
	if err == nil {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err = New(cfg, log).Run(ctx)
		// stop cancels ctx, so whether a signal ended Run is asked first.
		if ctx.Err() != nil {
			err = nil
		}
		stop()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sequencer:", err)
		os.Exit(1)
	}
}
