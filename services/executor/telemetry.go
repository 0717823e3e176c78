package executor

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/conch-sh/conch/services/executor/toolshim"
)

// tracer names the executor's own spans; its RPCs are traced by the gRPC
// server's instrumentation.
var tracer = otel.Tracer("github.com/conch-sh/conch/services/executor")

// spanKey identifies a span.
type spanKey struct {
	trace trace.TraceID
	span  trace.SpanID
}

// traceEnv adds to env the trace context of ctx, for what the command
// calls back (tools) to join the call that runs it. It returns env itself
// when ctx has none.
func traceEnv(ctx context.Context, env map[string]string) (map[string]string, trace.SpanContext) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return env, sc
	}
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	out := make(map[string]string, len(env)+1)
	for k, v := range env {
		out[k] = v
	}
	out[toolshim.TraceparentEnv] = carrier.Get("traceparent")
	return out, sc
}

// commandRuns records sc as the trace context of a command running in the
// sandbox until the returned func is called; without a valid sc, which
// no tool call can name, it records nothing and returns nil.
func (e *entry) commandRuns(sc trace.SpanContext) (done func()) {
	if !sc.IsValid() {
		return nil
	}
	k := spanKey{sc.TraceID(), sc.SpanID()}
	e.mu.Lock()
	if e.running == nil {
		e.running = map[spanKey]int{}
	}
	e.running[k]++
	e.mu.Unlock()
	return func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.running[k]--; e.running[k] <= 0 {
			delete(e.running, k)
		}
	}
}

// traceOf returns ctx under the trace context a tool call from the
// sandbox names, if it is that of a command running in the sandbox: a
// sandbox cannot attach spans to traces it was not given.
func (e *entry) traceOf(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" || len(traceparent) > 128 {
		return ctx
	}
	sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent}))
	if !sc.IsValid() {
		return ctx
	}
	e.mu.Lock()
	ok := e.running[spanKey{sc.TraceID(), sc.SpanID()}] > 0
	e.mu.Unlock()
	if !ok {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}
