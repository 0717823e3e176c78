package telemetry

import (
	"context"
	"encoding/binary"
	"math/rand/v2"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// idsOnly is the tracer provider of a process that exports no spans. Its
// spans record nothing, yet each gets a span context as the SDK's would:
// a span ID of its own, in its parent's trace (a new trace for a root),
// with the flags and trace state the process's sampler,
// ParentBased(AlwaysSample), would give it. So the trace context a process
// passes on (to another service, in an audit record, a log line or a
// metric's exemplar) is the same with or without an exporter, and a
// request does not pay for recording spans that nothing reads.
type idsOnly struct{ embedded.TracerProvider }

func (idsOnly) Tracer(string, ...trace.TracerOption) trace.Tracer { return idsOnlyTracer{} }

type idsOnlyTracer struct{ embedded.Tracer }

func (idsOnlyTracer) Start(ctx context.Context, _ string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	parent := trace.SpanContextFromContext(ctx)
	if cfg := trace.NewSpanStartConfig(opts...); cfg.NewRoot() {
		parent = trace.SpanContext{}
	}
	cfg := trace.SpanContextConfig{TraceID: parent.TraceID(), TraceFlags: parent.TraceFlags(), TraceState: parent.TraceState()}
	if !parent.IsValid() {
		// A root is always sampled; its trace ID is new.
		binary.BigEndian.PutUint64(cfg.TraceID[:8], rand.Uint64())
		binary.BigEndian.PutUint64(cfg.TraceID[8:], nonZero())
		cfg.TraceFlags = trace.FlagsSampled
	}
	binary.BigEndian.PutUint64(cfg.SpanID[:], nonZero())
	ctx = trace.ContextWithSpanContext(ctx, trace.NewSpanContext(cfg))
	return ctx, trace.SpanFromContext(ctx)
}

// nonZero is a random number other than 0, which no trace or span ID may
// be.
func nonZero() uint64 {
	for {
		if n := rand.Uint64(); n != 0 {
			return n
		}
	}
}
