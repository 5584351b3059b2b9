package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/config"
	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/schemas/imv1"
)

func runUplink(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("uplink", flag.ContinueOnError)
	session := fs.String("session", "", "session ID (required)")
	from := fs.String("from", "", "sender user ID (required)")
	text := fs.String("text", "hello", "message text")
	n := fs.Int("n", 1, "how many messages")
	clientMsgID := fs.String("client-msg-id", "", "client message ID (default: a new UUIDv7 per message); reuse one to see dedup")
	prefix := fs.String("topic-prefix", os.Getenv("SEQFLOW_TOPIC_PREFIX"), "topic name prefix")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *session == "" || *from == "" {
		return fmt.Errorf("-session and -from are required")
	}
	st := config.LoadLocal()
	if len(st.KafkaBrokers) == 0 {
		return fmt.Errorf("no Kafka brokers: set SEQFLOW_KAFKA_BROKERS or run `go tool task up`")
	}
	cl, err := kgo.NewClient(append(eventlog.ClientOpts(st.KafkaBrokers, "seqflow-cli"), eventlog.ProducerOpts()...)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	for i := 0; i < *n; i++ {
		id := *clientMsgID
		if id == "" {
			id = uuid.Must(uuid.NewV7()).String()
		}
		body := *text
		if *n > 1 {
			body = fmt.Sprintf("%s #%d", *text, i+1)
		}
		v, err := proto.Marshal(&imv1.Uplink{
			SessionId: *session, ClientMsgId: id, SenderUserId: *from, SenderDeviceId: "cli",
			GatewayId: "cli", GatewayTsMs: time.Now().UnixMilli(),
			Command: &imv1.Uplink_Message{Message: &imv1.MessageContent{Type: "text", Body: []byte(body)}},
		})
		if err != nil {
			return err
		}
		rec := &kgo.Record{Topic: eventlog.Names(*prefix).Uplink, Key: []byte(*session), Value: v,
			Headers: eventlog.Headers("message", "seqflow.im.v1.Uplink", "seqflow-cli", "")}
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			return fmt.Errorf("produce uplink: %w", err)
		}
		fmt.Printf("uplink session=%s client_msg_id=%s partition=%d offset=%d\n", *session, id, rec.Partition, rec.Offset)
	}
	return nil
}
