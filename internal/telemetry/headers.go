package telemetry

import (
	"context"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/seqflow/seqflow/schemas"
)

// propagator is fixed rather than global: the header contract is W3C trace
// context whatever a process installs.
var propagator = propagation.TraceContext{}

// MaxLinks bounds the links a batch span carries: a batch of a thousand
// records links its first MaxLinks, enough to join traces without making
// the span as large as the batch.
const MaxLinks = 64

// HeaderCarrier is a propagation.TextMapCarrier over a record's headers.
// Set replaces an existing header of the same key.
type HeaderCarrier struct{ Headers *[]kgo.RecordHeader }

var _ propagation.TextMapCarrier = HeaderCarrier{}

// Get returns the first value of key, or "".
func (c HeaderCarrier) Get(key string) string {
	for _, h := range *c.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// Set sets key to value, replacing the first header of that key.
func (c HeaderCarrier) Set(key, value string) {
	for i, h := range *c.Headers {
		if h.Key == key {
			(*c.Headers)[i].Value = []byte(value)
			return
		}
	}
	*c.Headers = append(*c.Headers, kgo.RecordHeader{Key: key, Value: []byte(value)})
}

// Keys returns the header keys.
func (c HeaderCarrier) Keys() []string {
	keys := make([]string, len(*c.Headers))
	for i, h := range *c.Headers {
		keys[i] = h.Key
	}
	return keys
}

// Extract returns ctx with the remote span context of headers' traceparent
// (and tracestate). A missing or malformed traceparent leaves ctx as is.
func Extract(ctx context.Context, headers []kgo.RecordHeader) context.Context {
	return propagator.Extract(ctx, HeaderCarrier{Headers: &headers})
}

// Inject writes ctx's span context as traceparent (and tracestate) into
// headers. A ctx without a valid span context leaves headers untouched.
func Inject(ctx context.Context, headers *[]kgo.RecordHeader) {
	propagator.Inject(ctx, HeaderCarrier{Headers: headers})
}

// Traceparent returns ctx's span context in the W3C traceparent form, or ""
// when it has none.
func Traceparent(ctx context.Context) string {
	var h []kgo.RecordHeader
	Inject(ctx, &h)
	return HeaderCarrier{Headers: &h}.Get(schemas.HeaderTraceparent)
}

// FromTraceparent returns ctx with the remote span context of a W3C
// traceparent string; an invalid one leaves ctx as is.
func FromTraceparent(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier{schemas.HeaderTraceparent: traceparent})
}

// TraceID is the slog attribute trace_id of ctx's span context; it is
// empty when ctx carries none.
func TraceID(ctx context.Context) slog.Attr {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.HasTraceID() {
		return slog.String("trace_id", "")
	}
	return slog.String("trace_id", sc.TraceID().String())
}

// RecordTraceID is TraceID of a record's traceparent header.
func RecordTraceID(r *kgo.Record) slog.Attr {
	return TraceID(Extract(context.Background(), r.Headers))
}

// StartBatch starts a span for a batch of records, linked to the trace
// context of up to MaxLinks of them; each walks the batch (kgo.Fetches'
// EachRecord, or Records). The links are only parsed when the span records,
// so with tracing off this costs one no-op call.
func StartBatch(ctx context.Context, tr trace.Tracer, name string, each func(func(*kgo.Record)), opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	ctx, span := tr.Start(ctx, name, opts...)
	if !span.IsRecording() {
		return ctx, span
	}
	n := 0
	each(func(r *kgo.Record) {
		if n == MaxLinks {
			return
		}
		if sc := trace.SpanContextFromContext(Extract(context.Background(), r.Headers)); sc.IsValid() {
			span.AddLink(trace.Link{SpanContext: sc})
			n++
		}
	})
	return ctx, span
}

// Records adapts a slice to StartBatch's walker.
func Records(recs []*kgo.Record) func(func(*kgo.Record)) {
	return func(fn func(*kgo.Record)) {
		for _, r := range recs {
			fn(r)
		}
	}
}
