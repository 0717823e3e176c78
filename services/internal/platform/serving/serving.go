// Package serving runs one conch service: its gRPC server on a listener,
// registered in etcd for discovery, until the context ends, then an orderly
// shutdown — deregister, NOT_SERVING, drain, GracefulStop with a deadline.
// Both `conch dev` and the single-service commands run services this way.
package serving

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/conch-sh/conch/services/internal/platform/discovery"
	"github.com/conch-sh/conch/services/internal/platform/grpcserver"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
)

// Options describe one service to run.
type Options struct {
	// Name is the service name in discovery ("router", "executor", ...).
	Name string
	// Listener is where the gRPC server listens.
	Listener net.Listener
	// AdvertiseAddr is the address registered in etcd; empty means the
	// listener's address, which must then not be a wildcard.
	AdvertiseAddr string
	// Etcd is the cluster's etcd client.
	Etcd *clientv3.Client
	// Signer verifies the router's signed scope on incoming calls.
	Signer *tenant.Signer
	// Register registers the service's gRPC handlers.
	Register func(*grpc.Server)
	// Logger receives lifecycle events.
	Logger *slog.Logger
	// LeaseTTL is the registration lease; zero means the discovery default.
	LeaseTTL time.Duration
	// Metadata is registered with the address (e.g. an executor's
	// capacity).
	Metadata map[string]string
	// DrainDelay and StopTimeout tune shutdown (see grpcserver.Options).
	DrainDelay, StopTimeout time.Duration
	// TracerProvider and MeterProvider instrument the server.
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
}

// Advertised returns the address a service listening on lis registers:
// advertise when set, else the listener's own address, which must then be
// dialable (not a wildcard).
func Advertised(lis net.Listener, advertise string) (string, error) {
	addr := advertise
	if addr == "" {
		addr = lis.Addr().String()
	}
	if host, _, err := net.SplitHostPort(addr); err != nil || host == "" || net.ParseIP(host).IsUnspecified() {
		return "", fmt.Errorf("advertise address %q is not dialable; set --advertise-addr", addr)
	}
	return addr, nil
}

// Run serves until ctx ends, then shuts down. It returns nil after a clean
// shutdown caused by ctx, or the error that stopped the server.
func Run(ctx context.Context, opts Options) error {
	if opts.Name == "" || opts.Listener == nil || opts.Etcd == nil || opts.Signer == nil || opts.Register == nil {
		return errors.New("serving: Name, Listener, Etcd, Signer and Register are required")
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("service", opts.Name)
	addr, err := Advertised(opts.Listener, opts.AdvertiseAddr)
	if err != nil {
		return fmt.Errorf("serving: %s: %w", opts.Name, err)
	}

	srv := grpcserver.New(grpcserver.Options{
		Name:               opts.Name,
		Logger:             log,
		UnaryInterceptors:  []grpc.UnaryServerInterceptor{opts.Signer.UnaryServerInterceptor()},
		StreamInterceptors: []grpc.StreamServerInterceptor{opts.Signer.StreamServerInterceptor()},
		DrainDelay:         opts.DrainDelay,
		StopTimeout:        opts.StopTimeout,
		TracerProvider:     opts.TracerProvider,
		MeterProvider:      opts.MeterProvider,
	})
	opts.Register(srv.GRPC())

	served := make(chan error, 1)
	go func() { served <- srv.Serve(opts.Listener) }()

	// Registration finishes even if shutdown is asked for meanwhile: an
	// endpoint written to etcd but not acknowledged would otherwise stay
	// until its lease expires. The shutdown below deregisters it.
	regCtx, cancelReg := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	reg, err := discovery.Register(regCtx, opts.Etcd, opts.Name, addr, discovery.RegisterOptions{TTL: opts.LeaseTTL, Metadata: opts.Metadata, Logger: log})
	cancelReg()
	if err != nil {
		srv.Shutdown(context.WithoutCancel(ctx))
		return fmt.Errorf("serving: register %s: %w", opts.Name, err)
	}
	log.Info("service started", "addr", addr)

	select {
	case <-ctx.Done():
	case err := <-served:
		_ = reg.Close(context.WithoutCancel(ctx))
		return fmt.Errorf("serving: %s stopped: %w", opts.Name, err)
	}

	// Leave discovery first so no new calls arrive, then drain.
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := reg.Close(stopCtx); err != nil {
		log.Warn("deregister failed", "error", err)
	}
	srv.Shutdown(context.WithoutCancel(ctx))
	if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("serving: %s: %w", opts.Name, err)
	}
	log.Info("service stopped")
	return nil
}
