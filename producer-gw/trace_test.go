package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/config"
	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/schemas"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// TestTracePropagation sends messages through the real pipeline (sequencer,
// persister and pusher as processes, tracing off in them) to a gateway
// whose spans go to an in-process SpanRecorder, and follows the trace: the
// uplink's traceparent is the gateway's send span, the SequencedEvent
// record carries it unchanged, and the gateway's delivery span of the
// pushed event is its child.
func TestTracePropagation(t *testing.T) {
	p := newPipeline(t)
	sr := tracetest.NewSpanRecorder()
	prov := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = prov.Shutdown(context.Background()) })
	gw := startTracedGateway(t, p.env(nil), prov)

	cases := []struct {
		name     string
		clientTP string // the send frame's traceparent, if any
	}{
		{"client gives a traceparent", randomTraceparent()},
		{"client gives none", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p.t = t
			alice, bob := user("alice"), user("bob")
			a := p.connect(gw, alice, "phone")
			b := p.connect(gw, bob, "phone")
			sid, createSeq := createGroup(a, bob)
			b.eventOf(sid, createSeq)
			id := newID()
			f := sendFrame(sid, id, "traced")
			if c.clientTP != "" {
				f["traceparent"] = c.clientTP
			}
			a.send(f)
			ack := a.mustAckOK(id)
			b.eventOf(sid, ack.Seq)

			up := headerOf(t, p, p.topics.Uplink, func(v []byte) bool {
				var u imv1.Uplink
				return proto.Unmarshal(v, &u) == nil && u.ClientMsgId == id
			})
			seqd := headerOf(t, p, p.topics.Sequenced, func(v []byte) bool {
				var e imv1.SequencedEvent
				return proto.Unmarshal(v, &e) == nil && e.ClientMsgId == id && e.SessionId == sid
			})
			if seqd != up {
				t.Fatalf("sequenced event traceparent %q, want the uplink's %q unchanged", seqd, up)
			}
			upTrace, upSpan := splitTraceparent(t, up)
			if c.clientTP != "" {
				if want, _ := splitTraceparent(t, c.clientTP); upTrace != want {
					t.Fatalf("uplink trace %s, want the client's %s", upTrace, want)
				}
			}
			send := waitSpan(t, sr, "producer-gw.send", func(s sdktrace.ReadOnlySpan) bool {
				return s.SpanContext().SpanID().String() == upSpan
			})
			if send.SpanContext().TraceID().String() != upTrace {
				t.Fatalf("send span trace %s, uplink header trace %s", send.SpanContext().TraceID(), upTrace)
			}
			deliver := waitSpan(t, sr, "producer-gw.deliver", func(s sdktrace.ReadOnlySpan) bool {
				return hasAttr(s, attribute.String("session_id", sid)) && hasAttr(s, attribute.Int64("seq", ack.Seq))
			})
			if deliver.SpanContext().TraceID().String() != upTrace || deliver.Parent().SpanID().String() != upSpan {
				t.Fatalf("delivery span trace %s parent %s, want trace %s parent %s (the send span)",
					deliver.SpanContext().TraceID(), deliver.Parent().SpanID(), upTrace, upSpan)
			}
		})
	}
}

func startTracedGateway(t *testing.T, env map[string]string, prov *sdktrace.TracerProvider) *testGW {
	t.Helper()
	cfg, err := LoadConfig(config.FromMap(env))
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(cfg, slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		t.Fatal(err)
	}
	g.tracer = prov.Tracer(service)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- g.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("gateway Run: %v", err)
		}
	})
	actx, acancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer acancel()
	addr, err := g.Addr(actx)
	if err != nil {
		t.Fatalf("gateway did not listen: %v", err)
	}
	return &testGW{g: g, addr: addr, stop: func() error { cancel(); return nil }}
}

// headerOf reads topic from the start (read committed) until a record
// whose value matches, and returns its traceparent header.
func headerOf(t *testing.T, p *pipeline, topic string, match func([]byte) bool) string {
	t.Helper()
	cl := p.reader(t, topic)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		for it := fs.RecordIter(); !it.Done(); {
			r := it.Next()
			if match(r.Value) {
				tp := eventlog.Header(r, schemas.HeaderTraceparent)
				if tp == "" {
					t.Fatalf("%s record at offset %d has no traceparent", topic, r.Offset)
				}
				return tp
			}
		}
	}
	t.Fatalf("no matching record on %s within 30s", topic)
	return ""
}

// waitSpan waits for an ended span of that name that matches.
func waitSpan(t *testing.T, sr *tracetest.SpanRecorder, name string, match func(sdktrace.ReadOnlySpan) bool) sdktrace.ReadOnlySpan {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, s := range sr.Ended() {
			if s.Name() == name && match(s) {
				return s
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no matching %s span within 10s (%d spans ended)", name, len(sr.Ended()))
	return nil
}

func hasAttr(s sdktrace.ReadOnlySpan, want attribute.KeyValue) bool {
	for _, kv := range s.Attributes() {
		if kv == want {
			return true
		}
	}
	return false
}

// splitTraceparent returns the trace ID and parent span ID of a W3C
// traceparent.
func splitTraceparent(t *testing.T, tp string) (traceID, spanID string) {
	t.Helper()
	parts := strings.Split(tp, "-")
	if len(parts) != 4 || len(parts[1]) != 32 || len(parts[2]) != 16 {
		t.Fatalf("malformed traceparent %q", tp)
	}
	return parts[1], parts[2]
}

func randomTraceparent() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return "00-" + hex.EncodeToString(b[:16]) + "-" + hex.EncodeToString(b[16:]) + "-01"
}

// TestReadyAndKafkaMetrics checks the gateway's /readyz against the real
// stack and that its Kafka producer reports through kprom on the service
// registry.
func TestReadyAndKafkaMetrics(t *testing.T) {
	p := newPipelineNoProcs(t)
	gw := p.gateway(nil)
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := gw.g.readyz(ctx)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway not ready within 20s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	mfs, err := gw.g.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"seqflow_kafka_connects_total": false, "seqflow_kafka_buffered_produce_records_total": false}
	for _, mf := range mfs {
		if _, ok := want[mf.GetName()]; ok {
			want[mf.GetName()] = true
		}
	}
	for name, seen := range want {
		if !seen {
			t.Errorf("registry lacks %s", name)
		}
	}
}
