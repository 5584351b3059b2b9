// Package telemetry sets up OpenTelemetry tracing for a seqflow service and
// carries W3C trace context in Kafka record headers; it also hooks franz-go
// clients into the service's Prometheus registry. Tracing is off unless an
// OTLP endpoint is configured: then spans cost nothing but a no-op call.
package telemetry

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// EnvOTLPEndpoint is the environment variable every service reads for
// Config.OTLPEndpoint.
const EnvOTLPEndpoint = "SEQFLOW_OTLP_ENDPOINT"

// Config says where spans go.
type Config struct {
	// ServiceName is the service.name resource attribute ("sequencer", ...).
	ServiceName string
	// OTLPEndpoint is an OTLP/HTTP endpoint, "host:port" or a full URL
	// ("http://127.0.0.1:4318"). Empty (the default) turns tracing off: the
	// global tracer provider stays the no-op one.
	OTLPEndpoint string
}

// Setup installs the W3C trace-context propagator and, when an endpoint is
// configured, a batching OTLP/HTTP tracer provider as the global one. The
// returned shutdown flushes and stops the exporter; it is never nil.
func Setup(ctx context.Context, cfg Config) (shutdown func(context.Context) error, err error) {
	otel.SetTextMapPropagator(propagation.TraceContext{})
	if cfg.OTLPEndpoint == "" {
		return func(context.Context) error { return nil }, nil
	}
	opts, err := endpointOptions(cfg.OTLPEndpoint)
	if err != nil {
		return nil, err
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("create otlp exporter: %w", err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName(cfg.ServiceName))),
	)
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}

// endpointOptions accepts "host:port" (plain HTTP, as a local collector
// listens) and a URL, whose scheme decides TLS. A URL without a path gets
// the OTLP traces path: the exporter would otherwise post to "/".
// An endpoint that is neither is an error: the exporter would silently fall
// back to localhost:4318.
func endpointOptions(ep string) ([]otlptracehttp.Option, error) {
	if !strings.HasPrefix(ep, "http://") && !strings.HasPrefix(ep, "https://") {
		if _, _, err := net.SplitHostPort(ep); err != nil {
			return nil, fmt.Errorf("%s=%q: want host:port or an http(s) URL: %w", EnvOTLPEndpoint, ep, err)
		}
		return []otlptracehttp.Option{otlptracehttp.WithEndpoint(ep), otlptracehttp.WithInsecure()}, nil
	}
	u, err := url.Parse(ep)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("%s=%q: want host:port or an http(s) URL", EnvOTLPEndpoint, ep)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
	}
	return []otlptracehttp.Option{otlptracehttp.WithEndpointURL(u.String())}, nil
}

// Tracer returns the named tracer of the global provider. Services take it
// once at construction; with tracing off its spans are no-ops.
func Tracer(name string) trace.Tracer { return otel.Tracer("github.com/seqflow/seqflow/" + name) }

// Flush runs a Setup's shutdown under a short deadline of its own (the
// service's context has ended by then) and logs, rather than returns, its
// error: lost spans never fail a shutdown.
func Flush(shutdown func(context.Context) error, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		log.Warn("flush traces", "err", err)
	}
}
