package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/config"
	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/store"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// runReclaim hands back a session that clients took by a join or an add
// before it was ever created (`seqflow verify` lists them): it appends a
// removal of every current member, marked as a reclaim with the operator
// and the reason, and waits until the store lists none of them. The log is
// never rewritten; the takers' earlier events stay in it, audited by the
// reclaim that follows them. The sequencer accepts a reclaim only for a
// session with no session_create (internal/groups); afterwards the
// session can be created by its rightful members.
func runReclaim(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("reclaim", flag.ContinueOnError)
	session := fs.String("session", "", "session ID to hand back (required; see `seqflow verify`)")
	actor := fs.String("actor", "", "who reclaims it, recorded in the event (required: an operator, a ticket's owner)")
	reason := fs.String("reason", "", "why, recorded in the event (required: a ticket, a report)")
	home := fs.String("home", envOr("PERSISTER_SCHEMA", "public"), "home schema of the store (default PERSISTER_SCHEMA or public)")
	prefix := fs.String("topic-prefix", os.Getenv("SEQFLOW_TOPIC_PREFIX"), "topic name prefix")
	wait := fs.Duration("wait", 60*time.Second, "how long to wait for the store to list none of the removed users")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *session == "" || strings.TrimSpace(*actor) == "" || strings.TrimSpace(*reason) == "" {
		return fmt.Errorf("-session, -actor and -reason are required")
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
	s, err := store.Open(ctx, pool, *home)
	if err != nil {
		return err
	}
	users, err := s.Members(ctx, *session)
	if err != nil {
		return err
	}
	if len(users) == 0 {
		return fmt.Errorf("the store lists no members of %s: nothing to reclaim", *session)
	}
	u := &imv1.Uplink{
		SessionId: *session, ClientMsgId: uuid.Must(uuid.NewV7()).String(), SenderUserId: "operator:" + *actor,
		SenderDeviceId: "reclaim", GatewayId: "seqflow-reclaim", GatewayTsMs: time.Now().UnixMilli(),
		Command: &imv1.Uplink_Membership{Membership: &imv1.MembershipChange{Op: imv1.MembershipChange_OP_REMOVE, UserIds: users,
			Reclaim: &imv1.Reclaim{Actor: *actor, Reason: *reason}}},
	}
	v, err := proto.Marshal(u)
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(append(eventlog.ClientOpts(st.KafkaBrokers, "seqflow-reclaim"), eventlog.ProducerOpts()...)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	rec := &kgo.Record{Topic: eventlog.Names(*prefix).Uplink, Key: []byte(*session), Value: v,
		Headers: eventlog.Headers("membership", "seqflow.im.v1.Uplink", "seqflow-reclaim", "")}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return fmt.Errorf("produce the reclaim: %w", err)
	}
	fmt.Printf("reclaim of %s by %s removing %s: uplink client_msg_id=%s partition=%d offset=%d\n",
		*session, *actor, strings.Join(users, ","), u.ClientMsgId, rec.Partition, rec.Offset)
	deadline := time.Now().Add(*wait)
	for {
		left, err := s.Members(ctx, *session)
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(left, func(m string) bool { return slices.Contains(users, m) }) {
			fmt.Printf("session %s reclaimed: the store lists none of its takers; it can be created now\n", *session)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the store still lists %s in %s after %v: the sequencer refuses a reclaim of a created session (see `seqflow tap -topic im.duplicates.v1`), or the persister lags (`seqflow lag`)",
				strings.Join(left, ","), *session, *wait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
