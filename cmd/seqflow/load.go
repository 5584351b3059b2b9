package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/seqflow/seqflow/client/load"
)

// runLoad is the load generator (client/load) on the command line:
//
//	seqflow load -users 50 -sessions 20 -rate 500 -duration 10s -json out.json -plot out.html
//
// It prints the report as a table and exits with status 1 when anything
// acknowledged was lost, duplicated or handed over out of order (-check).
func runLoad(ctx context.Context, args []string) error {
	return loadCmd(ctx, os.Stdout, os.Stderr, args)
}

func loadCmd(ctx context.Context, out, errOut io.Writer, args []string) error {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	gateways := fs.String("gateways", envDefault("SEQFLOW_GATEWAY_URL", "ws://127.0.0.1:8080"), "comma-separated gateway URLs; users are spread over them")
	secret := secretFlag(fs, "secret", "GATEWAY_JWT_HS256_SECRET", "the gateways' HS256 secret (default GATEWAY_JWT_HS256_SECRET)")
	users := fs.Int("users", 10, "users, one connection each")
	sessions := fs.Int("sessions", 5, "sessions")
	groups := fs.Float64("groups", 0.5, "fraction of sessions that are groups (the rest are direct)")
	groupSize := fs.Int("group-size", 5, "members per group, creator included")
	rate := fs.Float64("rate", 0, "messages per second over all users (0 = as fast as possible)")
	duration := fs.Duration("duration", 10*time.Second, "how long to send")
	body := fs.Int("body", 100, "body size in bytes")
	drain := fs.Duration("drain", 10*time.Second, "longest wait for ACKs and deliveries after sending")
	inFlight := fs.Int("in-flight", 32, "commands awaiting their ACK per client")
	jsonOut := fs.String("json", "", "write the report as JSON to this file")
	plot := fs.String("plot", "", "write the latency plot, a self-contained HTML page, to this file")
	check := fs.Bool("check", true, "exit with status 1 when a message was lost, duplicated or out of order")
	quiet := fs.Bool("quiet", false, "no progress bar")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o := load.Options{
		Gateways: splitList(*gateways), Secret: *secret, Users: *users, Sessions: *sessions, GroupShare: *groups,
		GroupSize: min(*groupSize, *users), Rate: *rate, Duration: *duration, BodyBytes: *body, Drain: *drain, InFlight: *inFlight,
	}
	if *groups == 0 {
		o.GroupShare = -1 // direct only (0 is the library's default)
	}
	if f, ok := errOut.(*os.File); ok && !*quiet && isTerminal(f) {
		o.Progress = f
	}
	rep, err := load.Run(ctx, o)
	if err != nil && rep.Sent == 0 {
		return err
	}
	if terr := rep.Table(out); terr != nil {
		return terr
	}
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if werr := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); werr != nil {
			return werr
		}
	}
	if *plot != "" {
		f, perr := os.Create(*plot)
		if perr != nil {
			return perr
		}
		perr = rep.PlotHTML(f)
		if cerr := f.Close(); perr == nil {
			perr = cerr
		}
		if perr != nil {
			return perr
		}
	}
	if err != nil {
		return err
	}
	if *check && (rep.Lost > 0 || rep.Duplicated > 0 || rep.OutOfOrder > 0) {
		return fmt.Errorf("check failed: lost %d, duplicated %d, out of order %d", rep.Lost, rep.Duplicated, rep.OutOfOrder)
	}
	return nil
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0 && !strings.EqualFold(os.Getenv("TERM"), "dumb")
}
