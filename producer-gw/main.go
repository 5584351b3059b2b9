// Command producer-gw is where clients meet seqflow: WebSocket and HTTP,
// bearer-token auth, validated commands produced to im.uplink.v1, ACKs
// that carry the seq, pushed events and sync. See README.md.
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
	var g *Gateway
	if err == nil {
		g, err = New(cfg, log)
	}
	if err == nil {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err = g.Run(ctx)
		// stop cancels ctx, so whether a signal ended Run is asked first.
		if ctx.Err() != nil {
			err = nil
		}
		stop()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "producer-gw:", err)
		os.Exit(1)
	}
}
