// Package telemetry sets up OpenTelemetry tracing, metrics and log
// records for a process: traces and log records (the audit trail's) go to
// an OTLP collector when one is configured, metrics are served in
// Prometheus text format from a registry owned by the process.
//
// Setup installs the global tracer, meter and logger providers and the
// propagator, so call it once per process. When several services share a
// process (conch dev), they share one Telemetry named for the process,
// e.g. "conch-dev"; each service is told apart by its instrumentation
// scope and RPC attributes.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploggrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/propagation"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Options configures Setup.
type Options struct {
	// ServiceName is the service.name resource attribute. Required.
	ServiceName string
	// OTLPEndpoint is the OTLP/gRPC collector to export traces and log
	// records to, as host:port (plaintext) or a URL (http:// plaintext,
	// https:// TLS). Empty disables export; spans then record nothing but
	// still get their IDs and are propagated, so trace ids appear in logs,
	// audit records and downstream calls.
	OTLPEndpoint string
}

// Telemetry owns the process's tracer and meter providers and its
// Prometheus registry.
type Telemetry struct {
	tp      trace.TracerProvider
	sdk     *sdktrace.TracerProvider // tp with an OTLP endpoint, else nil
	mp      *sdkmetric.MeterProvider
	lp      *sdklog.LoggerProvider // nil without an OTLP endpoint
	metrics http.Handler
}

// Setup creates the providers, registers them and the W3C trace context
// and baggage propagator globally, and returns a Telemetry to serve
// metrics from and shut down.
func Setup(ctx context.Context, opts Options) (*Telemetry, error) {
	if opts.ServiceName == "" {
		return nil, errors.New("telemetry: setup: service name is empty")
	}
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithAttributes(attribute.String("service.name", opts.ServiceName)),
		resource.WithFromEnv(),
	)
	if err != nil {
		return nil, fmt.Errorf("telemetry: build resource for %s: %w", opts.ServiceName, err)
	}

	reg := prometheus.NewRegistry()
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, fmt.Errorf("telemetry: register go collector: %w", err)
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, fmt.Errorf("telemetry: register process collector: %w", err)
	}
	metricExp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("telemetry: create prometheus exporter: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithResource(res), sdkmetric.WithReader(metricExp))

	t := &Telemetry{tp: idsOnly{}, mp: mp, metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})}
	if opts.OTLPEndpoint != "" {
		traceExp, logExp, err := newExporters(ctx, opts.OTLPEndpoint)
		if err != nil {
			return nil, errors.Join(err, mp.Shutdown(ctx))
		}
		// idsOnly samples as this sampler does.
		t.sdk = sdktrace.NewTracerProvider(
			sdktrace.WithResource(res),
			sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())),
			sdktrace.WithBatcher(traceExp))
		t.tp = t.sdk
		t.lp = sdklog.NewLoggerProvider(sdklog.WithResource(res), sdklog.WithProcessor(sdklog.NewBatchProcessor(logExp)))
		otel.SetLoggerProvider(t.lp)
	}

	otel.SetTracerProvider(t.tp)
	otel.SetMeterProvider(mp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(
		propagation.TraceContext{}, propagation.Baggage{},
	))
	return t, nil
}

// newExporters returns the OTLP/gRPC exporters of spans and log records
// for endpoint.
func newExporters(ctx context.Context, endpoint string) (sdktrace.SpanExporter, sdklog.Exporter, error) {
	var traceOpts []otlptracegrpc.Option
	var logOpts []otlploggrpc.Option
	if strings.Contains(endpoint, "://") {
		u, err := url.Parse(endpoint)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, nil, fmt.Errorf("telemetry: invalid OTLP endpoint %q: want host:port or an http(s) URL", endpoint)
		}
		traceOpts = append(traceOpts, otlptracegrpc.WithEndpointURL(endpoint))
		logOpts = append(logOpts, otlploggrpc.WithEndpointURL(endpoint))
	} else {
		traceOpts = append(traceOpts, otlptracegrpc.WithEndpoint(endpoint), otlptracegrpc.WithInsecure())
		logOpts = append(logOpts, otlploggrpc.WithEndpoint(endpoint), otlploggrpc.WithInsecure())
	}
	traces, err := otlptracegrpc.New(ctx, traceOpts...)
	if err != nil {
		return nil, nil, fmt.Errorf("telemetry: create OTLP trace exporter for %s: %w", endpoint, err)
	}
	logs, err := otlploggrpc.New(ctx, logOpts...)
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("telemetry: create OTLP log exporter for %s: %w", endpoint, err), traces.Shutdown(ctx))
	}
	return traces, logs, nil
}

// MetricsHandler serves the process's metrics in Prometheus format.
func (t *Telemetry) MetricsHandler() http.Handler { return t.metrics }

// TracerProvider returns the process's tracer provider.
func (t *Telemetry) TracerProvider() trace.TracerProvider { return t.tp }

// MeterProvider returns the process's meter provider.
func (t *Telemetry) MeterProvider() *sdkmetric.MeterProvider { return t.mp }

// Shutdown flushes pending spans and log records and stops the providers.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	err := t.mp.Shutdown(ctx)
	if t.sdk != nil {
		err = errors.Join(err, t.sdk.Shutdown(ctx))
	}
	if t.lp != nil {
		err = errors.Join(err, t.lp.Shutdown(ctx))
	}
	if err != nil {
		return fmt.Errorf("telemetry: shutdown: %w", err)
	}
	return nil
}
