// Command pusher pushes every sequenced event to the online devices of its
// session's members, through the gateways that hold their connections. See
// README.md.
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
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("service", service)
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
		fmt.Fprintln(os.Stderr, "pusher:", err)
		os.Exit(1)
	}
}
