package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/seqflow/seqflow/internal/admin"
	"github.com/seqflow/seqflow/internal/config"
	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/export"
)

// runExport writes the sequenced log as Parquet files to a directory or
// an S3 bucket, on its own consumer group; see docs/export.md.
func runExport(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("export", flag.ContinueOnError)
	var o opsFlags
	o.register(fs)
	dir := fs.String("dir", "", "export to this local directory")
	s3URL := fs.String("s3", "", "export to s3://bucket/prefix (credentials: the AWS SDK's chain, e.g. AWS_ACCESS_KEY_ID)")
	s3Endpoint := fs.String("s3-endpoint", os.Getenv("SEQFLOW_EXPORT_S3_ENDPOINT"), "URL of an S3-compatible server (default SEQFLOW_EXPORT_S3_ENDPOINT, AWS_ENDPOINT_URL_S3, else AWS)")
	s3Region := fs.String("s3-region", "", "bucket region (default AWS_REGION, else us-east-1)")
	s3PathStyle := fs.Bool("s3-path-style", false, "address the bucket in the URL path (default: on with -s3-endpoint)")
	spool := fs.String("spool-dir", "", "with -s3, where files wait for their upload (default the system temp dir)")
	group := fs.String("group", "seqflow-export", "consumer group; one per destination")
	session := fs.Duration("session-timeout", 10*time.Second, "consumer group session timeout: how long a dead exporter's partitions wait")
	maxRows := fs.Int("max-rows", 1_000_000, "most events in one file")
	maxAge := fs.Duration("max-age", 5*time.Minute, "a file is committed at most this long after its first event")
	rowGroup := fs.Int("row-group", 64*1024, "most events in one Parquet row group")
	compression := fs.String("compression", "zstd", "column compression: zstd, snappy or none")
	untilEnd := fs.Bool("until-end", false, "export up to the end of the log as of the start, then exit (default: follow the log)")
	adminAddr := fs.String("admin-addr", "", "serve /metrics, /healthz and /readyz here (default none)")
	verbose := fs.Bool("v", false, "log every file committed")
	rowDelay := fs.Duration("debug-row-delay", 0, "pause after each event (fault tests only)")
	commitDelay := fs.Duration("debug-commit-delay", 0, "pause between the files' commit and the offset commit (fault tests only)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if (*dir == "") == (*s3URL == "") {
		return errors.New("give exactly one of -dir and -s3")
	}
	brokers, err := o.brokerList()
	if err != nil {
		return err
	}
	var store export.Store = &export.Dir{Root: *dir}
	if *s3URL != "" {
		pathStyle := *s3PathStyle || (*s3Endpoint != "" && !flagSet(fs, "s3-path-style"))
		if store, err = export.NewS3(ctx, export.S3Config{URL: *s3URL, Endpoint: *s3Endpoint, Region: *s3Region,
			PathStyle: pathStyle, SpoolDir: *spool}); err != nil {
			return err
		}
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	reg := prometheus.NewRegistry()
	ex, err := export.New(export.Config{
		Brokers: brokers, Topic: eventlog.Names(o.prefix).Sequenced, Group: *group, SessionTimeout: *session, Store: store,
		MaxRows: *maxRows, MaxAge: *maxAge, RowGroupRows: *rowGroup, Compression: *compression, UntilEnd: *untilEnd,
		Log: log, Registerer: reg, DebugRowDelay: *rowDelay, DebugCommitDelay: *commitDelay,
	})
	if err != nil {
		return err
	}
	env := config.FromOS()
	acfg := admin.LoadConfig(env) // pprof with SEQFLOW_ADMIN_PPROF, behind SEQFLOW_ADMIN_TOKENS_FILE
	if err := env.Err(); err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	runCtx, stopAdmin := context.WithCancel(gctx)
	g.Go(func() error {
		defer stopAdmin()
		return ex.Run(gctx)
	})
	if *adminAddr != "" {
		g.Go(func() error {
			err := (&admin.Server{Addr: *adminAddr, Reg: reg, Config: acfg, Log: log}).Run(runCtx)
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		})
	}
	err = g.Wait()
	st := ex.Stats()
	rate := 0.0
	if st.Busy > 0 {
		rate = float64(st.Events) / st.Busy.Seconds()
	}
	fmt.Fprintf(os.Stderr, "exported %d events in %d files (%.0f events/s while reading)\n", st.Events, st.Files, rate)
	if ctx.Err() != nil {
		return nil // interrupted: the open files were committed
	}
	return err
}

// flagSet reports whether the flag name was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
