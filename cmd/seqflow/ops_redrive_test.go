package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/migrate"
	"github.com/seqflow/seqflow/internal/testkit/proc"
	"github.com/seqflow/seqflow/internal/testkit/stack"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// eventually retries f until it returns nil or the deadline passes.
func eventually(t *testing.T, what string, d time.Duration, f func() error) {
	t.Helper()
	var err error
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if err = f(); err == nil {
			return
		}
	}
	t.Fatalf("%s: not within %s: %v", what, d, err)
}

// committedValues decodes every committed record of topic into a new T.
func committedValues[T proto.Message](t *testing.T, e *opsEnv, topic string, newT func() T) []T {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	o := &opsFlags{brokers: e.brokers, prefix: e.prefix}
	start, stable, err := committedRange(ctx, e.adm, topic)
	if err != nil {
		t.Fatal(err)
	}
	var out []T
	err = readCommitted(ctx, o, topic, start, stable, func(r *kgo.Record) bool {
		v := newT()
		if err := proto.Unmarshal(r.Value, v); err != nil {
			t.Errorf("%s/%d/%d: %v", topic, r.Partition, r.Offset, err)
		}
		out = append(out, v)
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDLQRedriveThroughTheSequencer is the SeqflowSequencerDeadLetters
// runbook end to end: a real sequencer with too small a
// SEQUENCER_MAX_UPLINK_BYTES dead-letters an uplink; after a restart with
// the right limit, `seqflow dlq redrive` gets it sequenced, above the
// session's earlier seq, and a second redrive of it gets the same seq back
// as a DuplicateAck instead of a second event.
func TestDLQRedriveThroughTheSequencer(t *testing.T) {
	st := stack.Require(t, "kafka", "pg")
	e := newOpsEnv(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, st.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := migrate.Up(ctx, pool, ""); err != nil {
		t.Fatal(err)
	}
	bin := proc.Build(t, "./sequencer")
	group := "seqflow-sequencer-" + e.prefix
	env := func(maxBytes int) []string {
		return []string{
			"SEQFLOW_KAFKA_BROKERS=" + e.brokers, "SEQFLOW_PG_URL=" + st.PGURL, "SEQFLOW_TOPIC_PREFIX=" + e.prefix,
			"SEQUENCER_GROUP=" + group, "SEQUENCER_INSTANCE_ID=" + group + "-a", "SEQUENCER_ADMIN_ADDR=",
			"SEQUENCER_SESSION_TIMEOUT=6s", "SEQUENCER_TXN_TIMEOUT=8s", "SEQUENCER_NODE_LEASE_TTL=6s",
			fmt.Sprintf("SEQUENCER_MAX_UPLINK_BYTES=%d", maxBytes),
		}
	}
	seq := proc.Start(t, "seq-small", bin, env(256)...)

	session := "ops-redrive-" + e.prefix
	uplink := func(id, body string) *kgo.Record {
		v, err := proto.Marshal(&imv1.Uplink{SessionId: session, ClientMsgId: id, SenderUserId: "u1", SenderDeviceId: "d1",
			GatewayId: "test", GatewayTsMs: time.Now().UnixMilli(),
			Command: &imv1.Uplink_Message{Message: &imv1.MessageContent{Type: "text", Body: []byte(body)}}})
		if err != nil {
			t.Fatal(err)
		}
		return &kgo.Record{Topic: e.topics.Uplink, Key: []byte(session), Value: v}
	}
	if err := e.cl.ProduceSync(ctx, uplink("small", "hi"), uplink("big", strings.Repeat("x", 600))).FirstErr(); err != nil {
		t.Fatal(err)
	}

	events := func() map[string]int64 {
		out := map[string]int64{}
		for _, ev := range committedValues(t, e, e.topics.Sequenced, func() *imv1.SequencedEvent { return &imv1.SequencedEvent{} }) {
			if ev.SessionId == session {
				if _, dup := out[ev.ClientMsgId]; dup {
					t.Errorf("client message %s sequenced twice", ev.ClientMsgId)
				}
				out[ev.ClientMsgId] = ev.Seq
			}
		}
		return out
	}
	var dlOffset int64 = -1
	eventually(t, "the big uplink dead-lettered, the small one sequenced", time.Minute, func() error {
		out, err := e.run(t, dlqCmd, "list", "-json")
		if err != nil {
			return err
		}
		ls := jsonLines[dlqLine](t, out)
		if len(ls) != 1 || events()["small"] == 0 {
			return fmt.Errorf("%d dead letters, events %v", len(ls), events())
		}
		if ls[0].Code != imv1.ErrorCode_ERROR_CODE_TOO_LARGE.String() || ls[0].Service != "sequencer" || ls[0].Key != session {
			return fmt.Errorf("dead letter %+v, want TOO_LARGE from the sequencer for %s", ls[0], session)
		}
		dlOffset = ls[0].Offset
		return nil
	})

	seq.Stop(20 * time.Second)
	proc.Start(t, "seq-right", bin, env(65536)...)
	redrive := func() {
		t.Helper()
		if out, err := e.run(t, dlqCmd, "redrive", "-offset", fmt.Sprint(dlOffset)); err != nil {
			t.Fatalf("redrive: %v (%s)", err, out)
		}
	}
	redrive()
	var bigSeq int64
	eventually(t, "the redriven uplink sequenced", time.Minute, func() error {
		ev := events()
		if ev["big"] == 0 {
			return fmt.Errorf("events %v", ev)
		}
		if ev["big"] <= ev["small"] {
			return fmt.Errorf("big got seq %d, not above small's %d", ev["big"], ev["small"])
		}
		bigSeq = ev["big"]
		return nil
	})

	redrive()
	eventually(t, "the second redrive answered by a DuplicateAck", time.Minute, func() error {
		for _, d := range committedValues(t, e, e.topics.Duplicates, func() *imv1.DuplicateAck { return &imv1.DuplicateAck{} }) {
			if d.SessionId == session && d.ClientMsgId == "big" {
				if d.Seq != bigSeq {
					return fmt.Errorf("duplicate ack seq %d, want %d", d.Seq, bigSeq)
				}
				return nil
			}
		}
		return fmt.Errorf("no duplicate ack yet")
	})
	if ev := events(); len(ev) != 2 {
		t.Errorf("events %v, want small and big once each", ev)
	}
}
