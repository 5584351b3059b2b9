package main

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"os"
	"sync"
	"time"

	"github.com/seqflow/seqflow/client"
)

// runTail prints the events a user receives, as JSON lines, through the
// SDK: once each, per session in seq order, gaps filled by sync.
//
//	seqflow tail -user bob [-session S] [-history] [-n 10] [-idle-exit 5s]
func runTail(ctx context.Context, args []string) error { return tail(ctx, os.Stdout, args) }

func tail(ctx context.Context, out io.Writer, args []string) error {
	fs := flag.NewFlagSet("tail", flag.ContinueOnError)
	cf := addConnFlags(fs, "tail")
	session := fs.String("session", "", "only this session")
	history := fs.Bool("history", false, "start with every session's history (default: only what arrives from now on)")
	limit := fs.Int("n", 0, "exit after n events (0 = run until interrupted)")
	idle := fs.Duration("idle-exit", 0, "exit after this long without events (0 = never)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o, err := cf.options()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	enc := json.NewEncoder(out)
	n := 0
	activity := make(chan struct{}, 1)
	var werr error
	o.SkipHistory = !*history
	o.OnEvent = func(e client.Event) {
		if *session != "" && e.SessionID != *session {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if werr == nil {
			werr = enc.Encode(e)
		}
		if n++; (*limit > 0 && n >= *limit) || werr != nil {
			cancel()
		}
		select {
		case activity <- struct{}{}:
		default:
		}
	}
	c, err := client.New(o)
	if err != nil {
		return err
	}
	run := start(ctx, c)
	var wg sync.WaitGroup
	defer wg.Wait()
	if *idle > 0 {
		wg.Go(func() {
			t := time.NewTimer(*idle)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-activity:
					t.Reset(*idle)
				case <-t.C:
					cancel()
					return
				}
			}
		})
	}
	<-ctx.Done()
	err = run.stop()
	mu.Lock()
	defer mu.Unlock()
	if werr != nil {
		return werr
	}
	return err
}
