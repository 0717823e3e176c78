// Package logging builds the JSON slog logger every service uses. Records
// logged with a context that carries an OpenTelemetry span get trace_id
// and span_id attributes, so logs and traces join up.
package logging

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"go.opentelemetry.io/otel/trace"
)

// New returns a logger writing JSON lines to w at level and above.
//
// Trace attributes are added at the record level, so with WithGroup they
// end up inside the group.
func New(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(traceHandler{slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})})
}

// ParseLevel parses a level name: debug, info, warn (or warning), error,
// case-insensitive, optionally with an offset such as "info+2".
func ParseLevel(s string) (slog.Level, error) {
	if strings.EqualFold(s, "warning") {
		return slog.LevelWarn, nil
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("logging: parse level %q: %w", s, err)
	}
	return l, nil
}

// traceHandler adds the span context of the record's context.
type traceHandler struct{ slog.Handler }

// Handle implements slog.Handler.
func (h traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r = r.Clone()
		r.AddAttrs(
			slog.String("trace_id", sc.TraceID().String()),
			slog.String("span_id", sc.SpanID().String()),
		)
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h traceHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return traceHandler{h.Handler.WithAttrs(attrs)}
}

// WithGroup implements slog.Handler.
func (h traceHandler) WithGroup(name string) slog.Handler {
	return traceHandler{h.Handler.WithGroup(name)}
}
