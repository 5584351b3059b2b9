// Command seqfloor runs the benchmark's floor server (internal/testkit/floor):
// a message's path through Kafka and WebSocket with the services' settings
// and guarantees, and nothing else, in one process or split into its
// gateway, sequencer and pusher (SEQFLOOR_ROLE). cmd/seqbench's floor and
// floor_split phases start it;
// its configuration is in the package doc of internal/testkit/floor.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/seqflow/seqflow/internal/config"
	"github.com/seqflow/seqflow/internal/testkit/floor"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("service", "seqfloor")
	cfg, err := floor.LoadConfig(config.FromOS())
	if err == nil {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err = floor.New(cfg, log).Run(ctx)
		stop()
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "seqfloor:", err)
		os.Exit(1)
	}
}
