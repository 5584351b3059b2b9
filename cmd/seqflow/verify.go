package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seqflow/seqflow/internal/config"
	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/rebuild"
	"github.com/seqflow/seqflow/internal/store"
)

// runVerify audits the store against im.sequenced.v1: missing, extra and
// mismatched messages per session. It fails (exit status 1) when they
// differ. The log is read up to what the store claims to hold (its
// store_offsets, capped at the stable offsets), so a persister that is
// merely behind is not reported as missing data.
func runVerify(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	schema := fs.String("schema", "", "store schema to audit (default: the live one named by -home's store_pointer)")
	home := fs.String("home", envOr("PERSISTER_SCHEMA", "public"), "home schema of the store (default PERSISTER_SCHEMA or public)")
	prefix := fs.String("topic-prefix", os.Getenv("SEQFLOW_TOPIC_PREFIX"), "topic name prefix")
	show := fs.Int("show", 20, "sessions to list when the store differs")
	full := fs.Bool("full", false, "read the log up to its stable offsets, not only up to what the store claims to hold")
	if err := fs.Parse(args); err != nil {
		return err
	}
	st := config.LoadLocal()
	if len(st.KafkaBrokers) == 0 || st.PGURL == "" {
		return fmt.Errorf("no Kafka brokers or PostgreSQL URL: set SEQFLOW_KAFKA_BROKERS and SEQFLOW_PG_URL")
	}
	pool, err := store.NewPool(ctx, st.PGURL, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	if *schema == "" {
		if *schema, err = store.Resolve(ctx, pool, *home); err != nil {
			return err
		}
	}
	rep, err := verifySchema(ctx, st.KafkaBrokers, eventlog.Names(*prefix), pool, *schema, *full)
	if err != nil {
		return err
	}
	printReport(os.Stdout, *schema, rep, *show)
	if !rep.Equal() {
		return fmt.Errorf("store schema %s differs from the log in %d sessions", *schema, len(rep.Differences))
	}
	if len(rep.Taken) > 0 {
		return fmt.Errorf("%d sessions were taken without a create: hand each back with `seqflow reclaim -session S -actor ... -reason ...`", len(rep.Taken))
	}
	return nil
}

func verifySchema(ctx context.Context, brokers []string, t eventlog.Topics, pool *pgxpool.Pool, schema string, full bool) (*rebuild.Report, error) {
	p := pool
	end, err := rebuild.CurrentEnds(ctx, brokers, t.Sequenced)
	if err != nil {
		return nil, err
	}
	if !full {
		held, err := store.NewWriter(p, schema).StoredOffsets(ctx, t.Sequenced)
		if err != nil {
			return nil, err
		}
		for part, e := range end {
			end[part] = min(e, held[part])
		}
	}
	l, err := rebuild.ReadLog(ctx, brokers, t.Sequenced, end)
	if err != nil {
		return nil, err
	}
	return rebuild.Compare(ctx, p, schema, l)
}

func printReport(w io.Writer, schema string, rep *rebuild.Report, show int) {
	defer printTaken(w, rep.Taken, show)
	verdict := "EQUAL"
	if !rep.Equal() {
		verdict = "DIFFERENT"
	}
	fmt.Fprintf(w, "schema %s: %s — log %d events, store %d rows, %d sessions, %d differ (%s)\n",
		schema, verdict, rep.LogEvents, rep.StoreRows, rep.Sessions, len(rep.Differences), rep.Elapsed.Round(1e6))
	for i, d := range rep.Differences {
		if i == show {
			fmt.Fprintf(w, "  ... and %d more sessions\n", len(rep.Differences)-show)
			break
		}
		fmt.Fprintf(w, "  session %s: %d missing %s, %d extra %s, %d mismatched %s\n", d.SessionID,
			len(d.Missing), seqList(d.Missing), len(d.Extra), seqList(d.Extra), len(d.Mismatched), seqList(d.Mismatched))
		for _, det := range d.Details {
			fmt.Fprintf(w, "    %s\n", det)
		}
	}
}

// printTaken lists sessions clients took without a create (rebuild.Taken).
func printTaken(w io.Writer, taken []rebuild.TakenSession, show int) {
	if len(taken) == 0 {
		return
	}
	fmt.Fprintf(w, "%d sessions taken without a create (a join or an add before any session_create; `seqflow reclaim` hands one back):\n", len(taken))
	for i, t := range taken {
		if i == show {
			fmt.Fprintf(w, "  ... and %d more sessions\n", len(taken)-show)
			break
		}
		fmt.Fprintf(w, "  taken session %s: since seq %d, listing %s\n", t.SessionID, t.FirstSeq, strings.Join(t.Users, ","))
	}
}

func seqList(s []int64) string {
	if len(s) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("[")
	for i, v := range s {
		if i == 8 {
			fmt.Fprintf(&b, " …")
			break
		}
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprint(&b, v)
	}
	b.WriteString("]")
	return b.String()
}

func envOr(key, def string) string {
	if v := strings.TrimSpace(os.Getenv(key)); v != "" {
		return v
	}
	return def
}
