package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/seqflow/seqflow/internal/config"
	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/rebuild"
	"github.com/seqflow/seqflow/internal/replay"
	"github.com/seqflow/seqflow/internal/store"
)

// runReplay rebuilds the message store from offset 0 of im.sequenced.v1
// (and im.receipts.v1) into a fresh schema, verifies it against the log,
// and with -switch points the live store at it: persisters and followers
// move over on the NOTIFY and continue from where the replay stopped.
// With -from-replay-topic NAME the sequenced events come from a complete
// replay topic of the whole log (seqflow replay-topic) instead; the store
// is still verified against the log itself, and holds the log up to the
// replay's range end, where a switched persister continues.
func runReplay(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	schema := fs.String("schema", "", "fresh schema to build (default store_<UTC time>)")
	home := fs.String("home", envOr("PERSISTER_SCHEMA", "public"), "home schema whose store_pointer -switch sets")
	prefix := fs.String("topic-prefix", os.Getenv("SEQFLOW_TOPIC_PREFIX"), "topic name prefix")
	batch := fs.Int("batch", 5000, "records per database transaction")
	doSwitch := fs.Bool("switch", false, "after a clean verify, switch the live store to the new schema")
	quiet := fs.Bool("quiet", false, "no progress bar")
	fromReplay := fs.String("from-replay-topic", "", "read the sequenced events from this complete, unfiltered replay topic (seqflow replay-topic) instead of the log")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *schema == "" {
		*schema = "store_" + time.Now().UTC().Format("20060102_150405")
	}
	st := config.LoadLocal()
	if len(st.KafkaBrokers) == 0 || st.PGURL == "" {
		return fmt.Errorf("no Kafka brokers or PostgreSQL URL: set SEQFLOW_KAFKA_BROKERS and SEQFLOW_PG_URL")
	}
	pool, err := store.NewPool(ctx, st.PGURL, 4)
	if err != nil {
		return err
	}
	defer pool.Close()
	t := eventlog.Names(*prefix)
	var events rebuild.EventSource
	if *fromReplay != "" {
		if events, err = replaySource(ctx, st.KafkaBrokers, *prefix, *fromReplay, t.Sequenced); err != nil {
			return err
		}
	}
	bar := progressBar(*quiet)
	res, err := rebuild.Replay(ctx, rebuild.ReplayConfig{
		Brokers: st.KafkaBrokers, Topics: t, Events: events, Pool: pool, Schema: *schema, BatchMax: *batch, Progress: bar,
	})
	if !*quiet {
		fmt.Fprintln(os.Stderr)
	}
	if err != nil {
		return err
	}
	fmt.Printf("replayed %d records into schema %s in %s (%.0f records/s): %d rows, %d skipped\n",
		res.Records, *schema, res.Elapsed.Round(time.Millisecond), float64(res.Records)/res.Elapsed.Seconds(), res.Inserted, res.Skipped)
	l, err := rebuild.ReadLog(ctx, st.KafkaBrokers, t.Sequenced, res.Ends[t.Sequenced])
	if err != nil {
		return err
	}
	rep, err := rebuild.Compare(ctx, pool, *schema, l)
	if err != nil {
		return err
	}
	printReport(os.Stdout, *schema, rep, 20)
	if !rep.Equal() {
		return fmt.Errorf("replayed schema %s differs from the log; not switching", *schema)
	}
	if !*doSwitch {
		fmt.Printf("not switched (no -switch); to switch the live store over later, run:\n"+
			"  BEGIN; INSERT INTO %s.store_pointer (schema_name) VALUES ('%s') ON CONFLICT (singleton) DO UPDATE SET schema_name = EXCLUDED.schema_name, switched_at = now(); SELECT pg_notify('%s', '%s'); COMMIT;\n",
			*home, *schema, store.NotifyChannel, *schema)
		return nil
	}
	if err := store.Switch(ctx, pool, *home, *schema); err != nil {
		return err
	}
	fmt.Printf("switched: %s.store_pointer now names %s; persisters continue there from the replayed offsets\n", *home, *schema)
	return nil
}

// progressBar draws records, rate and ETA on stderr, at most 5 times a second.
func progressBar(quiet bool) func(rebuild.Progress) {
	if quiet {
		return nil
	}
	var last time.Time
	return func(p rebuild.Progress) {
		if time.Since(last) < 200*time.Millisecond && p.Records < p.Total {
			return
		}
		last = time.Now()
		const width = 30
		frac := 1.0
		if p.Total > 0 {
			frac = min(float64(p.Records)/float64(p.Total), 1)
		}
		n := int(frac * width)
		fmt.Fprintf(os.Stderr, "\r[%s%s] %3.0f%% %d/%d records  %.0f/s  ETA %s   ",
			strings.Repeat("=", n), strings.Repeat(" ", width-n), 100*frac, p.Records, p.Total, p.Rate(), p.ETA().Round(time.Second))
	}
}

// replaySource is the replay topic name as the source of a rebuild: it
// must copy the whole log (no range or filter: a part of the log is not
// a store) of this deployment's sequenced topic; rebuild.Replay checks
// that it is complete.
func replaySource(ctx context.Context, brokers []string, prefix, name, sequenced string) (*replay.Source, error) {
	defs, err := replay.OpenDefinitions(brokers, prefix)
	if err != nil {
		return nil, err
	}
	defer defs.Close()
	def, err := defs.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	if !replay.Full(def.GetRequest()) {
		return nil, fmt.Errorf("replay %s holds a part of the log (%s); a rebuild needs a replay of the whole log", name, replay.Describe(def.GetRequest()))
	}
	if def.GetSourceTopic() != sequenced {
		return nil, fmt.Errorf("replay %s copies %s, not %s", name, def.GetSourceTopic(), sequenced)
	}
	return &replay.Source{Brokers: brokers, Def: def}, nil
}
