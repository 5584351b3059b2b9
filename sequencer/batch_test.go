package main

import (
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/dedup"
	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/groups"
	"github.com/seqflow/seqflow/internal/msgid"
	"github.com/seqflow/seqflow/internal/segment"
	"github.com/seqflow/seqflow/schemas"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// These tests and benchmarks run a batch's in-memory steps (classify,
// assign, commit) on records built here: no Kafka, no PostgreSQL.

// testUplink is an uplink of a text message, or of what cmd makes it.
func testUplink(session, clientMsgID, body string, cmd func(*imv1.Uplink)) []byte {
	u := &imv1.Uplink{SessionId: session, ClientMsgId: clientMsgID, SenderUserId: "u1", SenderDeviceId: "d1",
		GatewayId: "gw", GatewayTsMs: 1, Command: &imv1.Uplink_Message{Message: &imv1.MessageContent{Type: "text", Body: []byte(body)}}}
	if cmd != nil {
		cmd(u)
	}
	v, _ := proto.Marshal(u)
	return v
}

// testPart returns a partition batch of recs whose book holds plenty of
// seqs for every session named.
func testPart(t testing.TB, recs []*kgo.Record, sessions []string) *partBatch {
	t.Helper()
	book := segment.NewBook(1_000_000, 0)
	for _, s := range sessions {
		if err := book.Add([]segment.Grant{{SessionID: s, Range: segment.Range{Lo: 1, Hi: 1_000_000}}}); err != nil {
			t.Fatal(err)
		}
	}
	pb := &partBatch{p: 3, st: &partState{book: book, window: dedup.NewWindow(time.Hour, 0), groups: groups.NewPartition(0)}, demand: map[string]int{},
		items: make([]item, len(recs))}
	for i, r := range recs {
		pb.items[i] = item{rec: r, first: -1}
	}
	return pb
}

func testGen(t testing.TB) *msgid.Generator {
	t.Helper()
	g, err := msgid.NewGenerator(1, nil, time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	g.SetValidUntil(time.Now().Add(time.Hour).UnixMilli())
	return g
}

// TestAssignBuildsEvents checks every output record of a batch: in uplink
// order, each with its own value decoding to its own event, the seqs of a
// session in order, a retry within the batch answered with the first
// copy's seq, and the headers eventlog.Headers gives plus the instance.
func TestAssignBuildsEvents(t *testing.T) {
	topics := eventlog.Names("t.")
	tp := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	type in struct {
		session, id string
		cmd         func(*imv1.Uplink)
		traceparent string
	}
	ins := []in{
		{"s1", "a", nil, tp},
		{"s2", "b", nil, ""},
		{"s1", "c", func(u *imv1.Uplink) {
			u.Command = &imv1.Uplink_Edit{Edit: &imv1.Edit{TargetSeq: 1, Content: &imv1.MessageContent{Type: "text", Body: []byte("e")}}}
		}, ""},
		{"s1", "a", nil, tp}, // retry of the first
		{"s2", "d", func(u *imv1.Uplink) { u.Command = &imv1.Uplink_Recall{Recall: &imv1.Recall{TargetSeq: 1}} }, tp},
		{"s3", "e", func(u *imv1.Uplink) {
			u.Command = &imv1.Uplink_SessionCreate{SessionCreate: &imv1.SessionCreate{MemberUserIds: []string{"u2"}}}
		}, ""},
	}
	var recs []*kgo.Record
	for i, x := range ins {
		r := &kgo.Record{Topic: topics.Uplink, Partition: 3, Offset: int64(100 + i), Key: []byte(x.session),
			Value: testUplink(x.session, x.id, strings.Repeat("x", 10*i), x.cmd)}
		if x.traceparent != "" {
			r.Headers = []kgo.RecordHeader{{Key: schemas.HeaderTraceparent, Value: []byte(x.traceparent)}}
		}
		recs = append(recs, r)
	}
	pb := testPart(t, recs, []string{"s1", "s2", "s3"})
	pb.classify(1<<20, 5000)
	instance := kgo.RecordHeader{Key: schemas.HeaderInstance, Value: []byte("seq-test")}
	if err := pb.assign(topics, instance, testGen(t), 5000); err != nil {
		t.Fatal(err)
	}
	if len(pb.out) != len(ins) {
		t.Fatalf("got %d output records, want %d", len(pb.out), len(ins))
	}
	wantSeq := []int64{1, 1, 2, 0, 2, 1}
	wantType := []string{"message", "message", "edit", "duplicate", "recall", "session_create"}
	for i, r := range pb.out {
		x := ins[i]
		t.Run(fmt.Sprintf("%d-%s-%s", i, x.session, x.id), func(t *testing.T) {
			if string(r.Key) != x.session {
				t.Fatalf("key %q, want %q", r.Key, x.session)
			}
			if wantType[i] == "duplicate" {
				var d imv1.DuplicateAck
				if err := proto.Unmarshal(r.Value, &d); err != nil {
					t.Fatal(err)
				}
				if r.Topic != topics.Duplicates || d.Seq != 1 || d.ClientMsgId != x.id || d.MsgId != pb.items[0].entry.MsgID {
					t.Fatalf("duplicate ack %v on %s, want seq 1 and msg_id %d of the first copy", &d, r.Topic, pb.items[0].entry.MsgID)
				}
				return
			}
			var ev imv1.SequencedEvent
			if err := proto.Unmarshal(r.Value, &ev); err != nil {
				t.Fatal(err)
			}
			if r.Topic != topics.Sequenced || r.Partition != 3 {
				t.Fatalf("topic %s partition %d", r.Topic, r.Partition)
			}
			if ev.SessionId != x.session || ev.ClientMsgId != x.id || ev.Seq != wantSeq[i] || ev.UplinkOffset != int64(100+i) {
				t.Fatalf("event %v, want session %s client_msg_id %s seq %d offset %d", &ev, x.session, x.id, wantSeq[i], 100+i)
			}
			if ev.MsgId != pb.items[i].entry.MsgID || ev.MsgId == 0 {
				t.Fatalf("msg_id %d, item got %d", ev.MsgId, pb.items[i].entry.MsgID)
			}
			want := append(eventlog.Headers(wantType[i], "seqflow.im.v1.SequencedEvent", service, x.traceparent), instance)
			if !slices.EqualFunc(r.Headers, want, func(a, b kgo.RecordHeader) bool { return a.Key == b.Key && string(a.Value) == string(b.Value) }) {
				t.Fatalf("headers %v, want %v", r.Headers, want)
			}
		})
	}
}

// BenchmarkBatch_1000 is the CPU a batch of 1,000 uplinks (1,000 sessions,
// 200-byte bodies) costs the sequencer outside Kafka and PostgreSQL:
// decode and classify, assign seqs and build the events, commit them to
// the dedup window.
func BenchmarkBatch_1000(b *testing.B) {
	const n = 1000
	topics := eventlog.Names("b.")
	sessions := make([]string, n)
	for i := range sessions {
		sessions[i] = fmt.Sprintf("bench-session-%04d", i)
	}
	body := strings.Repeat("x", 200)
	gen := testGen(b)
	instance := kgo.RecordHeader{Key: schemas.HeaderInstance, Value: []byte("seq-bench")}
	book := segment.NewBook(1<<40, 0)
	for _, s := range sessions {
		if err := book.Add([]segment.Grant{{SessionID: s, Range: segment.Range{Lo: 1, Hi: 1 << 40}}}); err != nil {
			b.Fatal(err)
		}
	}
	st := &partState{book: book, window: dedup.NewWindow(24*time.Hour, 2_000_000), groups: groups.NewPartition(0)}
	var cpu time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		recs := make([]*kgo.Record, n)
		for j := range recs {
			recs[j] = &kgo.Record{Topic: topics.Uplink, Offset: int64(i*n + j), Key: []byte(sessions[j]),
				Value: testUplink(sessions[j], fmt.Sprintf("m-%d-%d", i, j), body, nil)}
		}
		pb := &partBatch{st: st, demand: map[string]int{}, items: make([]item, n)}
		for j, r := range recs {
			pb.items[j] = item{rec: r, first: -1}
		}
		nowMs := time.Now().UnixMilli()
		cpu0 := processCPU(b)
		b.StartTimer()
		pb.classify(1<<20, nowMs)
		if err := pb.assign(topics, instance, gen, nowMs); err != nil {
			b.Fatal(err)
		}
		st.book.Commit()
		for j := range pb.items {
			it := &pb.items[j]
			st.window.Put(it.up.SessionId, it.up.SenderUserId, it.up.ClientMsgId, it.entry, nowMs)
		}
		b.StopTimer()
		cpu += processCPU(b) - cpu0
		b.StartTimer()
	}
	// CPU time, unlike ns/op, hardly moves with what else runs on the box.
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// processCPU is the user and system CPU time this process used so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// A batch whose prepare failed is nil, and one whose partitions never took
// seqs has no book to rewind: aborting either must not panic (chaos:short
// found both sequencers dead of a nil dereference here after PostgreSQL
// restarted while a partition's state was being built).
func TestRewindOfAFailedBatch(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    *batch
	}{
		{"prepare failed", nil},
		{"state not built", &batch{parts: []*partBatch{{p: 3}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("rewind panicked: %v", r)
				}
			}()
			tc.b.rewind()
		})
	}
}
