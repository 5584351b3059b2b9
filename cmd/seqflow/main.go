// Command seqflow is the operator and developer tool of seqflow:
//
//	seqflow setup                      create topics and apply migrations
//	seqflow uplink -session S -from U  publish raw uplinks (bypassing the gateway)
//	seqflow tap                        print committed events of a topic (JSON lines, protobuf JSON or raw), optionally in a consumer group
//
// Connection settings come from SEQFLOW_KAFKA_BROKERS and SEQFLOW_PG_URL,
// falling back to .data/local.env of the local stack.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

type command struct {
	summary string
	run     func(ctx context.Context, args []string) error
}

var commands = map[string]command{
	"setup":     {"create topics and apply PostgreSQL migrations (idempotent)", runSetup},
	"uplink":    {"publish raw uplinks to im.uplink.v1, as a gateway would", runUplink},
	"tap":       {"print committed events of a topic as JSON lines, protobuf JSON or raw; -group resumes where it stopped", runTap},
	"replay":    {"rebuild the message store from the log into a fresh schema, verify, optionally switch", runReplay},
	"verify":    {"audit the message store against the log, and list sessions taken without a create; exit status 1 when either is found", runVerify},
	"reclaim":   {"hand back a session taken without a create (listed by verify) through an appended, audited removal", runReclaim},
	"token":     {"mint a development bearer token for producer-gw", runToken},
	"erase":     {"erase a user by destroying their data keys (crypto-shredding, docs/erasure.md)", runErase},
	"keys":      {"show how many data keys each KEK wraps, and rotate the KEK (docs/erasure.md)", runKeys},
	"retention": {"set, list and apply how long message bodies are kept (docs/erasure.md)", runRetention},
	"chat":      {"interactive terminal chat in a session, through the SDK", runChat},
	"send":      {"send messages through the SDK and print their ACKs", runSend},
	"tail":      {"print the events a user receives as JSON lines, through the SDK", runTail},
	"load":      {"load generator: users, sessions, rate; report with latency percentiles", runLoad},
	"lag":       {"consumer lag per group, topic and partition (committed, end, lag)", runLag},
	"topics":    {"describe every seqflow topic: partitions, replication, configs, end offsets", runTopics},
	"dlq":       {"list dead letters, or redrive one to its original topic", runDLQ},
	"export":    {"write the sequenced log as Parquet files (hive-style by date and hour) to a directory or S3", runExport},

	"replay-topic": {"copy a range of the sequenced log into a replay topic, exactly once; resume, list, describe, delete", runReplayTopic},
}

func main() {
	if len(os.Args) < 2 || commands[os.Args[1]].run == nil {
		usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := commands[os.Args[1]].run(ctx, os.Args[2:])
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "seqflow %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: seqflow <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-8s %s\n", n, commands[n].summary)
	}
}
