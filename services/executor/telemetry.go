package executor

import "go.opentelemetry.io/otel"

// tracer names the executor's own spans; its RPCs are traced by the gRPC
// server's instrumentation.
var tracer = otel.Tracer("github.com/conch-sh/conch/services/executor")
