// Command seqbench measures seqflow end to end and stage by stage on the
// local stack, next to the ceilings of the same box measured in the same
// run, and writes docs/benchmarks.md and .data/reports/bench.json. See
// README.md; `go tool task bench` runs it through infra/local/bench.sh.
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
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("service", "seqbench")
	cfg, err := LoadConfig(config.FromOS())
	if err == nil {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err = New(cfg, log).Run(ctx)
		stop()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "seqbench:", err)
		os.Exit(1)
	}
}
