// Package deliverytest is the conformance suite every delivery transport
// must pass, in the style of watermill's pubsub tests: one function, run by
// each implementation's test against the real infrastructure it uses.
package deliverytest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/delivery"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// Transport is one implementation under test: a sender and a receiver that
// reach each other. The constructor registers its own cleanup.
type Transport struct {
	Sender   delivery.Sender
	Receiver delivery.Receiver
	// MaxFrameBytes is the sender's frame limit (batches above it are split;
	// a single item above it is ErrTooLarge).
	MaxFrameBytes int
}

// waitFor bounds every wait of the suite; nothing in it should come close.
const waitFor = 10 * time.Second

// Run runs the suite against transports made by newTransport, one per case.
func Run(t *testing.T, newTransport func(t *testing.T) Transport) {
	cases := []struct {
		name string
		fn   func(t *testing.T, tr Transport)
	}{
		{"DeliversBatchIntact", testDeliversIntact},
		{"OnlyAddressedGateway", testOnlyAddressed},
		{"KeepsOrder", testKeepsOrder},
		{"ConcurrentSenders", testConcurrentSenders},
		{"SplitsLargeBatch", testSplitsLarge},
		{"RejectsOversizedItem", testOversizedItem},
		{"NoReceiver", testNoReceiver},
		{"ReceiverGone", testReceiverGone},
		{"StuckReceiverDoesNotBlockSend", testStuckReceiver},
		{"ReceiverRestarts", testReceiverRestarts},
		{"ReceiveEndsWithContext", testReceiveEnds},
		{"SendAfterClose", testSendAfterClose},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.fn(t, newTransport(t)) })
	}
}

// recorder is a test gateway: it collects the items it receives, ignoring
// readiness probes.
type recorder struct {
	mu      sync.Mutex
	items   []*imv1.PushItem
	batches int
	probes  int
	changed chan struct{}
}

func newRecorder() *recorder { return &recorder{changed: make(chan struct{}, 1)} }

func (r *recorder) handle(b *imv1.PushBatch) {
	r.mu.Lock()
	for _, it := range b.Items {
		if strings.HasPrefix(it.GetDuplicate().GetClientMsgId(), "probe:") {
			r.probes++
			continue
		}
		r.items = append(r.items, it)
	}
	if len(b.Items) > 0 && !strings.HasPrefix(b.Items[0].GetDuplicate().GetClientMsgId(), "probe:") {
		r.batches++
	}
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// wait blocks until cond holds over the received items.
func (r *recorder) wait(t *testing.T, what string, cond func(items []*imv1.PushItem, probes int) bool) []*imv1.PushItem {
	t.Helper()
	deadline := time.After(waitFor)
	for {
		r.mu.Lock()
		items, probes := append([]*imv1.PushItem(nil), r.items...), r.probes
		r.mu.Unlock()
		if cond(items, probes) {
			return items
		}
		select {
		case <-r.changed:
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			t.Fatalf("timed out waiting for %s; have %d items", what, len(items))
		}
	}
}

// receiving runs tr.Receiver for gatewayID until the returned stop is
// called or the test ends, and waits until it demonstrably receives.
func receiving(t *testing.T, tr Transport, gatewayID string, rec *recorder) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- tr.Receiver.Receive(ctx, gatewayID, rec.handle) }()
	var once sync.Once
	var result error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case result = <-errc:
			case <-time.After(waitFor):
				result = errors.New("Receive did not return after its context ended")
			}
		})
		return result
	}
	t.Cleanup(func() { _ = stop() })
	deadline := time.Now().Add(waitFor)
	for i := 0; ; i++ {
		sctx, scancel := context.WithTimeout(context.Background(), time.Second)
		_ = tr.Sender.Send(sctx, probe(gatewayID, i))
		scancel()
		got := false
		for j := 0; j < 10 && !got; j++ {
			rec.mu.Lock()
			got = rec.probes > 0
			rec.mu.Unlock()
			if !got {
				time.Sleep(10 * time.Millisecond)
			}
		}
		if got {
			return stop
		}
		select {
		case err := <-errc:
			t.Fatalf("Receive(%s) returned before receiving: %v", gatewayID, err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("receiver for %s never became ready", gatewayID)
		}
	}
}

func probe(gatewayID string, i int) *imv1.PushBatch {
	return &imv1.PushBatch{GatewayId: gatewayID, Items: []*imv1.PushItem{{
		Item: &imv1.PushItem_Duplicate{Duplicate: &imv1.DuplicateAck{ClientMsgId: fmt.Sprintf("probe:%d", i)}},
	}}}
}

func gatewayID() string { return "gw-" + uuid.NewString()[:8] }

// event is a message item numbered n for one recipient.
func event(session string, n int64, body []byte) *imv1.PushItem {
	return &imv1.PushItem{
		Recipients: []*imv1.Recipient{{UserId: "u1", DeviceId: "d1", ConnId: "c1"}},
		Item: &imv1.PushItem_Event{Event: &imv1.SequencedEvent{
			SessionId: session, Seq: n, MsgId: 1000 + n, SenderUserId: "u2", ServerTsMs: 1,
			Payload: &imv1.SequencedEvent_Message{Message: &imv1.MessageContent{Type: "text", Body: body}},
		}},
	}
}

func send(t *testing.T, tr Transport, b *imv1.PushBatch) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := tr.Sender.Send(ctx, b); err != nil {
		t.Fatalf("Send to %s: %v", b.GatewayId, err)
	}
}

func seqs(items []*imv1.PushItem) []int64 {
	out := make([]int64, len(items))
	for i, it := range items {
		out[i] = it.GetEvent().GetSeq()
	}
	return out
}

func testDeliversIntact(t *testing.T, tr Transport) {
	gw := gatewayID()
	rec := newRecorder()
	receiving(t, tr, gw, rec)
	want := &imv1.PushBatch{GatewayId: gw, SentTsMs: 42, Items: []*imv1.PushItem{
		event("s1", 7, []byte("héllo")),
		{
			Recipients: []*imv1.Recipient{{UserId: "u2", DeviceId: "d9", ConnId: "c9"}, {UserId: "u2", DeviceId: "d8", ConnId: "c8"}},
			Item: &imv1.PushItem_Duplicate{Duplicate: &imv1.DuplicateAck{
				SessionId: "s1", ClientMsgId: "cm-1", Seq: 7, MsgId: 1007, SenderUserId: "u2", GatewayId: gw,
			}},
		},
	}}
	send(t, tr, want)
	got := rec.wait(t, "the batch", func(items []*imv1.PushItem, _ int) bool { return len(items) >= 2 })
	if len(got) != 2 || !proto.Equal(got[0], want.Items[0]) || !proto.Equal(got[1], want.Items[1]) {
		t.Fatalf("received %v, want %v", got, want.Items)
	}
}

func testOnlyAddressed(t *testing.T, tr Transport) {
	a, b := gatewayID(), gatewayID()
	ra, rb := newRecorder(), newRecorder()
	receiving(t, tr, a, ra)
	receiving(t, tr, b, rb)
	send(t, tr, &imv1.PushBatch{GatewayId: a, Items: []*imv1.PushItem{event("s", 1, nil)}})
	send(t, tr, &imv1.PushBatch{GatewayId: b, Items: []*imv1.PushItem{event("s", 2, nil)}})
	ra.wait(t, "gateway a's item", func(items []*imv1.PushItem, _ int) bool { return len(items) >= 1 })
	rb.wait(t, "gateway b's item", func(items []*imv1.PushItem, _ int) bool { return len(items) >= 1 })
	send(t, tr, &imv1.PushBatch{GatewayId: b, Items: []*imv1.PushItem{event("s", 3, nil)}})
	got := rb.wait(t, "gateway b's marker", func(items []*imv1.PushItem, _ int) bool { return len(items) >= 2 })
	if s := seqs(got); len(s) != 2 || s[0] != 2 || s[1] != 3 {
		t.Fatalf("gateway b received seqs %v, want [2 3]", s)
	}
	if s := seqs(ra.wait(t, "a", func([]*imv1.PushItem, int) bool { return true })); len(s) != 1 || s[0] != 1 {
		t.Fatalf("gateway a received seqs %v, want [1]", s)
	}
}

func testKeepsOrder(t *testing.T, tr Transport) {
	gw := gatewayID()
	rec := newRecorder()
	receiving(t, tr, gw, rec)
	const n = 300
	for i := int64(1); i <= n; i++ {
		send(t, tr, &imv1.PushBatch{GatewayId: gw, Items: []*imv1.PushItem{event("s", i, nil)}})
	}
	got := rec.wait(t, "every batch", func(items []*imv1.PushItem, _ int) bool { return len(items) >= n })
	for i, s := range seqs(got) {
		if s != int64(i+1) {
			t.Fatalf("item %d has seq %d: order not kept (%v...)", i, s, seqs(got)[:min(len(got), 20)])
		}
	}
}

func testConcurrentSenders(t *testing.T, tr Transport) {
	const senders, perSender, gateways = 8, 40, 3
	gws := make([]string, gateways)
	recs := make([]*recorder, gateways)
	for i := range gws {
		gws[i], recs[i] = gatewayID(), newRecorder()
		receiving(t, tr, gws[i], recs[i])
	}
	var wg sync.WaitGroup
	errs := make(chan error, senders*perSender*gateways)
	for s := range senders {
		wg.Go(func() {
			for i := range perSender {
				for _, gw := range gws {
					ctx, cancel := context.WithTimeout(context.Background(), waitFor)
					err := tr.Sender.Send(ctx, &imv1.PushBatch{GatewayId: gw, Items: []*imv1.PushItem{event(fmt.Sprint("sender-", s), int64(i+1), nil)}})
					cancel()
					if err != nil {
						errs <- err
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent Send: %v", err)
	}
	for g, rec := range recs {
		got := rec.wait(t, "every batch", func(items []*imv1.PushItem, _ int) bool { return len(items) >= senders*perSender })
		last := map[string]int64{}
		for _, it := range got {
			ev := it.GetEvent()
			if ev.Seq != last[ev.SessionId]+1 {
				t.Fatalf("gateway %d: %s seq %d after %d: one sender's order not kept", g, ev.SessionId, ev.Seq, last[ev.SessionId])
			}
			last[ev.SessionId] = ev.Seq
		}
		if len(got) != senders*perSender {
			t.Fatalf("gateway %d received %d items, want %d", g, len(got), senders*perSender)
		}
	}
}

func testSplitsLarge(t *testing.T, tr Transport) {
	gw := gatewayID()
	rec := newRecorder()
	receiving(t, tr, gw, rec)
	body := []byte(strings.Repeat("x", 1024))
	n := 3*tr.MaxFrameBytes/len(body) + 10
	b := &imv1.PushBatch{GatewayId: gw}
	for i := 1; i <= n; i++ {
		b.Items = append(b.Items, event("s", int64(i), body))
	}
	send(t, tr, b)
	got := rec.wait(t, "every item of the large batch", func(items []*imv1.PushItem, _ int) bool { return len(items) >= n })
	for i, s := range seqs(got) {
		if s != int64(i+1) {
			t.Fatalf("item %d has seq %d after splitting", i, s)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.batches < 4 {
		t.Fatalf("a %d-byte batch arrived in %d frames; frames must stay under %d bytes", n*len(body), rec.batches, tr.MaxFrameBytes)
	}
}

func testOversizedItem(t *testing.T, tr Transport) {
	gw := gatewayID()
	rec := newRecorder()
	receiving(t, tr, gw, rec)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	err := tr.Sender.Send(ctx, &imv1.PushBatch{GatewayId: gw, Items: []*imv1.PushItem{event("s", 1, make([]byte, tr.MaxFrameBytes+1))}})
	if !errors.Is(err, delivery.ErrTooLarge) || delivery.DropReason(err) != "too_large" {
		t.Fatalf("Send of an oversized item = %v, want ErrTooLarge", err)
	}
}

func testNoReceiver(t *testing.T, tr Transport) {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	err := tr.Sender.Send(ctx, &imv1.PushBatch{GatewayId: gatewayID(), Items: []*imv1.PushItem{event("s", 1, nil)}})
	if !errors.Is(err, delivery.ErrNoReceiver) || delivery.DropReason(err) != "no_receiver" {
		t.Fatalf("Send to a gateway nobody serves = %v, want ErrNoReceiver", err)
	}
	var se *delivery.SendError
	if !errors.As(err, &se) || se.GatewayID == "" {
		t.Fatalf("error %v is not a *SendError naming the gateway", err)
	}
}

// testReceiverGone: once a gateway stops receiving, Sends to it fail within
// their context instead of hanging, and keep failing.
func testReceiverGone(t *testing.T, tr Transport) {
	gw := gatewayID()
	rec := newRecorder()
	stop := receiving(t, tr, gw, rec)
	if err := stop(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Receive after cancel = %v, want context.Canceled", err)
	}
	failed := false
	for i := 0; i < 100 && !failed; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		done := make(chan error, 1)
		go func() {
			done <- tr.Sender.Send(ctx, &imv1.PushBatch{GatewayId: gw, Items: []*imv1.PushItem{event("s", int64(i), nil)}})
		}()
		select {
		case err := <-done:
			failed = err != nil
		case <-time.After(waitFor):
			t.Fatal("Send to a departed gateway blocked past its context")
		}
		cancel()
		if !failed {
			time.Sleep(50 * time.Millisecond)
		}
	}
	if !failed {
		t.Fatal("Sends to a departed gateway kept succeeding")
	}
}

func testReceiverRestarts(t *testing.T, tr Transport) {
	gw := gatewayID()
	first := newRecorder()
	stop := receiving(t, tr, gw, first)
	send(t, tr, &imv1.PushBatch{GatewayId: gw, Items: []*imv1.PushItem{event("s", 1, nil)}})
	first.wait(t, "the first incarnation's item", func(items []*imv1.PushItem, _ int) bool { return len(items) == 1 })
	_ = stop()
	second := newRecorder()
	receiving(t, tr, gw, second)
	send(t, tr, &imv1.PushBatch{GatewayId: gw, Items: []*imv1.PushItem{event("s", 2, nil)}})
	got := second.wait(t, "the second incarnation's item", func(items []*imv1.PushItem, _ int) bool { return len(items) >= 1 })
	if s := seqs(got); len(s) != 1 || s[0] != 2 {
		t.Fatalf("restarted receiver got seqs %v, want [2]", s)
	}
}

func testReceiveEnds(t *testing.T, tr Transport) {
	stop := receiving(t, tr, gatewayID(), newRecorder())
	if err := stop(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Receive returned %v after its context was canceled, want context.Canceled", err)
	}
}

func testSendAfterClose(t *testing.T, tr Transport) {
	if err := tr.Sender.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	err := tr.Sender.Send(ctx, &imv1.PushBatch{GatewayId: gatewayID(), Items: []*imv1.PushItem{event("s", 1, nil)}})
	if !errors.Is(err, delivery.ErrClosed) {
		t.Fatalf("Send after Close = %v, want ErrClosed", err)
	}
}

// testStuckReceiver: a gateway whose handler stops returning must not make
// Send block past its context, however much is sent to it.
func testStuckReceiver(t *testing.T, tr Transport) {
	gw := gatewayID()
	rec := newRecorder()
	release := make(chan struct{})
	var once sync.Once
	stuck := func(b *imv1.PushBatch) {
		rec.handle(b)
		if len(b.Items) > 0 && !strings.HasPrefix(b.Items[0].GetDuplicate().GetClientMsgId(), "probe:") {
			<-release
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- tr.Receiver.Receive(ctx, gw, stuck) }()
	t.Cleanup(func() {
		once.Do(func() { close(release) })
		cancel()
		<-errc
	})
	deadline := time.Now().Add(waitFor)
	for i := 0; ; i++ {
		sctx, scancel := context.WithTimeout(context.Background(), time.Second)
		_ = tr.Sender.Send(sctx, probe(gw, i))
		scancel()
		rec.mu.Lock()
		ok := rec.probes > 0
		rec.mu.Unlock()
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("receiver never became ready")
		}
		time.Sleep(20 * time.Millisecond)
	}
	body := []byte(strings.Repeat("z", 64<<10))
	const sendTimeout = 200 * time.Millisecond
	for i := range 128 { // 8 MiB in all
		b := &imv1.PushBatch{GatewayId: gw, Items: []*imv1.PushItem{event("s", int64(i+1), body)}}
		sctx, scancel := context.WithTimeout(context.Background(), sendTimeout)
		done := make(chan struct{})
		go func() { _ = tr.Sender.Send(sctx, b); close(done) }()
		select {
		case <-done:
		case <-time.After(sendTimeout + 5*time.Second):
			t.Fatalf("Send %d to a stuck gateway blocked past its context", i)
		}
		scancel()
	}
}
