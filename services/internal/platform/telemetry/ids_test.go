package telemetry

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// Without an exporter a span records nothing, but its span context is the
// one the SDK, with Setup's sampler, would give it: what a process passes
// on does not depend on whether it exports.
func TestIDsOnlyPropagatesAsTheSDK(t *testing.T) {
	t.Parallel()
	sdk := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())),
		sdktrace.WithSpanProcessor(tracetest.NewSpanRecorder()))
	state, err := trace.ParseTraceState("vendor=value")
	if err != nil {
		t.Fatal(err)
	}
	parent := func(flags trace.TraceFlags, remote bool) context.Context {
		sc := trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: flags, TraceState: state, Remote: remote,
		})
		return trace.ContextWithSpanContext(context.Background(), sc)
	}
	tests := []struct {
		name string
		ctx  context.Context
		opts []trace.SpanStartOption
	}{
		{"a root", context.Background(), nil},
		{"under a sampled caller", parent(trace.FlagsSampled, true), nil},
		{"under a caller that does not sample", parent(0, true), nil},
		{"under a local sampled span", parent(trace.FlagsSampled, false), nil},
		{"under a local span not sampled", parent(0, false), nil},
		{"a new root under a caller", parent(0, true), []trace.SpanStartOption{trace.WithNewRoot()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, want := sdk.Tracer("t").Start(tt.ctx, "s", tt.opts...)
			ctx, got := idsOnly{}.Tracer("t").Start(tt.ctx, "s", tt.opts...)
			w, g := want.SpanContext(), got.SpanContext()
			from := trace.SpanContextFromContext(tt.ctx)
			inherits := from.IsValid() && from.TraceID() == w.TraceID()
			switch {
			case got.IsRecording():
				t.Error("the span records")
			case !g.IsValid() || g.IsRemote():
				t.Errorf("span context %+v is not a valid local one", g)
			case !trace.SpanContextFromContext(ctx).Equal(g):
				t.Error("the context does not carry the span")
			case g.TraceFlags() != w.TraceFlags() || g.TraceState().String() != w.TraceState().String():
				t.Errorf("flags %v, state %q; the SDK gives %v, %q", g.TraceFlags(), g.TraceState(), w.TraceFlags(), w.TraceState())
			case inherits != (from.IsValid() && from.TraceID() == g.TraceID()):
				t.Errorf("trace %v under %v; the SDK's is %v", g.TraceID(), from.TraceID(), w.TraceID())
			case g.SpanID() == from.SpanID():
				t.Error("the span has its parent's ID")
			}
		})
	}
}
