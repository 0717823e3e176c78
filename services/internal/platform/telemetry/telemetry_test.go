package telemetry

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
)

func TestSetup(t *testing.T) {
	tests := []struct {
		name    string
		opts    Options
		wantErr bool
	}{
		{name: "no exporter", opts: Options{ServiceName: "conch-test"}},
		{name: "otlp host:port", opts: Options{ServiceName: "conch-test", OTLPEndpoint: "127.0.0.1:4317"}},
		{name: "otlp url", opts: Options{ServiceName: "conch-test", OTLPEndpoint: "http://127.0.0.1:4317"}},
		{name: "bad url", opts: Options{ServiceName: "conch-test", OTLPEndpoint: "ftp://x:1"}, wantErr: true},
		{name: "no service name", opts: Options{}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tel, err := Setup(t.Context(), tt.opts)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Setup() error = %v, wantErr %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			// Nothing listens on the OTLP port and no span was ended, so
			// shutdown has nothing to flush and returns promptly.
			if err := tel.Shutdown(t.Context()); err != nil {
				t.Errorf("Shutdown: %v", err)
			}
		})
	}
}

func TestMetricsHandler(t *testing.T) {
	tel, err := Setup(t.Context(), Options{ServiceName: "conch-test"})
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	t.Cleanup(func() {
		if err := tel.Shutdown(t.Context()); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})

	counter, err := tel.MeterProvider().Meter("conch/test").Int64Counter("conch_test_widgets")
	if err != nil {
		t.Fatalf("Int64Counter: %v", err)
	}
	counter.Add(t.Context(), 3)

	srv := httptest.NewServer(tel.MetricsHandler())
	t.Cleanup(srv.Close)
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read /metrics: %v", err)
	}
	text := string(body)

	tests := []struct{ name, want string }{
		{"counter", "# TYPE conch_test_widgets_total counter"},
		{"counter value", "} 3\n"},
		{"service name", `service_name="conch-test"`},
		{"go collector", "go_goroutines "},
		{"process collector", "process_start_time_seconds "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(text, tt.want) {
				t.Errorf("/metrics lacks %q:\n%s", tt.want, text)
			}
		})
	}
}

func TestTracingIsGlobal(t *testing.T) {
	tel, err := Setup(t.Context(), Options{ServiceName: "conch-test"})
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(t.Context()) })

	ctx, span := otel.Tracer("conch/test").Start(t.Context(), "op")
	defer span.End()
	if !span.SpanContext().IsValid() || !span.SpanContext().IsSampled() {
		t.Fatalf("span context = %+v, want valid and sampled", span.SpanContext())
	}
	carrier := propagation.MapCarrier{}
	otel.GetTextMapPropagator().Inject(ctx, carrier)
	if !strings.Contains(carrier.Get("traceparent"), span.SpanContext().TraceID().String()) {
		t.Errorf("traceparent = %q, want the span's trace id", carrier.Get("traceparent"))
	}
}
