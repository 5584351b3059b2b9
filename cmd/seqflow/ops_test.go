package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/deadletter"
	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/testkit/stack"
	"github.com/seqflow/seqflow/schemas"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// opsEnv is a fresh topic prefix on the local stack's Kafka.
type opsEnv struct {
	prefix  string
	topics  eventlog.Topics
	brokers string
	cl      *kgo.Client
	adm     *kadm.Client
}

// newOpsEnv creates the topics of a fresh prefix with 4 partitions per
// keyed topic (or, when specs is given, exactly those) and deletes them at
// the end.
func newOpsEnv(t *testing.T, specs func(eventlog.Topics) []eventlog.Spec) *opsEnv {
	t.Helper()
	st := stack.Require(t, "kafka")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := &opsEnv{prefix: "t-" + uuid.NewString()[:8] + ".", brokers: strings.Join(st.KafkaBrokers, ",")}
	e.topics = eventlog.Names(e.prefix)
	cl, err := kgo.NewClient(append(eventlog.ClientOpts(st.KafkaBrokers, "seqflow-ops-test"), eventlog.ProducerOpts()...)...)
	if err != nil {
		t.Fatal(err)
	}
	e.cl, e.adm = cl, kadm.NewClient(cl)
	s := eventlog.Specs(e.topics, 4)
	if specs != nil {
		s = specs(e.topics)
	}
	if err := eventlog.EnsureTopics(ctx, e.adm, s, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		names := make([]string, len(s))
		for i := range s {
			names[i] = s[i].Name
		}
		if _, err := e.adm.DeleteTopics(ctx, names...); err != nil {
			t.Logf("delete topics of %s: %v", e.prefix, err)
		}
		cl.Close()
	})
	return e
}

// run runs an operator command against e's prefix and returns its output.
func (e *opsEnv) run(t *testing.T, cmd func(context.Context, []string, io.Writer) error, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	err := cmd(ctx, append(args, "-brokers", e.brokers, "-topic-prefix", e.prefix), &out)
	return out.String(), err
}

// txnMode says how produce writes its records.
type txnMode int

const (
	plain     txnMode = iota // idempotent, no transaction
	committed                // one committed transaction
	aborted                  // one aborted transaction
)

// produce writes recs to the partitions they name.
func (e *opsEnv) produce(t *testing.T, mode txnMode, recs ...*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts := append(eventlog.ClientOpts(eventlog.SplitBrokers(e.brokers), "seqflow-ops-test"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if mode != plain {
		opts = append(opts, kgo.TransactionalID("seqflow-ops-test-"+uuid.NewString()))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if mode != plain {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if mode != plain {
		if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(mode == committed)); err != nil {
			t.Fatal(err)
		}
	}
}

func jsonLines[T any](t *testing.T, s string) []T {
	t.Helper()
	var out []T
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("decode %q: %v", sc.Text(), err)
		}
		out = append(out, v)
	}
	return out
}

func TestLagPerGroupAndPartition(t *testing.T) {
	e := newOpsEnv(t, nil)
	ctx := context.Background()
	// Five uplinks on partition 1, two on partition 2; four committed
	// events on sequenced partition 0, in two transactions (markers at 2, 5).
	var ups []*kgo.Record
	for i := range 7 {
		p := int32(1 + i/5)
		ups = append(ups, &kgo.Record{Topic: e.topics.Uplink, Partition: p, Value: []byte("u")})
	}
	e.produce(t, plain, ups...)
	for range 2 {
		e.produce(t, committed,
			&kgo.Record{Topic: e.topics.Sequenced, Partition: 0, Value: []byte("s")},
			&kgo.Record{Topic: e.topics.Sequenced, Partition: 0, Value: []byte("s")})
	}
	seqGroup, pushGroup := "seqflow-sequencer-"+e.prefix, "seqflow-pusher-"+e.prefix
	commit := func(group string, offs ...kadm.Offset) {
		t.Helper()
		os := kadm.Offsets{}
		for _, o := range offs {
			os.Add(o)
		}
		if err := e.adm.CommitAllOffsets(ctx, group, os); err != nil {
			t.Fatal(err)
		}
	}
	commit(seqGroup, kadm.Offset{Topic: e.topics.Uplink, Partition: 1, At: 3, LeaderEpoch: -1},
		kadm.Offset{Topic: e.topics.Uplink, Partition: 2, At: 2, LeaderEpoch: -1})
	// The pusher read past the last record (4) but not the last marker (5),
	// as a read_committed consumer commits.
	commit(pushGroup, kadm.Offset{Topic: e.topics.Sequenced, Partition: 0, At: 5, LeaderEpoch: -1})

	type key struct {
		group, topic string
		p            int32
	}
	cases := []struct {
		name    string
		args    []string
		want    map[key][3]int64 // committed, offset lag, lag
		others  bool             // rows outside want allowed (other partitions)
		wantErr bool
	}{
		{name: "all groups of the prefix", args: nil, want: map[key][3]int64{
			{seqGroup, e.topics.Uplink, 1}:     {3, 2, 2},
			{seqGroup, e.topics.Uplink, 2}:     {2, 0, 0},
			{pushGroup, e.topics.Sequenced, 0}: {5, 1, 0},
		}},
		{name: "one group", args: []string{"-group", pushGroup}, want: map[key][3]int64{
			{pushGroup, e.topics.Sequenced, 0}: {5, 1, 0},
		}},
		{name: "caught up passes a drain check", args: []string{"-group", pushGroup, "-max-lag", "0"}, want: map[key][3]int64{
			{pushGroup, e.topics.Sequenced, 0}: {5, 1, 0},
		}},
		{name: "behind fails a drain check", args: []string{"-group", seqGroup, "-max-lag", "0"}, wantErr: true, want: map[key][3]int64{
			{seqGroup, e.topics.Uplink, 1}: {3, 2, 2},
		}},
		{name: "unknown group is an error", args: []string{"-group", "nosuch-" + e.prefix}, wantErr: true, want: map[key][3]int64{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := e.run(t, lagCmd, append(c.args, "-json")...)
			if (err != nil) != c.wantErr {
				t.Fatalf("err = %v, want error %v\n%s", err, c.wantErr, out)
			}
			var le *LagError
			if err != nil && !errors.As(err, &le) {
				t.Fatalf("err = %T %v, want *LagError", err, err)
			}
			rows := jsonLines[lagRow](t, out)
			seen := map[key]bool{}
			for _, r := range rows {
				if r.Topic != "" && !strings.HasPrefix(r.Topic, e.prefix) {
					t.Errorf("row of another prefix: %+v", r)
				}
				k := key{r.Group, r.Topic, r.Partition}
				w, ok := c.want[k]
				if !ok {
					if r.Err == "" && (r.Lag != 0 || r.OffsetLag != 0) {
						t.Errorf("unexpected row with lag %+v", r)
					}
					continue
				}
				seen[k] = true
				if got := [3]int64{r.Committed, r.OffsetLag, r.Lag}; got != w {
					t.Errorf("%v: committed, offset lag, lag = %v, want %v", k, got, w)
				}
			}
			for k := range c.want {
				if !seen[k] {
					t.Errorf("no row for %v in\n%s", k, out)
				}
			}
		})
	}
}

func TestTopicsDescribesAndFindsProblems(t *testing.T) {
	good := newOpsEnv(t, nil)
	good.produce(t, plain,
		&kgo.Record{Topic: good.topics.Uplink, Partition: 2, Value: []byte("a")},
		&kgo.Record{Topic: good.topics.Uplink, Partition: 2, Value: []byte("b")})
	good.produce(t, committed, &kgo.Record{Topic: good.topics.Sequenced, Partition: 3, Value: []byte("s")})
	// Sequenced with another partition count than uplink, receipts and
	// offline missing, dead letters kept a day instead of 30.
	bad := newOpsEnv(t, func(tp eventlog.Topics) []eventlog.Spec {
		var out []eventlog.Spec
		for _, s := range eventlog.Specs(tp, 4) {
			switch s.Name {
			case tp.Sequenced:
				s.Partitions = 3
			case tp.Receipts, tp.Offline:
				continue
			case tp.DeadLetter:
				s.Configs = map[string]string{"retention.ms": "86400000"}
			}
			out = append(out, s)
		}
		return out
	})
	cases := []struct {
		name     string
		env      *opsEnv
		problems []string // substrings, one per expected problem
		check    func(t *testing.T, byName map[string]topicInfo)
	}{
		{name: "as defined", env: good, check: func(t *testing.T, byName map[string]topicInfo) {
			for _, s := range eventlog.Specs(good.topics, 4) {
				ti := byName[s.Name]
				if !ti.Exists || ti.partitions() != int(s.Partitions) || ti.Replica < 1 || ti.MinISR < 1 {
					t.Errorf("%s: %+v, want %d partitions", s.Name, ti, s.Partitions)
				}
				for k, v := range s.Configs {
					if ti.Configs[k] != v {
						t.Errorf("%s: %s=%q, want %q", s.Name, k, ti.Configs[k], v)
					}
				}
			}
			if up := byName[good.topics.Uplink]; up.End[2] != 2 || up.Stable[2] != 2 || up.End[0] != 0 {
				t.Errorf("uplink end offsets %v stable %v, want 2 on partition 2", up.End, up.Stable)
			}
			if sq := byName[good.topics.Sequenced]; sq.End[3] != 2 || sq.Stable[3] != 2 {
				t.Errorf("sequenced end offsets %v stable %v, want 2 (record and marker) on partition 3", sq.End, sq.Stable)
			}
		}},
		{name: "differs from the definitions", env: bad, problems: []string{
			bad.topics.Sequenced + " has 3 partitions but " + bad.topics.Uplink + " has 4",
			bad.topics.Receipts + ": missing",
			bad.topics.Offline + ": missing",
			bad.topics.DeadLetter + ": retention.ms=86400000, want 2592000000",
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := c.env.run(t, topicsCmd, "-json")
			var tp *TopicProblemsError
			switch {
			case len(c.problems) == 0 && err != nil:
				t.Fatalf("err = %v\n%s", err, out)
			case len(c.problems) > 0 && !errors.As(err, &tp):
				t.Fatalf("err = %v, want *TopicProblemsError", err)
			case tp != nil && len(tp.Problems) != len(c.problems):
				t.Errorf("problems %q, want %d of them", tp.Problems, len(c.problems))
			}
			for _, want := range c.problems {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("problems %v do not say %q", err, want)
				}
			}
			byName := map[string]topicInfo{}
			for _, ti := range jsonLines[topicInfo](t, out) {
				byName[ti.Name] = ti
			}
			if len(byName) != 6 {
				t.Errorf("%d topics described, want 6", len(byName))
			}
			if c.check != nil {
				c.check(t, byName)
			}
			text, _ := c.env.run(t, topicsCmd)
			if got := strings.Count(text, "PROBLEM:") + strings.Count(text, "MISSING"); got != len(c.problems) {
				t.Errorf("text output shows %d problems, want %d:\n%s", got, len(c.problems), text)
			}
		})
	}
}

// deadLetterOf wraps an original record the way the sequencer and the
// persister do.
func deadLetterOf(t *testing.T, dlqTopic string, code imv1.ErrorCode, service string, orig *kgo.Record) *kgo.Record {
	t.Helper()
	r, err := deadletter.Record(dlqTopic, service, orig, deadletter.Errorf(code, "test: %s", code), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// readAt returns the committed record at topic/p/offset.
func (e *opsEnv) readAt(t *testing.T, topic string, p int32, offset int64) *kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(append(eventlog.ClientOpts(eventlog.SplitBrokers(e.brokers), "seqflow-ops-test"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().At(offset)}}))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("read %s/%d/%d: %v", topic, p, offset, err)
		}
		if rs := fs.Records(); len(rs) > 0 {
			return rs[0]
		}
	}
}

func TestDLQListAndRedrive(t *testing.T) {
	e := newOpsEnv(t, nil)
	const session = "s-ops-redrive"
	up, err := proto.Marshal(&imv1.Uplink{SessionId: session, ClientMsgId: "c1", SenderUserId: "u1",
		Command: &imv1.Uplink_Message{Message: &imv1.MessageContent{Type: "text", Body: []byte("hi")}}})
	if err != nil {
		t.Fatal(err)
	}
	trace := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	// A header that is not UTF-8 either way: the redrive gives it back byte
	// for byte.
	binary := kgo.RecordHeader{Key: "bin\xff\x00", Value: []byte{0xfe, 0, 0xc3, 0x28}}
	origUplink := &kgo.Record{Topic: e.topics.Uplink, Partition: 1, Offset: 41, Key: []byte(session), Value: up,
		Headers: append(eventlog.Headers("message", "seqflow.im.v1.Uplink", "producer-gw", trace), binary)}
	origEvent := &kgo.Record{Topic: e.topics.Sequenced, Partition: 1, Offset: 7, Key: []byte(session), Value: []byte("event")}
	origReceipt := &kgo.Record{Topic: e.topics.Receipts, Partition: 3, Offset: 2, Key: []byte(session), Value: []byte("receipt")}
	origForeign := &kgo.Record{Topic: "elsewhere.im.uplink.v1", Key: []byte(session), Value: up}
	dlq := e.topics.DeadLetter
	// DLQ offsets: 0 uplink, 1 marker, 2 aborted, 3 marker, 4 event,
	// 5 marker, 6 receipt, 7 undecodable, 8 foreign.
	e.produce(t, committed, deadLetterOf(t, dlq, imv1.ErrorCode_ERROR_CODE_TOO_LARGE, "sequencer", origUplink))
	e.produce(t, aborted, deadLetterOf(t, dlq, imv1.ErrorCode_ERROR_CODE_INTERNAL, "sequencer", origUplink))
	e.produce(t, committed, deadLetterOf(t, dlq, imv1.ErrorCode_ERROR_CODE_CONSTRAINT, "persister", origEvent))
	e.produce(t, plain, deadLetterOf(t, dlq, imv1.ErrorCode_ERROR_CODE_UNDECODABLE, "persister", origReceipt),
		&kgo.Record{Topic: dlq, Partition: 0, Value: []byte("\xffnot a dead letter")},
		deadLetterOf(t, dlq, imv1.ErrorCode_ERROR_CODE_BAD_FRAME, "sequencer", origForeign))

	t.Run("list", func(t *testing.T) {
		cases := []struct {
			args []string
			want []int64 // DLQ offsets
		}{
			{[]string{"-from", "start", "-n", "100"}, []int64{0, 4, 6, 7, 8}},
			{[]string{"-from", "start", "-n", "2"}, []int64{0, 4}},
			{[]string{"-from", "end", "-n", "2"}, []int64{7, 8}},
			{[]string{"-from", "end", "-n", "4"}, []int64{4, 6, 7, 8}},
			{[]string{"-n", "100"}, []int64{0, 4, 6, 7, 8}},
		}
		for _, c := range cases {
			t.Run(strings.Join(c.args, " "), func(t *testing.T) {
				out, err := e.run(t, dlqCmd, append([]string{"list", "-json"}, c.args...)...)
				if err != nil {
					t.Fatal(err)
				}
				var got []int64
				for _, l := range jsonLines[dlqLine](t, out) {
					got = append(got, l.Offset)
				}
				if fmt.Sprint(got) != fmt.Sprint(c.want) {
					t.Errorf("offsets %v, want %v", got, c.want)
				}
			})
		}
		out, err := e.run(t, dlqCmd, "list", "-json", "-from", "start", "-n", "1")
		if err != nil {
			t.Fatal(err)
		}
		ls := jsonLines[dlqLine](t, out)
		want := dlqLine{Partition: 0, Offset: 0, Code: "ERROR_CODE_TOO_LARGE", Reason: "test: ERROR_CODE_TOO_LARGE", Service: "sequencer",
			OriginalTopic: e.topics.Uplink, OriginalPartition: 1, OriginalOffset: 41, Key: session, ValueBytes: len(up)}
		if len(ls) != 1 {
			t.Fatalf("%d lines, want 1", len(ls))
		}
		got := ls[0]
		if got.Headers[schemas.HeaderTraceparent] != trace || got.DeadLetteredAt.IsZero() {
			t.Errorf("headers %v, time %v: want the original trace and a time", got.Headers, got.DeadLetteredAt)
		}
		if wantBin := []dlqHeader{{Key: []byte(binary.Key), Value: binary.Value}}; fmt.Sprint(got.BinaryHeaders) != fmt.Sprint(wantBin) {
			t.Errorf("binary headers %v, want %v", got.BinaryHeaders, wantBin)
		}
		got.Headers, got.BinaryHeaders, got.DeadLetteredAt = nil, nil, time.Time{}
		if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
			t.Errorf("line\n %+v, want\n %+v", got, want)
		}
		text, err := e.run(t, dlqCmd, "list", "-from", "start")
		if err != nil || !strings.Contains(text, "ERROR_CODE_TOO_LARGE") || !strings.Contains(text, "UNDECODABLE") ||
			!strings.Contains(text, e.topics.Uplink+"/1/41") {
			t.Errorf("text list (err %v) lacks code, undecodable or original position:\n%s", err, text)
		}
	})

	t.Run("redrive", func(t *testing.T) {
		ctx := context.Background()
		end := func() int64 {
			t.Helper()
			l, err := e.adm.ListEndOffsets(ctx, e.topics.Uplink)
			if err != nil {
				t.Fatal(err)
			}
			var n int64
			l.Each(func(o kadm.ListedOffset) { n += o.Offset })
			return n
		}
		var refused *RedriveRefusedError
		var missing *NoDeadLetterError
		cases := []struct {
			name   string
			args   []string
			target any // nil: success
			says   string
		}{
			{"sequenced event", []string{"-offset", "4"}, &refused, "only the sequencer may write " + e.topics.Sequenced},
			{"aborted dead letter", []string{"-offset", "2"}, &missing, "no committed dead letter"},
			{"transaction marker", []string{"-offset", "1"}, &missing, "no committed dead letter"},
			{"past the end", []string{"-offset", "99"}, &missing, "[0, 9)"},
			{"no such partition", []string{"-offset", "0", "-partition", "3"}, nil, "no partition 3"},
			{"undecodable", []string{"-offset", "7"}, nil, "decode dead letter"},
			{"another deployment's topic", []string{"-offset", "8"}, &refused, "not a topic of this deployment"},
			{"offset missing", nil, nil, "-offset is required"},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				before := end()
				out, err := e.run(t, dlqCmd, append([]string{"redrive"}, c.args...)...)
				if err == nil || !strings.Contains(err.Error(), c.says) {
					t.Fatalf("err = %v, want one saying %q (output %q)", err, c.says, out)
				}
				if c.target != nil && !errors.As(err, c.target) {
					t.Errorf("err = %T, want %T", err, c.target)
				}
				if after := end(); after != before {
					t.Errorf("uplink end offsets moved %d → %d on a refused redrive", before, after)
				}
			})
		}
		before := end()
		out, err := e.run(t, dlqCmd, "redrive", "-offset", "0", "-dry-run")
		if err != nil || !strings.Contains(out, "dry run") {
			t.Fatalf("dry run: %v %q", err, out)
		}
		if after := end(); after != before {
			t.Fatalf("dry run produced: uplink end offsets %d → %d", before, after)
		}
		out, err = e.run(t, dlqCmd, "redrive", "-offset", "0")
		if err != nil {
			t.Fatal(err)
		}
		var p int32
		var off int64
		if _, err := fmt.Sscanf(out, "redriven "+dlq+"/0/0 to "+e.topics.Uplink+"/%d/%d", &p, &off); err != nil {
			t.Fatalf("output %q: %v", out, err)
		}
		r := e.readAt(t, e.topics.Uplink, p, off)
		if string(r.Key) != session || !bytes.Equal(r.Value, up) {
			t.Errorf("redriven key %q value %x, want %q and the original value", r.Key, r.Value, session)
		}
		wantHeaders := append(append([]kgo.RecordHeader{}, origUplink.Headers...), kgo.RecordHeader{Key: HeaderRedrivenFrom, Value: []byte(dlq + "/0/0")})
		if fmt.Sprint(r.Headers) != fmt.Sprint(wantHeaders) {
			t.Errorf("headers\n %s\nwant\n %s", r.Headers, wantHeaders)
		}
		// Key partitioning puts the session where its uplinks go.
		if want := int32(kgo.StickyKeyPartitioner(nil).ForTopic(e.topics.Uplink).Partition(r, 4)); p != want {
			t.Errorf("redriven to partition %d, want %d (murmur2 of the key)", p, want)
		}
		// A receipt the persister refused goes back to the receipts topic.
		if out, err = e.run(t, dlqCmd, "redrive", "-offset", "6"); err != nil || !strings.Contains(out, " to "+e.topics.Receipts+"/") {
			t.Errorf("redrive receipt: %v %q", err, out)
		}
	})
}
