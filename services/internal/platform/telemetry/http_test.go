package telemetry

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// instrumented serves mux under an HTTPHandler whose spans and
// measurements the test reads.
func instrumented(t *testing.T, mux http.Handler) (*httptest.Server, *tracetest.SpanRecorder, *sdkmetric.ManualReader) {
	t.Helper()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	h, err := NewHTTPHandler(mux, tp, mp)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, spans, reader
}

func TestHTTPHandlerSpansAndMeasurements(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ok", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.HandleFunc("POST /items/{id}", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusCreated) })
	mux.HandleFunc("GET /silent", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("GET /broken", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusBadGateway) })
	mux.HandleFunc("GET /hints", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusEarlyHints)
		w.WriteHeader(http.StatusAccepted)
	})
	tests := []struct {
		method, path string
		wantStatus   int
		wantRoute    string
		wantError    bool
	}{
		{method: "GET", path: "/ok", wantStatus: 200, wantRoute: "/ok"},
		{method: "POST", path: "/items/42", wantStatus: 201, wantRoute: "/items/{id}"},
		{method: "GET", path: "/silent", wantStatus: 200, wantRoute: "/silent"},
		{method: "GET", path: "/broken", wantStatus: 502, wantRoute: "/broken", wantError: true},
		{method: "GET", path: "/hints", wantStatus: 202, wantRoute: "/hints"},
		{method: "GET", path: "/nowhere", wantStatus: 404},
		{method: "BREW", path: "/ok", wantStatus: 405, wantRoute: ""},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			srv, spans, reader := instrumented(t, mux)
			req, _ := http.NewRequest(tt.method, srv.URL+tt.path, nil)
			req.Header.Set("User-Agent", "conch-test/1")
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status = %d, want %d", resp.StatusCode, tt.wantStatus)
			}

			ended := spans.Ended()
			if len(ended) != 1 {
				t.Fatalf("%d spans ended, want 1", len(ended))
			}
			s := ended[0]
			if s.Name() != tt.method+" "+tt.path || s.SpanKind() != trace.SpanKindServer {
				t.Errorf("span = %q %v, want %q server", s.Name(), s.SpanKind(), tt.method+" "+tt.path)
			}
			attrs := attribute.NewSet(s.Attributes()...)
			method := tt.method
			if method == "BREW" {
				method = "_OTHER"
			}
			for k, want := range map[attribute.Key]attribute.Value{
				"http.request.method":       attribute.StringValue(method),
				"http.response.status_code": attribute.IntValue(tt.wantStatus),
				"url.path":                  attribute.StringValue(tt.path),
				"user_agent.original":       attribute.StringValue("conch-test/1"),
			} {
				if got, _ := attrs.Value(k); got != want {
					t.Errorf("span attribute %s = %v, want %v", k, got.Emit(), want.Emit())
				}
			}
			if got, ok := attrs.Value("http.route"); ok != (tt.wantRoute != "") || got.AsString() != tt.wantRoute {
				t.Errorf("span route = %q (%v), want %q", got.AsString(), ok, tt.wantRoute)
			}
			if (s.Status().Code == codes.Error) != tt.wantError {
				t.Errorf("span status = %v, want error %v", s.Status(), tt.wantError)
			}

			var rm metricdata.ResourceMetrics
			if err := reader.Collect(t.Context(), &rm); err != nil {
				t.Fatal(err)
			}
			points := durationPoints(t, rm)
			if len(points) != 1 || points[0].Count != 1 {
				t.Fatalf("duration points = %+v, want one of one request", points)
			}
			want := []attribute.KeyValue{attribute.String("http.request.method", method), attribute.Int("http.response.status_code", tt.wantStatus)}
			if tt.wantRoute != "" {
				want = append(want, attribute.String("http.route", tt.wantRoute))
			}
			if got := points[0].Attributes; !got.Equals(ptr(attribute.NewSet(want...))) {
				t.Errorf("measured with %v, want %v", got.ToSlice(), want)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func durationPoints(t *testing.T, rm metricdata.ResourceMetrics) []metricdata.HistogramDataPoint[float64] {
	t.Helper()
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "http.server.request.duration" || m.Unit != "s" {
				continue
			}
			h, ok := m.Data.(metricdata.Histogram[float64])
			if !ok {
				t.Fatalf("duration is a %T", m.Data)
			}
			return h.DataPoints
		}
	}
	return nil
}

// The attribute sets of measurements are reused: many requests on one
// route make one point.
func TestHTTPHandlerMeasuresRepeatedRequestsOnOnePoint(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /a/{x}", func(http.ResponseWriter, *http.Request) {})
	srv, _, reader := instrumented(t, mux)
	for i := range 20 {
		resp, err := srv.Client().Get(srv.URL + "/a/" + strings.Repeat("x", i+1))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	if points := durationPoints(t, rm); len(points) != 1 || points[0].Count != 20 {
		t.Fatalf("points = %+v, want one point of 20 requests", points)
	}
}

// A request that carries a traceparent is served in the caller's trace.
func TestHTTPHandlerContinuesTheCallersTrace(t *testing.T) {
	prev := otel.GetTextMapPropagator()
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() { otel.SetTextMapPropagator(prev) })
	var inside trace.SpanContext
	srv, spans, _ := instrumented(t, http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		inside = trace.SpanContextFromContext(r.Context())
	}))
	req, _ := http.NewRequest("GET", srv.URL+"/x", nil)
	req.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	s := spans.Ended()[0]
	if s.SpanContext().TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || s.Parent().SpanID().String() != "00f067aa0ba902b7" {
		t.Fatalf("span %v has parent %v, want the caller's trace", s.SpanContext(), s.Parent())
	}
	if inside.SpanID() != s.SpanContext().SpanID() {
		t.Fatalf("the handler ran in span %v, want %v", inside.SpanID(), s.SpanContext().SpanID())
	}
}

// Streaming handlers find a Flusher, and http.ResponseController reaches
// the server's writer through the wrapper.
func TestHTTPHandlerKeepsTheWritersAbilities(t *testing.T) {
	release := make(chan struct{})
	srv, spans, _ := instrumented(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if err := http.NewResponseController(w).SetWriteDeadline(time.Now().Add(time.Minute)); err != nil {
			http.Error(w, "deadline: "+err.Error(), http.StatusInternalServerError)
			return
		}
		f, ok := w.(http.Flusher)
		if !ok {
			http.Error(w, "no flusher", http.StatusInternalServerError)
			return
		}
		_, _ = io.WriteString(w, "data: first\n\n")
		f.Flush()
		<-release
		_, _ = io.WriteString(w, "data: second\n\n")
	}))
	resp, err := srv.Client().Get(srv.URL + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// The first event arrives while the handler still waits.
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	close(release)
	if err != nil || line != "data: first\n" || resp.StatusCode != http.StatusOK {
		t.Fatalf("first line = %q %v (status %d), want the flushed event", line, err, resp.StatusCode)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	deadline := time.Now().Add(5 * time.Second)
	for len(spans.Ended()) == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	ended := spans.Ended()
	if len(ended) != 1 {
		t.Fatalf("%d spans ended, want 1", len(ended))
	}
	if got, _ := ptr(attribute.NewSet(ended[0].Attributes()...)).Value("http.response.status_code"); got.AsInt64() != http.StatusOK {
		t.Fatalf("span status code = %v, want 200", got.Emit())
	}
}

// Without a recording span (the process samples nothing) the handler
// still measures.
func TestHTTPHandlerWithoutRecordingSpans(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	h, err := NewHTTPHandler(http.NotFoundHandler(), tp, sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequestWithContext(context.Background(), "GET", "/x", nil))
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	if points := durationPoints(t, rm); rec.Code != 404 || len(points) != 1 {
		t.Fatalf("code %d, points %+v", rec.Code, points)
	}
}

// BenchmarkHTTPHandler is the CPU and allocations the handler adds to a
// request, with the process's providers as Setup makes them.
func BenchmarkHTTPHandler(b *testing.B) {
	tel, err := Setup(b.Context(), Options{ServiceName: "conch-bench"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true}`)
	})
	traced, err := NewHTTPHandler(mux, tel.TracerProvider(), tel.MeterProvider())
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		h    http.Handler
	}{{"bare", mux}, {"traced", traced}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(`{}`))
				c.h.ServeHTTP(httptest.NewRecorder(), r)
			}
		})
	}
}
