package telemetry

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/seqflow/seqflow/schemas"
)

const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// recorder returns a tracer that records into an in-process SpanRecorder:
// no collector, no global state.
func recorder(t *testing.T) (trace.Tracer, *tracetest.SpanRecorder) {
	t.Helper()
	sr := tracetest.NewSpanRecorder()
	prov := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = prov.Shutdown(context.Background()) })
	return prov.Tracer("test"), sr
}

func TestCarrier(t *testing.T) {
	cases := []struct {
		name    string
		headers []kgo.RecordHeader
		wantID  string
	}{
		{"valid", []kgo.RecordHeader{{Key: "seqflow-event-type", Value: []byte("message")}, {Key: schemas.HeaderTraceparent, Value: []byte(tp)}}, "4bf92f3577b34da6a3ce929d0e0e4736"},
		{"missing", []kgo.RecordHeader{{Key: "seqflow-event-type", Value: []byte("message")}}, ""},
		{"malformed", []kgo.RecordHeader{{Key: schemas.HeaderTraceparent, Value: []byte("00-zz-yy-01")}}, ""},
		{"all-zero trace id", []kgo.RecordHeader{{Key: schemas.HeaderTraceparent, Value: []byte("00-00000000000000000000000000000000-00f067aa0ba902b7-01")}}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := Extract(context.Background(), c.headers)
			if got := TraceID(ctx).Value.String(); got != c.wantID {
				t.Fatalf("trace_id = %q, want %q", got, c.wantID)
			}
			if got := RecordTraceID(&kgo.Record{Headers: c.headers}).Value.String(); got != c.wantID {
				t.Fatalf("RecordTraceID = %q, want %q", got, c.wantID)
			}
			if c.wantID == "" {
				if got := Traceparent(ctx); got != "" {
					t.Fatalf("Traceparent of no context = %q, want empty", got)
				}
				return
			}
			// Round trip: injecting into headers that already hold a
			// traceparent replaces it rather than adding a second.
			out := append([]kgo.RecordHeader(nil), c.headers...)
			Inject(ctx, &out)
			if len(out) != len(c.headers) || (HeaderCarrier{Headers: &out}).Get(schemas.HeaderTraceparent) != tp {
				t.Fatalf("re-injected headers = %v", out)
			}
		})
	}
}

func TestFromTraceparent(t *testing.T) {
	for _, c := range []struct{ in, want string }{{tp, tp}, {"", ""}, {"nope", ""}} {
		t.Run(c.in, func(t *testing.T) {
			if got := Traceparent(FromTraceparent(context.Background(), c.in)); got != c.want {
				t.Fatalf("Traceparent(FromTraceparent(%q)) = %q, want %q", c.in, got, c.want)
			}
		})
	}
}

// TestPropagation follows one trace through the stages as the services
// wire it: the gateway's send span is injected into the uplink's headers,
// the sequencer copies the header to the sequenced event and links its
// batch span to it, and the gateway's delivery span is a child of it.
func TestPropagation(t *testing.T) {
	tr, sr := recorder(t)

	sendCtx, send := tr.Start(context.Background(), "producer-gw.send")
	var uplink []kgo.RecordHeader
	Inject(sendCtx, &uplink)
	send.End()

	// Sequencer: per-record header copied unchanged; one batch span.
	seqd := &kgo.Record{Headers: []kgo.RecordHeader{{Key: schemas.HeaderTraceparent, Value: []byte(HeaderCarrier{Headers: &uplink}.Get(schemas.HeaderTraceparent))}}}
	unrelated := &kgo.Record{}
	_, batch := StartBatch(context.Background(), tr, "sequencer.batch", Records([]*kgo.Record{{Headers: uplink}, unrelated}))
	batch.End()

	// Gateway delivery: child of the event's context.
	_, deliver := tr.Start(Extract(context.Background(), seqd.Headers), "producer-gw.deliver")
	deliver.End()

	spans := sr.Ended()
	if len(spans) != 3 {
		t.Fatalf("recorded %d spans, want 3", len(spans))
	}
	want := send.SpanContext()
	if l := spans[1].Links(); len(l) != 1 || l[0].SpanContext.TraceID() != want.TraceID() || l[0].SpanContext.SpanID() != want.SpanID() {
		t.Fatalf("batch span links = %+v, want one link to the send span", l)
	}
	if spans[1].SpanContext().TraceID() == want.TraceID() {
		t.Fatal("batch span joined the send trace; it should be its own trace, linked")
	}
	d := spans[2]
	if d.SpanContext().TraceID() != want.TraceID() || d.Parent().SpanID() != want.SpanID() {
		t.Fatalf("delivery span trace %s parent %s, want trace %s parent %s", d.SpanContext().TraceID(), d.Parent().SpanID(), want.TraceID(), want.SpanID())
	}
}

func TestStartBatchBoundsLinks(t *testing.T) {
	tr, sr := recorder(t)
	recs := make([]*kgo.Record, MaxLinks+10)
	for i := range recs {
		recs[i] = &kgo.Record{Headers: []kgo.RecordHeader{{Key: schemas.HeaderTraceparent, Value: []byte(tp)}}}
	}
	_, span := StartBatch(context.Background(), tr, "b", Records(recs))
	span.End()
	if n := len(sr.Ended()[0].Links()); n != MaxLinks {
		t.Fatalf("links = %d, want %d", n, MaxLinks)
	}
}

func TestSetupOffIsNoop(t *testing.T) {
	shutdown, err := Setup(context.Background(), Config{ServiceName: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = shutdown(context.Background()) }()
	_, span := StartBatch(context.Background(), Tracer("test"), "b", Records([]*kgo.Record{{Headers: []kgo.RecordHeader{{Key: schemas.HeaderTraceparent, Value: []byte(tp)}}}}))
	defer span.End()
	if span.IsRecording() {
		t.Fatal("with no endpoint a span records")
	}
}

func TestKafkaMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	for _, id := range []string{"a", "a", "b"} { // the second "a" must not panic
		cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"), kgo.ClientID(id), KafkaMetrics(reg))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "seqflow_kafka_") {
			names = append(names, mf.GetName())
			if strings.HasSuffix(mf.GetName(), "buffered_produce_records_total") && len(mf.GetMetric()) != 2 {
				t.Errorf("%s has %d series, want one per client ID (a, b)", mf.GetName(), len(mf.GetMetric()))
			}
		}
	}
	if len(names) == 0 {
		t.Fatal("no seqflow_kafka_ series registered")
	}
}

// FuzzExtract feeds arbitrary header values (they come from Kafka, written
// by anyone with produce rights) to the extractor.
func FuzzExtract(f *testing.F) {
	f.Add(tp, "")
	f.Add("00-zz", "k=v")
	f.Fuzz(func(t *testing.T, parent, state string) {
		h := []kgo.RecordHeader{{Key: schemas.HeaderTraceparent, Value: []byte(parent)}, {Key: schemas.HeaderTracestate, Value: []byte(state)}}
		ctx := Extract(context.Background(), h)
		if got := Traceparent(ctx); got != "" && len(got) != 55 {
			t.Fatalf("extracted %q from %q", got, parent)
		}
	})
}

// BenchmarkStartBatch_1000 compares, for a batch of 1000 records, one batch
// span (off: the no-op provider; on: recording with links) with a span per
// record.
func BenchmarkStartBatch_1000(b *testing.B) {
	recs := make([]*kgo.Record, 1000)
	for i := range recs {
		recs[i] = &kgo.Record{Headers: []kgo.RecordHeader{{Key: schemas.HeaderTraceparent, Value: []byte(tp)}}}
	}
	on := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tracetest.NewSpanRecorder()))
	defer func() { _ = on.Shutdown(context.Background()) }()
	off := noop.NewTracerProvider()
	for _, c := range []struct {
		name string
		tr   trace.Tracer
	}{{"off", off.Tracer("b")}, {"on", on.Tracer("b")}} {
		b.Run("batch_span/"+c.name, func(b *testing.B) {
			for b.Loop() {
				_, span := StartBatch(context.Background(), c.tr, "b", Records(recs))
				span.End()
			}
		})
		b.Run("span_per_record/"+c.name, func(b *testing.B) {
			for b.Loop() {
				for _, r := range recs {
					_, span := c.tr.Start(Extract(context.Background(), r.Headers), "r")
					span.End()
				}
			}
		})
	}
}

// TestSetupExportsOTLP points Setup at an in-process HTTP server standing in
// for a collector and checks that a span reaches it by shutdown.
func TestSetupExportsOTLP(t *testing.T) {
	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/traces" {
			posts.Add(1)
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	defer otel.SetTracerProvider(noop.NewTracerProvider())
	for _, c := range []struct{ name, endpoint string }{
		{"url", srv.URL},
		{"host:port", strings.TrimPrefix(srv.URL, "http://")},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := posts.Load()
			shutdown, err := Setup(context.Background(), Config{ServiceName: "test", OTLPEndpoint: c.endpoint})
			if err != nil {
				t.Fatal(err)
			}
			_, span := Tracer("test").Start(context.Background(), "s")
			if !span.IsRecording() {
				t.Fatal("with an endpoint the span does not record")
			}
			span.End()
			if err := shutdown(context.Background()); err != nil {
				t.Fatalf("shutdown: %v", err)
			}
			if posts.Load() == before {
				t.Fatal("no OTLP export reached the collector")
			}
		})
	}
}

func TestSetupRejectsBadEndpoint(t *testing.T) {
	for _, ep := range []string{"nohostport", "http://", "http://[::1", "127.0.0.1"} {
		t.Run(ep, func(t *testing.T) {
			if _, err := Setup(context.Background(), Config{ServiceName: "test", OTLPEndpoint: ep}); err == nil || !strings.Contains(err.Error(), EnvOTLPEndpoint) {
				t.Fatalf("Setup(%q) = %v, want an error naming %s", ep, err, EnvOTLPEndpoint)
			}
		})
	}
}

// TestKafkaRequestsCounted: the requests hook counts written requests by
// type, not failed writes, and a second client on the same registry
// shares the counter instead of panicking.
func TestKafkaRequestsCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	_ = KafkaMetrics(reg)
	_ = KafkaMetrics(reg)
	rc := requestCounter{reg2counter(t, reg)}
	rc.OnBrokerWrite(kgo.BrokerMetadata{}, 0, 10, 0, 0, nil)                            // Produce
	rc.OnBrokerWrite(kgo.BrokerMetadata{}, 1, 10, 0, 0, nil)                            // Fetch
	rc.OnBrokerWrite(kgo.BrokerMetadata{}, 1, 10, 0, 0, nil)                            // Fetch
	rc.OnBrokerWrite(kgo.BrokerMetadata{}, 0, 10, 0, 0, errors.New("connection reset")) // not written
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "seqflow_kafka_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			got[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
		}
	}
	if got["Produce"] != 1 || got["Fetch"] != 2 || len(got) != 2 {
		t.Fatalf("requests counted %v, want Produce 1 and Fetch 2", got)
	}
}

// reg2counter returns the requests counter KafkaMetrics registered.
func reg2counter(t *testing.T, reg *prometheus.Registry) *prometheus.CounterVec {
	t.Helper()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "seqflow_kafka_requests_total", Help: "Requests written to Kafka brokers by this process's clients, by request type."}, []string{"request"})
	var are prometheus.AlreadyRegisteredError
	if err := reg.Register(c); !errors.As(err, &are) {
		t.Fatalf("the requests counter was not registered: %v", err)
	}
	return are.ExistingCollector.(*prometheus.CounterVec)
}
