package sandbox

import (
	"context"

	"go.opentelemetry.io/otel/codes"
)

// span starts a span of one step of building a sandbox; end records err.
// A cold create is a few of them: state dir, workspace tmpfs, filesystem
// view, cgroup, and bubblewrap up to the agent's hello.
func (r *Runtime) span(ctx context.Context, name string) (context.Context, func(err error)) {
	ctx, sp := r.tracer.Start(ctx, "sandbox."+name)
	return ctx, func(err error) {
		if err != nil {
			sp.RecordError(err)
			sp.SetStatus(codes.Error, err.Error())
		}
		sp.End()
	}
}
