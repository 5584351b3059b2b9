package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seqflow/seqflow/internal/config"
	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/migrate"
)

func runSetup(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("setup", flag.ContinueOnError)
	partitions := fs.Int("partitions", eventlog.DefaultPartitions, "partitions of the keyed topics")
	rf := fs.Int("replication", 0, "replication factor (0 = broker default)")
	brokers := fs.String("brokers", "", "Kafka brokers (default SEQFLOW_KAFKA_BROKERS)")
	prefix := fs.String("topic-prefix", os.Getenv("SEQFLOW_TOPIC_PREFIX"), "topic name prefix (default SEQFLOW_TOPIC_PREFIX)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	st := config.LoadLocal()
	bs := st.KafkaBrokers
	if *brokers != "" {
		bs = eventlog.SplitBrokers(*brokers)
	}
	if len(bs) == 0 || st.PGURL == "" {
		return fmt.Errorf("no Kafka brokers or PostgreSQL URL: set SEQFLOW_KAFKA_BROKERS and SEQFLOW_PG_URL, or run `go tool task up`")
	}
	cl, err := kgo.NewClient(eventlog.ClientOpts(bs, "seqflow-setup")...)
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := eventlog.EnsureTopics(ctx, kadm.NewClient(cl), eventlog.Specs(eventlog.Names(*prefix), int32(*partitions)), int16(*rf)); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, st.PGURL)
	if err != nil {
		return fmt.Errorf("connect postgres: %w", err)
	}
	defer pool.Close()
	applied, err := migrate.Up(ctx, pool, "")
	if err != nil {
		return err
	}
	fmt.Printf("topics ready; migrations applied: %v\n", applied)
	return nil
}
