package logging

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

func TestNewAddsTraceIDs(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
	})
	tests := []struct {
		name      string
		span      bool
		wantTrace string
		wantSpan  string
	}{
		{name: "with span", span: true, wantTrace: "4bf92f3577b34da6a3ce929d0e0e4736", wantSpan: "00f067aa0ba902b7"},
		{name: "without span"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			log := New(&buf, slog.LevelInfo).With(slog.String("service", "router"))
			ctx := t.Context()
			if tt.span {
				ctx = trace.ContextWithSpanContext(ctx, sc)
			}
			log.InfoContext(ctx, "request handled", slog.Int("status", 200))
			log.DebugContext(ctx, "filtered out")

			var rec map[string]any
			if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
				t.Fatalf("want exactly one JSON line, got %q: %v", buf.String(), err)
			}
			if got, _ := rec["trace_id"].(string); got != tt.wantTrace {
				t.Errorf("trace_id = %q, want %q", got, tt.wantTrace)
			}
			if got, _ := rec["span_id"].(string); got != tt.wantSpan {
				t.Errorf("span_id = %q, want %q", got, tt.wantSpan)
			}
			if rec["msg"] != "request handled" || rec["service"] != "router" || rec["status"] != float64(200) {
				t.Errorf("record lost attributes: %v", rec)
			}
		})
	}
}

func TestParseLevel(t *testing.T) {
	tests := []struct {
		in      string
		want    slog.Level
		wantErr bool
	}{
		{in: "debug", want: slog.LevelDebug},
		{in: "INFO", want: slog.LevelInfo},
		{in: "warn", want: slog.LevelWarn},
		{in: "Warning", want: slog.LevelWarn},
		{in: "error", want: slog.LevelError},
		{in: "info+2", want: slog.LevelInfo + 2},
		{in: "loud", wantErr: true},
		{in: "", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseLevel(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseLevel(%q) error = %v, wantErr %v", tt.in, err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("ParseLevel(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}
