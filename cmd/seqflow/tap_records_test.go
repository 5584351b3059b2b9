package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/seqflow/seqflow/client"
	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/replay"
	"github.com/seqflow/seqflow/internal/testkit/clienttest"
	"github.com/seqflow/seqflow/schemas"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// wantMessage is the message a record of topic (without prefix) with
// event type et holds, as schemas/README.md says: written out here apart
// from tap's own table, so a wrong entry there cannot pass.
func wantMessage(topic, et string) proto.Message {
	switch topic {
	case eventlog.TopicUplink:
		return &imv1.Uplink{}
	case eventlog.TopicSequenced:
		return &imv1.SequencedEvent{}
	case eventlog.TopicDuplicates:
		switch et {
		case "duplicate":
			return &imv1.DuplicateAck{}
		case "refusal":
			return &imv1.Refusal{}
		}
	case eventlog.TopicOffline:
		return &imv1.OfflineNotification{}
	case eventlog.TopicDeadLetter:
		return &imv1.DeadLetter{}
	case eventlog.TopicReceipts:
		switch et {
		case "read_receipt":
			return &imv1.ReadReceipt{}
		case "delivery_receipt":
			return &imv1.DeliveryReceipt{}
		}
	}
	return nil
}

// logRecords are every committed record of one topic, read by the test's
// own consumer: what tap's output is checked against.
type logRecords struct {
	topic   string // without prefix
	records []*kgo.Record
}

// decoded returns r's message, or nil when r's value is not one.
func (l logRecords) decoded(r *kgo.Record) proto.Message {
	m := wantMessage(l.topic, eventlog.Header(r, schemas.HeaderEventType))
	if m == nil || proto.Unmarshal(r.Value, m) != nil {
		return nil
	}
	return m
}

func (l logRecords) at(partition int32, offset int64) *kgo.Record {
	for _, r := range l.records {
		if r.Partition == partition && r.Offset == offset {
			return r
		}
	}
	return nil
}

func (l logRecords) types() map[string]int {
	n := map[string]int{}
	for _, r := range l.records {
		n[eventlog.Header(r, schemas.HeaderEventType)]++
	}
	return n
}

// readTopic reads every committed record of topic up to its end.
func readTopic(t *testing.T, ctx context.Context, brokers []string, topic string) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(append(eventlog.ClientOpts(brokers, "tap-test-reader"), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	left := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	var out []*kgo.Record
	for len(left) > 0 {
		// The end offset counts transaction markers, which are never
		// fetched: a partition whose last offset is a marker is done once
		// nothing more comes. Records already in the log come at once.
		wait := 10 * time.Second
		if len(out) > 0 {
			wait = time.Second
		}
		pctx, cancel := context.WithTimeout(ctx, wait)
		fs := cl.PollFetches(pctx)
		cancel()
		if pctx.Err() != nil && fs.NumRecords() == 0 {
			break
		}
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, r)
			if r.Offset+1 >= left[r.Partition] {
				delete(left, r.Partition)
			}
		})
	}
	return out
}

// TestTapEveryRecordType runs the whole pipeline, makes it write every
// record type of every topic of eventlog.Topics through the real code
// paths (the SDK through the gateway; the CLI's uplink; a record the
// sequencer dead-letters), then taps each topic in each format and checks
// every line against the log. The subtests of tap_docs_test.go run the
// commands of docs/analytics.md against the same records.
//
// Push batches travel from the pusher to the gateways over TCP, not
// through a topic, so they are not here.
func TestTapEveryRecordType(t *testing.T) {
	p := clienttest.Start(t)
	gw := p.Gateway(t, "gw-tap")
	topics := eventlog.Names(p.Prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	alice, bob, carol := clienttest.User("alice"), clienttest.User("bob"), clienttest.User("carol")

	// Alice and Bob online through the SDK; Carol never connects, so the
	// pusher writes offline notifications for her.
	cctx, stopClients := context.WithCancel(ctx)
	var running []chan error
	connect := func(user string) *client.Client {
		c, err := client.New(client.Options{URLs: []string{gw.URL}, Token: p.Token(t, user, "d1")})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- c.Run(cctx) }()
		running = append(running, done)
		return c
	}
	stop := func() {
		stopClients()
		for _, d := range running {
			<-d
		}
		running = nil
	}
	defer stop()
	ac, bc := connect(alice), connect(bob)
	must := func(a client.Ack, err error) client.Ack {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	created := must(ac.CreateGroup(ctx, "tap", bob))
	sid := created.SessionID
	hello := must(ac.Send(ctx, sid, client.Text("hello")))
	must(ac.AddMembers(ctx, sid, carol))
	forCarol := must(ac.Send(ctx, sid, client.Text("for carol too")))
	must(ac.Edit(ctx, sid, hello.Seq, client.Text("hello, edited")))
	must(ac.Recall(ctx, sid, forCarol.Seq))
	if err := bc.MarkRead(ctx, sid, forCarol.Seq); err != nil {
		t.Fatal(err)
	}
	// Group governance: a role set (a group event), and a dissolve by a
	// member that the rules refuse (a refusal on im.duplicates.v1).
	must(ac.SetRole(ctx, sid, bob, "admin"))
	if _, err := bc.Dissolve(ctx, sid); err == nil {
		t.Fatal("an admin dissolved the group")
	}

	// A session of raw uplinks, as `seqflow uplink` writes them: a message
	// sent twice with one client_msg_id (the second is a duplicate), one
	// whose body is not text, and one that is no Uplink at all.
	raw := "s-raw-" + uuid.NewString()[:8]
	for range 2 {
		if err := runUplink(ctx, []string{"-topic-prefix", p.Prefix, "-session", raw, "-from", alice, "-client-msg-id", "dup-" + raw, "-text", "once"}); err != nil {
			t.Fatal(err)
		}
	}
	binBody := []byte{0xff, 0x00, 0x01, 's', 'e', 'q'}
	pr, err := kgo.NewClient(append(eventlog.ClientOpts(p.Stack.KafkaBrokers, "tap-test"), eventlog.ProducerOpts()...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	v, _ := proto.Marshal(&imv1.Uplink{SessionId: raw, ClientMsgId: "bin-" + raw, SenderUserId: alice, SenderDeviceId: "cli", GatewayId: "cli",
		GatewayTsMs: time.Now().UnixMilli(), Command: &imv1.Uplink_Message{Message: &imv1.MessageContent{Type: "binary", Body: binBody}}})
	garbage := []byte{0x0a, 0xff, 0xff, 0x01}
	for _, val := range [][]byte{v, garbage} {
		r := &kgo.Record{Topic: topics.Uplink, Key: []byte(raw), Value: val, Headers: eventlog.Headers("message", "seqflow.im.v1.Uplink", "seqflow-cli", "")}
		if err := pr.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	// Wait for every record type, then for the log to be still (the
	// clients stopped: no more delivered receipts).
	want := map[string][]string{
		eventlog.TopicUplink:     {"session_create", "message", "membership", "edit", "recall", "group"},
		eventlog.TopicSequenced:  {"session_create", "message", "membership", "edit", "recall", "group"},
		eventlog.TopicDuplicates: {"duplicate", "refusal"},
		eventlog.TopicReceipts:   {"read_receipt", "delivery_receipt"},
		eventlog.TopicOffline:    {"offline"},
		eventlog.TopicDeadLetter: {"dead_letter"},
	}
	log := map[string]logRecords{}
	read := func() {
		for topic := range want {
			log[topic] = logRecords{topic, readTopic(t, ctx, p.Stack.KafkaBrokers, p.Prefix+topic)}
		}
	}
	for deadline := time.Now().Add(90 * time.Second); ; {
		read()
		missing := ""
		for topic, types := range want {
			for _, et := range types {
				if log[topic].types()[et] == 0 {
					missing += " " + topic + "/" + et
				}
			}
		}
		if missing == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no record of:%s", missing)
		}
		time.Sleep(time.Second)
	}
	stop()
	for prev := ""; ; {
		time.Sleep(3 * time.Second) // the gateway flushes delivered receipts every second
		read()
		var sizes []string
		for topic, l := range log {
			sizes = append(sizes, fmt.Sprintf("%s=%d", topic, len(l.records)))
		}
		sort.Strings(sizes)
		if now := strings.Join(sizes, " "); now == prev {
			t.Logf("log: %s", now)
			break
		} else {
			prev = now
		}
	}

	tapAll := func(t *testing.T, topic, format string) []byte {
		t.Helper()
		var out bytes.Buffer
		n := len(log[topic].records)
		if format == formatProtoJSON {
			for _, r := range log[topic].records {
				if log[topic].decoded(r) == nil {
					n-- // left out
				}
			}
		}
		err := tap(ctx, &out, []string{"-topic-prefix", p.Prefix, "-topic", topic, "-from", "start", "-format", format,
			"-n", fmt.Sprint(n), "-idle-exit", "20s"})
		if err != nil {
			t.Fatal(err)
		}
		return out.Bytes()
	}

	for topic := range want {
		l := log[topic]
		t.Run(topic, func(t *testing.T) {
			t.Run("json", func(t *testing.T) {
				out := tapAll(t, topic, formatJSON)
				t.Logf("first line: %s", bytes.SplitN(out, []byte("\n"), 2)[0])
				lines := parseTapJSON(t, out)
				if len(lines) != len(l.records) {
					t.Fatalf("%d lines for %d records", len(lines), len(l.records))
				}
				for _, tl := range lines {
					r := l.at(tl.Partition, tl.Offset)
					if r == nil || tl.Topic != p.Prefix+topic || tl.Key != string(r.Key) || tl.Type != eventlog.Header(r, schemas.HeaderEventType) ||
						tl.TimestampMs != r.Timestamp.UnixMilli() || tl.Headers[schemas.HeaderProducer] != eventlog.Header(r, schemas.HeaderProducer) {
						t.Fatalf("line %+v matches no record of the log", tl)
					}
					m := l.decoded(r)
					if m == nil {
						if tl.Error == "" || tl.Event != nil {
							t.Fatalf("undecodable record at %d/%d printed as %+v", r.Partition, r.Offset, tl)
						}
						continue
					}
					if tl.Schema != string(m.ProtoReflect().Descriptor().FullName()) {
						t.Fatalf("record %d/%d (%s) decoded as %s, want %s", r.Partition, r.Offset, tl.Type, tl.Schema, m.ProtoReflect().Descriptor().FullName())
					}
					got := m.ProtoReflect().New().Interface()
					if err := fromTapJSON(tl.Event, got); err != nil || !proto.Equal(got, m) {
						t.Fatalf("record %d/%d: event %s reads back as %v (%v), want %v", r.Partition, r.Offset, tl.Event, got, err, m)
					}
				}
				checkJSONLines(t, topic, lines, raw, binBody, garbage)
			})
			t.Run("protojson", func(t *testing.T) {
				var got, wantMsgs []string
				out := tapAll(t, topic, formatProtoJSON)
				t.Logf("first line: %s", bytes.SplitN(out, []byte("\n"), 2)[0])
				sc := bufio.NewScanner(bytes.NewReader(out))
				for sc.Scan() {
					var a anypb.Any
					if err := protojson.Unmarshal(sc.Bytes(), &a); err != nil {
						t.Fatalf("line %s: %v", sc.Bytes(), err)
					}
					m, err := a.UnmarshalNew()
					if err != nil {
						t.Fatal(err)
					}
					got = append(got, canonical(t, m))
				}
				for _, r := range l.records {
					if m := l.decoded(r); m != nil {
						wantMsgs = append(wantMsgs, canonical(t, m))
					}
				}
				slices.Sort(got)
				slices.Sort(wantMsgs)
				if !slices.Equal(got, wantMsgs) {
					t.Fatalf("protojson gave %d messages, the log holds %d decodable records, or they differ", len(got), len(wantMsgs))
				}
			})
			t.Run("raw", func(t *testing.T) {
				rd := bufio.NewReader(bytes.NewReader(tapAll(t, topic, formatRaw)))
				var got, wantVals []string
				for {
					// protobuf's delimited framing: a varint length, the bytes.
					n, err := binary.ReadUvarint(rd)
					if err == io.EOF {
						break
					}
					if err != nil {
						t.Fatal(err)
					}
					b := make([]byte, n)
					if _, err := io.ReadFull(rd, b); err != nil {
						t.Fatalf("value cut short: %v", err)
					}
					got = append(got, string(b))
				}
				for _, r := range l.records {
					wantVals = append(wantVals, string(r.Value))
				}
				slices.Sort(got)
				slices.Sort(wantVals)
				if !slices.Equal(got, wantVals) {
					t.Fatalf("raw gave %d values, the log holds %d, or they differ", len(got), len(wantVals))
				}
			})
		})
	}

	t.Run("replay topics", func(t *testing.T) {
		testTapReplayTopics(t, ctx, p.Stack.KafkaBrokers, p.Prefix, log[eventlog.TopicSequenced])
	})

	t.Run("docs", func(t *testing.T) { testAnalyticsDoc(t, ctx, p.Stack.KafkaBrokers[0], p.Prefix, log) })
}

// checkJSONLines checks what each topic must show in the json format,
// beyond matching the log: the receipts bug, bodies as text or base64.
func checkJSONLines(t *testing.T, topic string, lines []tapJSONLine, raw string, binBody, garbage []byte) {
	t.Helper()
	has := func(pred func(tapJSONLine) bool) bool { return slices.ContainsFunc(lines, pred) }
	switch topic {
	case eventlog.TopicReceipts:
		for _, tl := range lines {
			ev := string(tl.Event)
			switch tl.Type {
			case "delivery_receipt":
				if tl.Schema != "seqflow.im.v1.DeliveryReceipt" || !strings.Contains(ev, `"delivered_seq":`) || strings.Contains(ev, "read_seq") {
					t.Errorf("delivery receipt printed as %s %s", tl.Schema, ev)
				}
			case "read_receipt":
				if tl.Schema != "seqflow.im.v1.ReadReceipt" || !strings.Contains(ev, `"read_seq":`) || strings.Contains(ev, "delivered_seq") {
					t.Errorf("read receipt printed as %s %s", tl.Schema, ev)
				}
			}
		}
	case eventlog.TopicSequenced:
		if !has(func(tl tapJSONLine) bool { return strings.Contains(string(tl.Event), `"body":"hello"`) }) {
			t.Error(`no event with "body":"hello" as text`)
		}
		b64 := `"body":"` + base64.StdEncoding.EncodeToString(binBody) + `","body_encoding":"base64"`
		if !has(func(tl tapJSONLine) bool { return tl.Key == raw && strings.Contains(string(tl.Event), b64) }) {
			t.Errorf("no event with %s", b64)
		}
	case eventlog.TopicUplink:
		if !has(func(tl tapJSONLine) bool {
			return tl.Error != "" && tl.Value == base64.StdEncoding.EncodeToString(garbage) && tl.ValueEncoding == "base64"
		}) {
			t.Error("the undecodable uplink is not printed with its error and value")
		}
	case eventlog.TopicDeadLetter:
		want := `"original_value":"` + base64.StdEncoding.EncodeToString(garbage) + `","original_value_encoding":"base64"`
		if !has(func(tl tapJSONLine) bool {
			return tl.Key == raw && strings.Contains(string(tl.Event), `"code":"ERROR_CODE_UNDECODABLE"`) && strings.Contains(string(tl.Event), want)
		}) {
			t.Errorf("no dead letter of the garbage uplink with %s", want)
		}
	case eventlog.TopicOffline:
		if !has(func(tl tapJSONLine) bool { return strings.Contains(string(tl.Event), `"recipient_user_id":`) }) {
			t.Error("no offline notification with a recipient")
		}
	}
}

// canonical is m's deterministic wire form with its name, to compare
// messages of several types as strings.
func canonical(t *testing.T, m proto.Message) string {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(m.ProtoReflect().Descriptor().FullName()) + ":" + string(b)
}

// testTapReplayTopics copies the whole sequenced log into a replay topic
// with `seqflow replay-topic create` and taps it and the definitions
// topic: the copies decode as the source's events (by their seqflow-schema
// header), each partition's end marker as a ReplayEnd, the definition as
// a ReplayDefinition.
func testTapReplayTopics(t *testing.T, ctx context.Context, brokers []string, prefix string, sequenced logRecords) {
	name := "tap" + uuid.NewString()[:8]
	var out, errOut bytes.Buffer
	if err := replayTopicCmd(ctx, []string{"create", "-topic-prefix", prefix, "-quiet", "-rate", "0", "-nice", "0", name}, &out, &errOut); err != nil {
		t.Fatalf("replay-topic create: %v\n%s", err, errOut.Bytes())
	}
	topic := "im.replay." + name + ".v1"
	t.Cleanup(func() {
		cl, err := kgo.NewClient(eventlog.ClientOpts(brokers, "tap-test-admin")...)
		if err != nil {
			return
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = kadm.NewClient(cl).DeleteTopics(ctx, prefix+topic, prefix+replay.TopicDefinitions)
	})
	copies := readTopic(t, ctx, brokers, prefix+topic)
	lines := tapJSON(t, ctx, "-topic-prefix", prefix, "-topic", topic, "-from", "start", "-n", fmt.Sprint(len(copies)), "-idle-exit", "20s")
	events, ends := 0, 0
	for _, tl := range lines {
		switch tl.Type {
		case "replay_end":
			var end imv1.ReplayEnd
			if err := fromTapJSON(tl.Event, &end); err != nil || tl.Schema != "seqflow.im.v1.ReplayEnd" || end.GetReplay() != name {
				t.Fatalf("end marker printed as %s %s (%v)", tl.Schema, tl.Event, err)
			}
			ends++
		default:
			var ev imv1.SequencedEvent
			if err := fromTapJSON(tl.Event, &ev); err != nil || tl.Schema != "seqflow.im.v1.SequencedEvent" {
				t.Fatalf("copy printed as %s %s (%v)", tl.Schema, tl.Event, err)
			}
			found := false
			for _, r := range sequenced.records {
				found = found || proto.Equal(sequenced.decoded(r), &ev)
			}
			if !found {
				t.Fatalf("copy %v is no event of the log", &ev)
			}
			events++
		}
	}
	if events != len(sequenced.records) || ends == 0 || events+ends != len(copies) {
		t.Fatalf("tap printed %d copies and %d end markers; the log holds %d events, the replay topic %d records", events, ends, len(sequenced.records), len(copies))
	}
	defs := tapJSON(t, ctx, "-topic-prefix", prefix, "-topic", replay.TopicDefinitions, "-from", "start", "-idle-exit", "5s")
	var def imv1.ReplayDefinition
	if len(defs) == 0 || fromTapJSON(defs[len(defs)-1].Event, &def) != nil || def.GetName() != name || defs[len(defs)-1].Schema != "seqflow.im.v1.ReplayDefinition" {
		t.Fatalf("definitions topic printed %+v", defs)
	}
}
