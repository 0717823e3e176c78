package approval

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

const instrumentationName = "github.com/conch-sh/conch/services/approval"

var (
	tracer = otel.Tracer(instrumentationName)
	meter  = otel.Meter(instrumentationName)

	// verdicts counts policy verdicts by call and decision.
	verdicts, _ = meter.Int64Counter("conch.approval.verdicts",
		metric.WithDescription("Exec policy verdicts, by call (evaluate, authorize) and decision (allow, ask, deny)"))
	// resolutions counts human and fallback answers by decision.
	resolutions, _ = meter.Int64Counter("conch.approval.resolutions",
		metric.WithDescription("Approvals answered, by decision (allow-once, allow-always, deny)"))
)

func verdictAttrs(call, decision string) metric.AddOption {
	return metric.WithAttributes(attribute.String("call", call), attribute.String("decision", decision))
}
