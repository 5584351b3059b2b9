package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/testkit/proc"
	"github.com/seqflow/seqflow/schemas"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// TestSequencesEachMessageOnce: retries collapse to one seq (G3), seqs are
// unique and increasing (G1, G2), order is kept (G4), nothing is lost and
// bad input is dead-lettered with a reason while the partition moves on (G5).
func TestSequencesEachMessageOnce(t *testing.T) {
	h := newHarness(t, 4)
	h.start("a")
	ctx := context.Background()

	// Bad input first, so good records behind it prove the partition moved on.
	bad := map[imv1.ErrorCode]int{}
	h.sendRaw(ctx, h.session(0), []byte("\xff\xfe not a protobuf"))
	bad[imv1.ErrorCode_ERROR_CODE_UNDECODABLE]++
	missing, _ := proto.Marshal(&imv1.Uplink{SessionId: h.session(1), SenderUserId: "u",
		Command: &imv1.Uplink_Message{Message: &imv1.MessageContent{Type: "text"}}})
	h.sendRaw(ctx, h.session(1), missing)
	bad[imv1.ErrorCode_ERROR_CODE_MISSING_FIELD]++
	h.sendRaw(ctx, "some-other-key", uplinkValue(h.session(2), "wrong-key", "x"))
	bad[imv1.ErrorCode_ERROR_CODE_INVALID_FIELD]++
	h.sendRaw(ctx, h.session(3), uplinkValue(h.session(3), "huge", strings.Repeat("x", 70_000)))
	bad[imv1.ErrorCode_ERROR_CODE_TOO_LARGE]++

	const sessions, perSession = 12, 25
	retries := 0
	for i := 0; i < perSession; i++ {
		for s := 0; s < sessions; s++ {
			id := fmt.Sprintf("m-%d", i)
			if err := h.send(ctx, h.session(s), id); err != nil {
				t.Fatal(err)
			}
			if i%5 == 0 { // a retry of the same client message
				if err := h.send(ctx, h.session(s), id); err != nil {
					t.Fatal(err)
				}
				retries++
			}
		}
	}
	l, r := h.settle(60 * time.Second)
	requireOK(t, r)
	if r.Events != sessions*perSession {
		t.Errorf("events = %d, want %d", r.Events, sessions*perSession)
	}
	if r.Duplicates != retries {
		t.Errorf("duplicate ACKs = %d, want one per retry (%d)", r.Duplicates, retries)
	}
	gotBad := map[imv1.ErrorCode]int{}
	for _, d := range l.DeadLetters {
		gotBad[d.Code]++
		if d.Reason == "" || d.OriginalTopic != h.topics.Uplink || d.Service != "sequencer" {
			t.Errorf("dead letter lacks reason or origin: %+v", d)
		}
	}
	for code, n := range bad {
		if gotBad[code] != n {
			t.Errorf("dead letters with %s = %d, want %d (all: %v)", code, gotBad[code], n, gotBad)
		}
	}
	// Without restarts there is no gap at all: seqs are 1..perSession.
	for _, ev := range l.Events {
		if ev.Seq > perSession {
			t.Fatalf("seq %d > %d without any restart: a gap appeared", ev.Seq, perSession)
		}
	}
}

// TestPartitionMovesAwayAndBack moves partitions A→B→A while messages flow
// and proves no seq is reused and none goes backwards: A dropped its
// segments when the partitions left (giving the unused tails back), and
// renewed when they came back.
func TestPartitionMovesAwayAndBack(t *testing.T) {
	h := newHarness(t, 4)
	a := h.start("a")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sessions := h.spread(4) // traffic on every partition, so each one moved is rebuilt
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return h.producer(gctx, sessions, 0.1, 2*time.Millisecond) })

	waitPartitions(t, a, "dedup window rebuilt", int(h.partitions), 60*time.Second)
	assigned := strings.Count(readLog(t, a), `"partition assigned"`)
	b := h.start("b") // A→B: half the partitions move
	waitLog(t, b, "dedup window rebuilt", 60*time.Second)
	time.Sleep(2 * time.Second)
	b.Stop(20 * time.Second) // B→A: they come back
	deadline := time.Now().Add(60 * time.Second)
	for strings.Count(readLog(t, a), `"partition assigned"`) == assigned {
		if time.Now().After(deadline) {
			t.Fatal("A never got the partitions back")
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(4 * time.Second)
	cancel()
	if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	_, r := h.settle(60 * time.Second)
	requireOK(t, r)

	// A owned every partition before B came; each one B took, A rebuilt
	// again when it came back.
	rebuilt := loggedPartitions(t, a, "dedup window rebuilt")
	moved := loggedPartitions(t, b, "partition assigned")
	if len(moved) == 0 {
		t.Fatal("B was assigned no partition")
	}
	for p := range moved {
		if rebuilt[p] < 2 {
			t.Errorf("A rebuilt partition %d %d time(s); it went to B and came back, so want 2", p, rebuilt[p])
		}
	}
}

// waitPartitions waits until p has logged msg for n distinct partitions.
func waitPartitions(t *testing.T, p *proc.Proc, msg string, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for len(loggedPartitions(t, p, msg)) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%s logged %q for %d partitions in %s, want %d", p, msg, len(loggedPartitions(t, p, msg)), timeout, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stopInOpenTransaction stops p (SIGSTOP) at a moment its transactional
// ID txnID has a transaction open with records in it, trying again a
// little later when the stop landed between two transactions. It returns
// when p was stopped.
func (h *harness) stopInOpenTransaction(t *testing.T, p *proc.Proc, txnID string) time.Time {
	t.Helper()
	adm := kadm.NewClient(h.cl)
	for try := 0; try < 20; try++ {
		at := time.Now()
		p.Signal(syscall.SIGSTOP)
		if txn := h.describeTxn(t, adm, txnID); txn.State == "Ongoing" && len(txn.Topics) > 0 {
			return at
		}
		p.Signal(syscall.SIGCONT)
		time.Sleep(300 * time.Millisecond)
	}
	t.Fatalf("%s: no stop in 20 landed inside an open transaction of %s", p, txnID)
	return time.Time{}
}

func (h *harness) describeTxn(t *testing.T, adm *kadm.Client, txnID string) kadm.DescribedTransaction {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := adm.DescribeTransactions(ctx, txnID)
	if err != nil {
		t.Fatalf("describe transaction %s: %v", txnID, err)
	}
	txn, ok := d[txnID]
	if !ok || txn.Err != nil {
		t.Fatalf("transaction %s not described (%v): %+v", txnID, txn.Err, d)
	}
	return txn
}

// loggedPartitions counts, per partition, the lines of p's log with
// message msg.
func loggedPartitions(t *testing.T, p *proc.Proc, msg string) map[int32]int {
	t.Helper()
	n := map[int32]int{}
	for _, line := range strings.Split(readLog(t, p), "\n") {
		var e struct {
			Msg       string `json:"msg"`
			Partition *int32 `json:"partition"`
		}
		if json.Unmarshal([]byte(line), &e) == nil && e.Msg == msg && e.Partition != nil {
			n[*e.Partition]++
		}
	}
	return n
}

// TestPausedInstanceIsFenced stops an instance mid-transaction (SIGSTOP)
// for longer than the session timeout, lets its partitions move, then lets
// it continue: what it had produced must never become committed, and the
// log keeps every guarantee.
func TestPausedInstanceIsFenced(t *testing.T) {
	h := newHarness(t, 4)
	// A lingers 1 s between producing a batch and committing it, so a stop
	// lands inside an open transaction.
	a := h.start("a", "SEQUENCER_DEBUG_COMMIT_DELAY=1s")
	b := h.start("b")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sessions := h.spread(4) // traffic on every partition: both instances rebuild one
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return h.producer(gctx, sessions, 0.1, 2*time.Millisecond) })
	waitLog(t, a, "dedup window rebuilt", 30*time.Second)
	waitLog(t, b, "dedup window rebuilt", 30*time.Second)
	time.Sleep(2 * time.Second) // both own partitions and commit
	stoppedAt := h.stopInOpenTransaction(t, a, "seqflow-sequencer-"+h.group+"-a")
	time.Sleep(12 * time.Second) // > session timeout: B takes A's partitions
	a.Signal(syscall.SIGCONT)
	time.Sleep(6 * time.Second)
	// A, back in the group, sequences at most one step per second (its
	// commit delay): stop it so B drains the backlog at full speed, or the
	// settle below times out on partitions A took back.
	a.Stop(20 * time.Second)
	cancel()
	if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	_, r := h.settle(90 * time.Second)
	requireOK(t, r)
	if !b.LogContains("partition assigned") {
		t.Fatal("B never got partitions")
	}

	// The records A had in flight when it stopped exist in the log but
	// were aborted: read uncommitted sees them, read committed does not.
	aID := h.group + "-a"
	committed := instanceRecords(t, h, kgo.ReadCommitted(), aID)
	all := instanceRecords(t, h, kgo.ReadUncommitted(), aID)
	aborted := 0
	for k, ts := range all {
		if _, ok := committed[k]; !ok && ts < stoppedAt.UnixMilli() && ts > stoppedAt.Add(-3*time.Second).UnixMilli() {
			aborted++
		}
	}
	if aborted == 0 {
		t.Fatalf("no record of the paused instance's open transaction was found aborted (A wrote %d, %d committed)", len(all), len(committed))
	}
	t.Logf("paused instance: %d records in its open transaction, all aborted", aborted)
}

// TestOrderlyStopEndsItsTransaction stops an instance (SIGTERM) while its
// transaction is open. The batch in flight must be ended before the
// process exits: left open, it would hold back the last stable offset of
// its partitions, and with it every read_committed reader (the next
// owner's dedup-window rebuild, the persister, the pusher), until the
// transaction timeout.
func TestOrderlyStopEndsItsTransaction(t *testing.T) {
	h := newHarness(t, 2)
	// A lingers 1 s between producing a batch and committing it, so the
	// stop lands inside an open transaction; the long transaction timeout
	// keeps one left open visible as Ongoing.
	a := h.start("a", "SEQUENCER_DEBUG_COMMIT_DELAY=1s", "SEQUENCER_TXN_TIMEOUT=60s")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return h.producer(gctx, h.spread(4), 0.1, 2*time.Millisecond) })
	waitLog(t, a, "dedup window rebuilt", 30*time.Second)
	time.Sleep(time.Second)
	txnID := "seqflow-sequencer-" + h.group + "-a"
	// The stop signal is sent while A is held inside an open transaction,
	// and handled when A continues.
	h.stopInOpenTransaction(t, a, txnID)
	a.Signal(syscall.SIGTERM)
	a.Signal(syscall.SIGCONT)
	if !a.Wait(20 * time.Second) {
		t.Fatalf("%s did not exit within 20s of SIGTERM", a)
	}
	txn := h.describeTxn(t, kadm.NewClient(h.cl), txnID)
	t.Logf("after the stop, transaction %s is %s", txnID, txn.State)
	if txn.State == "Ongoing" {
		t.Errorf("the stopped instance left its transaction open (Ongoing, started %s ago)",
			time.Since(time.UnixMilli(txn.StartTimestamp)).Round(time.Millisecond))
	}
	if !strings.Contains(readLog(t, a), "stopped with its last batch ended") {
		t.Errorf("A did not log that it ended its last batch")
	}

	// Another instance takes over; nothing acknowledged is lost.
	h.start("b")
	time.Sleep(2 * time.Second)
	cancel()
	if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	_, r := h.settle(60 * time.Second)
	requireOK(t, r)
}

// TestChaos runs three sequencers under load from producers that retry,
// kills -9, pauses and restarts them and forces rebalances, then checks
// G1–G5 over the whole committed log.
func TestChaos(t *testing.T) {
	h := newHarness(t, 6)
	procs := []*proc.Proc{h.start("s0"), h.start("s1"), h.start("s2")}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	for p := 0; p < 4; p++ {
		var sessions []string
		for i := 0; i < 10; i++ {
			sessions = append(sessions, h.session(p*10+i))
		}
		g.Go(func() error { return h.producer(gctx, sessions, 0.15, time.Millisecond) })
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("chaos seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	faults := map[string]int{}
	for round := 0; round < 9; round++ {
		time.Sleep(3 * time.Second)
		p := procs[rng.IntN(len(procs))]
		switch rng.IntN(3) {
		case 0:
			faults["kill9"]++
			p.Kill()
			time.Sleep(time.Second)
			if err := p.Restart(); err != nil {
				t.Error(err)
			}
		case 1:
			faults["pause"]++
			p.Signal(syscall.SIGSTOP)
			time.Sleep(8 * time.Second)
			p.Signal(syscall.SIGCONT)
		case 2:
			faults["graceful_restart"]++
			p.Stop(20 * time.Second)
			if err := p.Restart(); err != nil {
				t.Error(err)
			}
		}
	}
	time.Sleep(3 * time.Second)
	cancel()
	if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	_, r := h.settle(120 * time.Second)
	t.Logf("faults injected: %v; distinct messages sent: %d", faults, h.distinctSent())
	requireOK(t, r)
	if r.Events != h.distinctSent() {
		t.Fatalf("events = %d, distinct messages sent = %d", r.Events, h.distinctSent())
	}
}

func readLog(t *testing.T, p *proc.Proc) string {
	t.Helper()
	b, err := os.ReadFile(p.Log)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func waitLog(t *testing.T, p *proc.Proc, s string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !p.LogContains(s) {
		if time.Now().After(deadline) {
			t.Fatalf("%s never logged %q", p, s)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// instanceRecords reads the sequenced topic to its end at the given
// isolation level and returns the records written by instance, keyed by
// partition/offset, with their server timestamps.
func instanceRecords(t *testing.T, h *harness, iso kgo.IsolationLevel, instance string) map[string]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	adm := kadm.NewClient(h.cl)
	list := adm.ListEndOffsets
	if iso == kgo.ReadCommitted() {
		list = adm.ListCommittedOffsets
	}
	ends, err := list(ctx, h.topics.Sequenced)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32]int64{}
	starts := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
			starts[o.Partition] = kgo.NewOffset().AtStart()
		}
	})
	cl, err := kgo.NewClient(append(eventlog.ClientOpts(h.st.KafkaBrokers, "seq-test-reader"),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{h.topics.Sequenced: starts}),
		kgo.FetchIsolationLevel(iso), kgo.KeepControlRecords())...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	out := map[string]int64{}
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("read %s: %v", h.topics.Sequenced, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if !r.Attrs.IsControl() && eventlog.Header(r, schemas.HeaderInstance) == instance {
				out[fmt.Sprintf("%d/%d", r.Partition, r.Offset)] = r.Timestamp.UnixMilli()
			}
			if end, ok := want[r.Partition]; ok && r.Offset >= end-1 {
				delete(want, r.Partition)
			}
		})
	}
	return out
}
