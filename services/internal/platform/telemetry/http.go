package telemetry

import (
	"net/http"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

const httpInstrumentation = "github.com/conch-sh/conch/services/internal/platform/telemetry/http"

// HTTPHandler traces and measures the requests next serves: each gets a
// server span, named by its method and path, that continues the caller's
// W3C trace, and one measurement of http.server.request.duration by
// method, route and status code.
//
// It does on a gateway's hot path what otelhttp's handler does, at a
// fraction of the cost: attributes are built only for a span that records,
// the measurement's attribute sets are built once per (method, route,
// status) and reused, and the response writer is wrapped by one small type
// that keeps Flush and lets http.ResponseController reach the rest.
type HTTPHandler struct {
	next     http.Handler
	tracer   trace.Tracer
	duration metric.Float64Histogram
	// sets caches a measurement option per httpKey; the key space is
	// bounded (known methods, the mux's patterns, status codes).
	sets sync.Map
}

type httpKey struct {
	method, route string
	status        int
}

// NewHTTPHandler wraps next with spans from tp and measurements from mp.
func NewHTTPHandler(next http.Handler, tp trace.TracerProvider, mp metric.MeterProvider) (*HTTPHandler, error) {
	duration, err := mp.Meter(httpInstrumentation, metric.WithSchemaURL(semconv.SchemaURL)).Float64Histogram("http.server.request.duration",
		metric.WithUnit("s"),
		metric.WithDescription("Duration of HTTP server requests."),
		// The semantic conventions' boundaries, and longer ones for
		// completions that wait on a model or a human.
		metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 30, 60, 300))
	if err != nil {
		return nil, err
	}
	tracer := tp.Tracer(httpInstrumentation, trace.WithSchemaURL(semconv.SchemaURL))
	return &HTTPHandler{next: next, tracer: tracer, duration: duration}, nil
}

func (h *HTTPHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	ctx := otel.GetTextMapPropagator().Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, span := h.tracer.Start(ctx, r.Method+" "+r.URL.Path, trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(start))
	defer span.End()
	sw := &statusWriter{ResponseWriter: w}
	// A ServeMux sets the pattern it matched on the request it was given,
	// which is this one.
	r = r.WithContext(ctx)
	h.next.ServeHTTP(sw, r)

	status := sw.status
	if status == 0 {
		status = http.StatusOK
	}
	method := knownMethod(r.Method)
	route := routeOf(r.Pattern)
	if span.IsRecording() {
		attrs := []attribute.KeyValue{
			semconv.HTTPRequestMethodKey.String(method),
			semconv.URLPath(r.URL.Path),
			semconv.HTTPResponseStatusCode(status),
			semconv.NetworkProtocolVersion(strings.TrimPrefix(r.Proto, "HTTP/")),
		}
		if route != "" {
			attrs = append(attrs, semconv.HTTPRoute(route))
		}
		if ua := r.UserAgent(); ua != "" {
			attrs = append(attrs, semconv.UserAgentOriginal(ua))
		}
		span.SetAttributes(attrs...)
		if status >= http.StatusInternalServerError {
			span.SetStatus(codes.Error, http.StatusText(status))
		}
	}
	h.duration.Record(ctx, time.Since(start).Seconds(), h.set(httpKey{method, route, status}))
}

// set returns the measurement's attributes for k.
func (h *HTTPHandler) set(k httpKey) metric.RecordOption {
	if o, ok := h.sets.Load(k); ok {
		return o.(metric.RecordOption)
	}
	attrs := []attribute.KeyValue{semconv.HTTPRequestMethodKey.String(k.method), semconv.HTTPResponseStatusCode(k.status)}
	if k.route != "" {
		attrs = append(attrs, semconv.HTTPRoute(k.route))
	}
	o, _ := h.sets.LoadOrStore(k, metric.WithAttributeSet(attribute.NewSet(attrs...)))
	return o.(metric.RecordOption)
}

// knownMethod is m if HTTP defines it, else "_OTHER", as the semantic
// conventions ask: a caller must not grow the metric's key space.
func knownMethod(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return m
	}
	return "_OTHER"
}

// routeOf is the path of a ServeMux pattern ("POST /v1/{x}" → "/v1/{x}"),
// or "" when no pattern matched.
func routeOf(pattern string) string {
	if i := strings.IndexByte(pattern, '/'); i >= 0 {
		return pattern[i:]
	}
	return ""
}

// statusWriter notes the status code of a response.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	// 1xx responses are interim: the final status comes after.
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush keeps streaming responses (server-sent events) streaming for
// handlers that look for an http.Flusher.
func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the server's writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
