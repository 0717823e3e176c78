package audit

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/log"
)

// EventName names the OpenTelemetry log records of the audit trail.
const EventName = "conch.audit"

// logger emits the trail as OpenTelemetry log records through the
// process's logger provider: an OTLP exporter when the process has a
// collector, nothing otherwise.
var logger = otel.Logger(instrumentationName)

func exportEnabled(ctx context.Context) bool {
	return logger.Enabled(ctx, log.EnabledParameters{Severity: log.SeverityInfo, EventName: EventName})
}

// export emits recs, once stored and anchored, as log records: each body
// is the record's stored JSON line (lines[i]), so that a log pipeline
// holds what verifies against the chain, and its main fields are
// attributes to index.
func export(ctx context.Context, recs []Record, lines [][]byte) {
	now := time.Now()
	for i, r := range recs {
		var lr log.Record
		lr.SetEventName(EventName)
		lr.SetTimestamp(r.Time)
		lr.SetObservedTimestamp(now)
		lr.SetSeverity(log.SeverityInfo)
		lr.SetSeverityText("INFO")
		lr.SetBody(attribute.StringValue(string(lines[i])))
		lr.AddAttributes(
			attribute.String("conch.audit.kind", r.Kind),
			attribute.String("conch.account", r.Account),
			attribute.String("conch.audit.writer", r.Writer),
			attribute.Int64("conch.audit.seq", r.Seq),
			attribute.String("conch.audit.hash", r.Hash),
		)
		for _, kv := range []struct{ k, v string }{
			{"conch.audit.event", r.Event}, {"conch.user", r.User}, {"conch.session", r.Session},
			{"conch.gateway", r.Gateway}, {"conch.sandbox", r.Sandbox}, {"conch.audit.decision", r.Decision},
			{"conch.approval", r.ApprovalID}, {"trace_id", r.TraceID},
		} {
			if kv.v != "" {
				lr.AddAttributes(attribute.String(kv.k, kv.v))
			}
		}
		logger.Emit(ctx, lr)
	}
}
