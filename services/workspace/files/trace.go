package files

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

var tracer = otel.Tracer("github.com/conch-sh/conch/services/workspace/files")

// span starts a span for an operation on ws; end records err. The user id
// (often an e-mail address) stays out of traces.
func span(ctx context.Context, op string, ws Workspace, attrs ...attribute.KeyValue) (context.Context, func(err *error)) {
	ctx, sp := tracer.Start(ctx, "workspace."+op, trace.WithAttributes(append(attrs,
		attribute.String("conch.account", ws.Account))...))
	return ctx, func(err *error) {
		if err != nil && *err != nil {
			sp.RecordError(*err)
			sp.SetStatus(codes.Error, (*err).Error())
		}
		sp.End()
	}
}
