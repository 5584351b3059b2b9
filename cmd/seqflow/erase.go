package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seqflow/seqflow/internal/config"
	"github.com/seqflow/seqflow/internal/erasure"
	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/presence"
	"github.com/seqflow/seqflow/internal/store"
)

// runErase erases a user (docs/erasure.md, "Erasing a user"):
//
//	seqflow erase user U [--actor NAME]
//
// It destroys every data key U owns in the key store (SEQFLOW_PG_URL, with
// SEQFLOW_KEK), so every body U ever sent stops opening in every copy (the
// log, the uplink topic, dead letters, the store, replays, taps, exports);
// sends U a leave of every session U is in through the log
// (SEQFLOW_KAFKA_BROKERS, SEQFLOW_TOPIC_PREFIX), each carrying the erasure
// record, after an ownership transfer where U owns a group; and signs out
// U's devices when SEQFLOW_REDIS_ADDR is set. It prints what it did as
// JSON. Running it again finishes what an interrupted run left.
func runErase(ctx context.Context, args []string) error {
	return erase(ctx, os.Stdout, args)
}

const eraseUsage = "usage: seqflow erase user USER_ID [--actor NAME]"

func erase(ctx context.Context, out io.Writer, args []string) error {
	if len(args) < 2 || args[0] != "user" {
		return errors.New(eraseUsage)
	}
	user := args[1]
	fs := flag.NewFlagSet("erase user", flag.ContinueOnError)
	actor := fs.String("actor", os.Getenv("USER"), "who asked for the erasure, recorded with it (default $USER)")
	if err := fs.Parse(args[2:]); err != nil {
		return err
	}
	if user == "" || user[0] == '-' || fs.NArg() > 0 {
		return errors.New(eraseUsage)
	}
	if *actor == "" {
		*actor = "seqflow-cli"
	}
	st := config.LoadLocal()
	if len(st.KafkaBrokers) == 0 {
		return errors.New("no Kafka brokers: set SEQFLOW_KAFKA_BROKERS")
	}
	ks, closeKS, err := openKeyStore(ctx)
	if err != nil {
		return err
	}
	defer closeKS()
	pool, err := pgxpool.New(ctx, os.Getenv("SEQFLOW_PG_URL"))
	if err != nil {
		return err
	}
	defer pool.Close()
	msgs, err := store.Open(ctx, pool, "public")
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(append(eventlog.ClientOpts(st.KafkaBrokers, "seqflow-erase"), eventlog.ProducerOpts()...)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	d := erasure.Deps{Keys: ks, Store: msgs, Kafka: cl, Topics: eventlog.Names(os.Getenv("SEQFLOW_TOPIC_PREFIX"))}
	if addr := os.Getenv("SEQFLOW_REDIS_ADDR"); addr != "" {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		defer rdb.Close()
		d.Devices = presence.NewDevices(rdb, 0)
	}
	r, err := erasure.EraseUser(ctx, d, user, *actor)
	if err != nil {
		return err
	}
	return json.NewEncoder(out).Encode(r.Report())
}
