package replay_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/rebuild"
	"github.com/seqflow/seqflow/internal/replay"
	"github.com/seqflow/seqflow/internal/testkit/proc"
	"github.com/seqflow/seqflow/internal/testkit/stack"
	"github.com/seqflow/seqflow/schemas"
	"github.com/seqflow/seqflow/schemas/imv1"
)

const partitions = 4

// env is a fresh topic prefix with the seqflow topics (4 partitions each).
type env struct {
	brokers []string
	prefix  string
	topics  eventlog.Topics
	adm     *kadm.Client
}

func newEnv(t *testing.T) *env {
	t.Helper()
	st := stack.Require(t, "kafka")
	e := &env{brokers: st.KafkaBrokers, prefix: "t-" + uuid.NewString()[:8] + "."}
	e.topics = eventlog.Names(e.prefix)
	cl, err := kgo.NewClient(eventlog.ClientOpts(e.brokers, "replay-test")...)
	if err != nil {
		t.Fatal(err)
	}
	e.adm = kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := eventlog.EnsureTopics(ctx, e.adm, eventlog.Specs(e.topics, partitions), 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if all, err := e.adm.ListTopics(ctx); err == nil {
			var mine []string
			for _, n := range all.Names() {
				if strings.HasPrefix(n, e.prefix) {
					mine = append(mine, n)
				}
			}
			_, _ = e.adm.DeleteTopics(ctx, mine...)
		}
		cl.Close()
	})
	return e
}

// writer writes sequenced events the way the sequencer does: in
// transactions, key = session, one partition per session, the standard
// headers. Between committed transactions it writes aborted ones, whose
// events no replay may hold.
type writer struct {
	t     *testing.T
	e     *env
	cl    *kgo.Client
	seqs  map[string]int64
	txns  int
	msgID int64
}

func (e *env) writer(t *testing.T) *writer {
	t.Helper()
	cl, err := kgo.NewClient(append(eventlog.ClientOpts(e.brokers, "replay-test-log"),
		kgo.TransactionalID("replay-test-log-"+uuid.NewString()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &writer{t: t, e: e, cl: cl, seqs: map[string]int64{}, msgID: time.Now().UnixNano() >> 10}
}

func partitionOf(session string) int32 {
	h := fnv.New32a()
	h.Write([]byte(session))
	return int32(h.Sum32() % partitions)
}

// event is the next sequenced event of session, sent by sender.
func (w *writer) event(session, sender string) *kgo.Record {
	w.seqs[session]++
	w.msgID++
	seq := w.seqs[session]
	v, err := proto.Marshal(&imv1.SequencedEvent{SessionId: session, Seq: seq, MsgId: w.msgID, ClientMsgId: fmt.Sprintf("c%d", seq),
		SenderUserId: sender, SenderDeviceId: "d", ServerTsMs: time.Now().UnixMilli(),
		Payload: &imv1.SequencedEvent_Message{Message: &imv1.MessageContent{Type: "text", Body: []byte(fmt.Sprintf("%s #%d", session, seq))}}})
	if err != nil {
		w.t.Fatal(err)
	}
	h := append(eventlog.Headers("message", "seqflow.im.v1.SequencedEvent", "sequencer", fmt.Sprintf("00-%032x-%016x-01", w.msgID, seq)),
		kgo.RecordHeader{Key: schemas.HeaderInstance, Value: []byte("seq-test")})
	return &kgo.Record{Topic: w.e.topics.Sequenced, Partition: partitionOf(session), Key: []byte(session), Value: v, Headers: h}
}

// write writes perSession events of every session, round robin, senders
// u0, u1, u2 in turn, in committed transactions of txnSize events with an
// aborted one after every third.
func (w *writer) write(ctx context.Context, sessions []string, perSession, txnSize int) {
	w.t.Helper()
	var recs []*kgo.Record
	for i := range perSession {
		for j, s := range sessions {
			recs = append(recs, w.event(s, fmt.Sprintf("u%d", (i+j)%3)))
		}
	}
	for len(recs) > 0 {
		chunk := recs[:min(txnSize, len(recs))]
		recs = recs[len(chunk):]
		w.txn(ctx, chunk, true)
		if w.txns++; w.txns%3 == 0 {
			var junk []*kgo.Record
			for i := range 20 {
				junk = append(junk, w.event(fmt.Sprintf("aborted-%d", i), "u0"))
			}
			w.txn(ctx, junk, false)
		}
	}
}

func (w *writer) txn(ctx context.Context, recs []*kgo.Record, commit bool) {
	w.t.Helper()
	if err := w.cl.BeginTransaction(); err != nil {
		w.t.Fatal(err)
	}
	if err := w.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		w.t.Fatal(err)
	}
	if err := w.cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
		w.t.Fatal(err)
	}
}

// readCommitted returns every committed data record of topic, by
// partition, in log order.
func readCommitted(ctx context.Context, t *testing.T, brokers []string, topic string) map[int32][]*kgo.Record {
	t.Helper()
	ends, err := rebuild.CurrentEnds(ctx, brokers, topic)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32][]*kgo.Record{}
	if err := rebuild.Scan(ctx, brokers, topic, ends, func(r *kgo.Record) error {
		out[r.Partition] = append(out[r.Partition], r)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// dataRecords counts the data records of topic read uncommitted: with
// those of aborted transactions.
func dataRecords(ctx context.Context, t *testing.T, brokers []string, topic string) int {
	t.Helper()
	cl, err := kgo.NewClient(append(eventlog.ClientOpts(brokers, "replay-test-uncommitted"),
		kgo.KeepControlRecords(), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
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
	n := 0
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if !r.Attrs.IsControl() {
				n++
			}
			if end, ok := left[r.Partition]; ok && r.Offset >= end-1 {
				delete(left, r.Partition)
			}
		})
	}
	return n
}

// checkReplay fails unless the replay topic of def holds, per partition,
// exactly want's records in order (same key, value, headers, partition,
// with the replay headers after them) and then the end marker.
func checkReplay(ctx context.Context, t *testing.T, brokers []string, def *imv1.ReplayDefinition, want map[int32][]*kgo.Record) {
	t.Helper()
	got := readCommitted(ctx, t, brokers, def.GetReplayTopic())
	total := 0
	for _, rg := range def.GetRanges() {
		p := rg.GetPartition()
		w, g := want[p], got[p]
		total += len(w)
		if len(g) != len(w)+1 {
			t.Fatalf("partition %d: %d records in the replay topic, want %d events and a marker", p, len(g), len(w))
		}
		for i, src := range w {
			c := g[i]
			where := fmt.Sprintf("partition %d, record %d (source offset %d)", p, i, src.Offset)
			if replay.IsEnd(c) {
				t.Fatalf("%s: an end marker before the end", where)
			}
			if !bytes.Equal(c.Key, src.Key) || !bytes.Equal(c.Value, src.Value) {
				t.Fatalf("%s: key or value differs from the source", where)
			}
			n := len(src.Headers)
			if len(c.Headers) != n+2 || !slices.EqualFunc(c.Headers[:n], src.Headers, func(a, b kgo.RecordHeader) bool {
				return a.Key == b.Key && bytes.Equal(a.Value, b.Value)
			}) {
				t.Fatalf("%s: headers %v, source %v", where, c.Headers, src.Headers)
			}
			if o := eventlog.Header(c, replay.HeaderSourceOffset); o != strconv.FormatInt(src.Offset, 10) {
				t.Fatalf("%s: source offset header %q", where, o)
			}
			if n := eventlog.Header(c, replay.HeaderCount); n != strconv.Itoa(i+1) {
				t.Fatalf("%s: count header %q, want %d", where, n, i+1)
			}
		}
		last := g[len(g)-1]
		if !replay.IsEnd(last) || eventlog.Header(last, schemas.HeaderSchema) != replay.SchemaEnd || last.Key != nil {
			t.Fatalf("partition %d: the last record is not an end marker: headers %v", p, last.Headers)
		}
		var end imv1.ReplayEnd
		if err := proto.Unmarshal(last.Value, &end); err != nil {
			t.Fatal(err)
		}
		if end.GetReplay() != def.GetName() || end.GetSourceTopic() != def.GetSourceTopic() || end.GetSourcePartition() != p ||
			end.GetFromOffset() != rg.GetFromOffset() || end.GetToOffset() != rg.GetToOffset() || end.GetEvents() != int64(len(w)) ||
			!proto.Equal(end.GetRequest(), def.GetRequest()) {
			t.Fatalf("partition %d: end marker %v, want range [%d, %d) of %s and %d events", p, &end, rg.GetFromOffset(), rg.GetToOffset(), def.GetSourceTopic(), len(w))
		}
	}
	if len(got) > len(def.GetRanges()) {
		t.Fatalf("records in %d partitions, the replay has %d", len(got), len(def.GetRanges()))
	}
	t.Logf("replay %s: %d events and %d markers, as expected", def.GetName(), total, len(def.GetRanges()))
}

// selectRecords returns src's records that keep says are in the range.
func selectRecords(src map[int32][]*kgo.Record, keep func(*kgo.Record) bool) map[int32][]*kgo.Record {
	out := map[int32][]*kgo.Record{}
	for p, rs := range src {
		for _, r := range rs {
			if keep(r) {
				out[p] = append(out[p], r)
			}
		}
	}
	return out
}

func sessionIDs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("s%02d", i)
	}
	return out
}

// TestReplayerKill9ExactlyOnce runs `seqflow replay-topic create` as a
// process, kills it with SIGKILL twice while it copies (the first time
// restarting it with create again, the second with resume) and checks
// that the replay topic holds every committed event of the log exactly
// once, in order, and ends each partition with its marker. Each kill
// comes while a transaction has records in the topic; those records must
// be there in the end, aborted: proof that the kills cut transactions.
func TestReplayerKill9ExactlyOnce(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	w := e.writer(t)
	w.write(ctx, sessionIDs(40), 200, 400)
	src := readCommitted(ctx, t, e.brokers, e.topics.Sequenced)

	bin := proc.Build(t, "./cmd/seqflow")
	const name = "kill9"
	common := []string{"-brokers", strings.Join(e.brokers, ","), "-topic-prefix", e.prefix, "-rate", "2000", "-progress-interval", "200ms"}
	p := &proc.Proc{Name: "replayer", Bin: bin, Args: append([]string{"replay-topic", "create", name}, common...),
		Log: filepath.Join(t.TempDir(), "replayer.log")}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)

	var def *imv1.ReplayDefinition
	waitEvents := func(atLeast int64) int64 {
		t.Helper()
		for {
			if def == nil {
				defs, err := replay.OpenDefinitions(e.brokers, e.prefix)
				if err != nil {
					t.Fatal(err)
				}
				def, _ = defs.Get(ctx, name)
				defs.Close()
			}
			if def != nil {
				if st, err := replay.ReadStatus(ctx, e.brokers, def); err == nil && st.Events() >= atLeast {
					if st.Done() {
						t.Fatalf("the replay finished before the kill (%d events): nothing was tested", st.Events())
					}
					return st.Events()
				}
			}
			if !p.Running() {
				t.Fatalf("replayer exited (%v) before %d events were copied", p.Err(), atLeast)
			}
			select {
			case <-ctx.Done():
				t.Fatalf("fewer than %d events copied in time", atLeast)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	// midTxn waits until the replayer has records of an open transaction
	// in the replay topic (its end is past its last stable offset).
	midTxn := func() {
		t.Helper()
		for {
			ends, err1 := e.adm.ListEndOffsets(ctx, def.GetReplayTopic())
			stable, err2 := e.adm.ListCommittedOffsets(ctx, def.GetReplayTopic())
			open := false
			if err1 == nil && err2 == nil {
				ends.Each(func(o kadm.ListedOffset) {
					if s, ok := stable.Lookup(o.Topic, o.Partition); ok && o.Offset > s.Offset {
						open = true
					}
				})
			}
			if open {
				return
			}
			select {
			case <-ctx.Done():
				t.Fatal("the replayer never had a transaction open")
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	n1 := waitEvents(1500)
	midTxn()
	p.Kill()
	t.Logf("killed the replayer with %d events committed", n1)

	p.Args = append([]string{"replay-topic", "create", name}, common...) // create again: resumes
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	n2 := waitEvents(n1 + 1500)
	midTxn()
	p.Kill()
	t.Logf("killed the replayer again with %d events committed", n2)

	p.Args = append([]string{"replay-topic", "resume", name}, common...)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	if !p.Wait(time.Minute) {
		t.Fatal("the resumed replayer did not finish within a minute")
	}
	if err := p.Err(); err != nil {
		t.Fatalf("resumed replayer: %v", err)
	}
	if !p.LogContains("replay " + name + " complete") {
		t.Fatalf("the replayer did not report completion; see %s", p.Log)
	}
	checkReplay(ctx, t, e.brokers, def, src)
	st, err := replay.ReadStatus(ctx, e.brokers, def)
	if err != nil || !st.Done() {
		t.Fatalf("status after the replay: %+v, %v", st, err)
	}
	committed := int(st.Events()) + len(st.Partitions)
	if all := dataRecords(ctx, t, e.brokers, def.GetReplayTopic()); all <= committed {
		t.Fatalf("the replay topic holds no aborted records (%d data records, %d committed): the kills did not cut a transaction", all, committed)
	} else {
		t.Logf("the kills left %d aborted records behind", all-committed)
	}
}

// TestReplayFilteredRangesHoldExactlyTheRange replays ranges by session,
// sender, offsets (for all partitions and per partition) and time, and
// checks that each replay topic holds exactly the committed events of the
// range. Create is idempotent for the same range and refuses another.
func TestReplayFilteredRangesHoldExactlyTheRange(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	w := e.writer(t)
	sessions := sessionIDs(12)
	// Three blocks of time with gaps between them; a time range from the
	// first gap to the second holds exactly the middle block.
	var gaps [2]int64
	var middle []*kgo.Record
	for i := range 3 {
		if i > 0 {
			time.Sleep(300 * time.Millisecond)
			gaps[i-1] = time.Now().UnixMilli()
			time.Sleep(300 * time.Millisecond)
		}
		w.write(ctx, sessions, 20, 50)
	}
	src := readCommitted(ctx, t, e.brokers, e.topics.Sequenced)
	for _, rs := range src {
		for _, r := range rs {
			if ms := r.Timestamp.UnixMilli(); ms >= gaps[0] && ms < gaps[1] {
				middle = append(middle, r)
			}
		}
	}
	if len(middle) != len(sessions)*20 {
		t.Fatalf("the middle block has %d events, want %d", len(middle), len(sessions)*20)
	}
	inTime := func(r *kgo.Record) bool { ms := r.Timestamp.UnixMilli(); return ms >= gaps[0] && ms < gaps[1] }
	sender := func(r *kgo.Record) string {
		var ev imv1.SequencedEvent
		if err := proto.Unmarshal(r.Value, &ev); err != nil {
			t.Fatal(err)
		}
		return ev.GetSenderUserId()
	}

	for _, tc := range []struct {
		name string
		req  func(*imv1.ReplayRequest)
		keep func(*kgo.Record) bool
	}{
		{"sessions", func(q *imv1.ReplayRequest) { q.SessionIds = []string{"s03", "s07", "nobody"} },
			func(r *kgo.Record) bool { return string(r.Key) == "s03" || string(r.Key) == "s07" }},
		{"senders", func(q *imv1.ReplayRequest) { q.SenderUserIds = []string{"u1"} },
			func(r *kgo.Record) bool { return sender(r) == "u1" }},
		{"offsets", func(q *imv1.ReplayRequest) { q.FromOffset, q.ToOffset = 30, 120 },
			func(r *kgo.Record) bool { return r.Offset >= 30 && r.Offset < 120 }},
		{"partition-offsets", func(q *imv1.ReplayRequest) {
			q.PartitionRanges = []*imv1.ReplayRange{{Partition: 1, FromOffset: 10, ToOffset: 60}, {Partition: 3, FromOffset: 25, ToOffset: -1}}
		}, func(r *kgo.Record) bool {
			return r.Partition == 1 && r.Offset >= 10 && r.Offset < 60 || r.Partition == 3 && r.Offset >= 25
		}},
		{"time", func(q *imv1.ReplayRequest) { q.FromTsMs, q.ToTsMs = gaps[0], gaps[1] }, inTime},
		{"time-and-session", func(q *imv1.ReplayRequest) { q.FromTsMs, q.ToTsMs, q.SessionIds = gaps[0], gaps[1], []string{"s05"} },
			func(r *kgo.Record) bool { return inTime(r) && string(r.Key) == "s05" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := replay.NewRequest()
			tc.req(req)
			defs, err := replay.OpenDefinitions(e.brokers, e.prefix)
			if err != nil {
				t.Fatal(err)
			}
			defer defs.Close()
			spec := replay.CreateSpec{Name: tc.name, Source: e.topics.Sequenced, Request: req, Retention: time.Hour}
			def, err := defs.Create(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			r, err := replay.New(replay.Config{Brokers: e.brokers, Prefix: e.prefix, Name: tc.name})
			if err != nil {
				t.Fatal(err)
			}
			st, err := r.Run(ctx)
			if err != nil {
				t.Fatal(err)
			}
			want := selectRecords(src, tc.keep)
			n := 0
			for _, rs := range want {
				n += len(rs)
			}
			if n == 0 || st.Events() != int64(n) || !st.Done() {
				t.Fatalf("replayed %d events (done %v), the range holds %d", st.Events(), st.Done(), n)
			}
			checkReplay(ctx, t, e.brokers, def, want)

			// The same request again: the same definition, nothing copied twice.
			again, err := defs.Create(ctx, spec)
			if err != nil || !proto.Equal(again, def) {
				t.Fatalf("create again: %v, %v; want the first definition", again, err)
			}
			if _, err := r.Run(ctx); err != nil {
				t.Fatal(err)
			}
			checkReplay(ctx, t, e.brokers, def, want)
			other := replay.NewRequest()
			other.SessionIds = []string{"s00"}
			var mis *replay.DefinitionMismatchError
			if _, err := defs.Create(ctx, replay.CreateSpec{Name: tc.name, Source: e.topics.Sequenced, Request: other}); !errors.As(err, &mis) {
				t.Fatalf("create with another range: %v, want a DefinitionMismatchError", err)
			}
		})
	}
}
