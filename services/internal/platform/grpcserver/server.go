// Package grpcserver is the one gRPC server bootstrap shared by all conch
// services. A Server comes with the health and reflection services,
// OpenTelemetry instrumentation, panic recovery, mapping of domain errors
// to statuses (package errs) and a graceful shutdown that first drains
// traffic by reporting NOT_SERVING.
package grpcserver

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	// Also sets the buffer pool of gRPC that fits file messages.
	"github.com/conch-sh/conch/services/internal/platform/chunks"
	"github.com/conch-sh/conch/services/internal/platform/errs"
)

// Defaults for Options fields left zero.
const (
	DefaultMaxMsgSize  = 16 << 20
	DefaultStopTimeout = 10 * time.Second
)

// Options configures New.
type Options struct {
	// Name identifies the server in logs.
	Name string
	// Logger receives panics, internal errors and lifecycle events;
	// nil means slog.Default().
	Logger *slog.Logger
	// MaxRecvMsgSize and MaxSendMsgSize bound message sizes in bytes;
	// zero means DefaultMaxMsgSize.
	MaxRecvMsgSize, MaxSendMsgSize int
	// UnaryInterceptors and StreamInterceptors run after panic recovery
	// and before error mapping, in order.
	UnaryInterceptors  []grpc.UnaryServerInterceptor
	StreamInterceptors []grpc.StreamServerInterceptor
	// DrainDelay is how long Shutdown keeps serving after reporting
	// NOT_SERVING, so that clients and load balancers move away first.
	DrainDelay time.Duration
	// StopTimeout bounds the graceful stop; when it passes, remaining
	// RPCs are cancelled. Zero means DefaultStopTimeout.
	StopTimeout time.Duration
	// TracerProvider and MeterProvider instrument RPCs; nil means the
	// global providers.
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
}

// Server is a gRPC server with conch's standard services and middleware.
type Server struct {
	grpc        *grpc.Server
	health      *health.Server
	log         *slog.Logger
	drainDelay  time.Duration
	stopTimeout time.Duration
	stopOnce    sync.Once
}

// Keepalive settings: ping idle clients so dead peers are noticed, and let
// clients ping every 10s (discovery dials with 20s) without being cut off.
var (
	keepaliveParams = keepalive.ServerParameters{
		Time:    30 * time.Second,
		Timeout: 10 * time.Second,
	}
	keepalivePolicy = keepalive.EnforcementPolicy{
		MinTime:             10 * time.Second,
		PermitWithoutStream: true,
	}
)

// New builds a Server. Register services on GRPC() before calling Serve.
func New(opts Options) *Server {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	if opts.Name != "" {
		log = log.With(slog.String("server", opts.Name))
	}
	if opts.MaxRecvMsgSize == 0 {
		opts.MaxRecvMsgSize = DefaultMaxMsgSize
	}
	if opts.MaxSendMsgSize == 0 {
		opts.MaxSendMsgSize = DefaultMaxMsgSize
	}
	if opts.StopTimeout == 0 {
		opts.StopTimeout = DefaultStopTimeout
	}

	var otelOpts []otelgrpc.Option
	if opts.TracerProvider != nil {
		otelOpts = append(otelOpts, otelgrpc.WithTracerProvider(opts.TracerProvider))
	}
	if opts.MeterProvider != nil {
		otelOpts = append(otelOpts, otelgrpc.WithMeterProvider(opts.MeterProvider))
	}

	unary := append([]grpc.UnaryServerInterceptor{recoverUnary(log)}, opts.UnaryInterceptors...)
	unary = append(unary, errs.UnaryServerInterceptor(log))
	stream := append([]grpc.StreamServerInterceptor{recoverStream(log)}, opts.StreamInterceptors...)
	stream = append(stream, errs.StreamServerInterceptor(log))

	gs := grpc.NewServer(
		grpc.StatsHandler(otelgrpc.NewServerHandler(otelOpts...)),
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
		grpc.MaxRecvMsgSize(opts.MaxRecvMsgSize),
		grpc.MaxSendMsgSize(opts.MaxSendMsgSize),
		grpc.KeepaliveParams(keepaliveParams),
		grpc.KeepaliveEnforcementPolicy(keepalivePolicy),
		grpc.InitialWindowSize(chunks.Window),
		grpc.InitialConnWindowSize(chunks.ConnWindow),
	)
	hs := health.NewServer()
	// Not serving until Serve is called.
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)

	return &Server{
		grpc:        gs,
		health:      hs,
		log:         log,
		drainDelay:  opts.DrainDelay,
		stopTimeout: opts.StopTimeout,
	}
}

// GRPC returns the underlying server for registering services.
func (s *Server) GRPC() *grpc.Server { return s.grpc }

// Health returns the health service, for reporting per-service status.
func (s *Server) Health() *health.Server { return s.health }

// Serve marks every registered service and the server as a whole ("")
// SERVING and serves lis until Shutdown. It returns nil after Shutdown.
func (s *Server) Serve(lis net.Listener) error {
	for name := range s.grpc.GetServiceInfo() {
		s.health.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
	}
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.log.Info("grpc server serving", slog.String("addr", lis.Addr().String()))
	return s.grpc.Serve(lis)
}

// Shutdown reports NOT_SERVING for every service, keeps serving for
// DrainDelay, then stops gracefully, cancelling RPCs still running after
// StopTimeout. ctx bounds the whole shutdown: when it is done, the drain is
// cut short and remaining RPCs are cancelled at once, so pass a fresh
// context rather than one already cancelled by a signal. Shutdown returns
// when the server has stopped.
func (s *Server) Shutdown(ctx context.Context) {
	s.stopOnce.Do(func() { s.shutdown(ctx) })
}

func (s *Server) shutdown(ctx context.Context) {
	s.health.Shutdown()
	s.log.InfoContext(ctx, "grpc server draining", slog.Duration("drain_delay", s.drainDelay))
	if s.drainDelay > 0 {
		t := time.NewTimer(s.drainDelay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}

	stopped := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(stopped)
	}()
	t := time.NewTimer(s.stopTimeout)
	defer t.Stop()
	select {
	case <-stopped:
		s.log.InfoContext(ctx, "grpc server stopped")
		return
	case <-t.C:
	case <-ctx.Done():
	}
	s.log.WarnContext(ctx, "grpc server graceful stop timed out; cancelling remaining RPCs")
	s.grpc.Stop()
	<-stopped
}
