// Package discovery registers conch services in etcd under a lease and
// dials them through etcd's gRPC naming resolver, so no service ever dials
// a hard-wired address.
//
// A service at addr registers the key conch/services/<service>/<addr>.
// Clients dial "etcd:///conch/services/<service>"; the resolver watches the
// prefix, so a connection follows services as they come, go and move.
package discovery

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/naming/resolver"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	// Also sets the buffer pool of gRPC that fits file messages.
	"github.com/conch-sh/conch/services/internal/platform/chunks"
)

// Prefix is the etcd key prefix under which services register.
const Prefix = "conch/services/"

// Target returns the endpoints-manager target of service, the key prefix
// its instances register under (without the trailing slash).
func Target(service string) string { return Prefix + service }

func checkService(service string) error {
	if service == "" || strings.Contains(service, "/") {
		return fmt.Errorf("discovery: invalid service name %q", service)
	}
	return nil
}

// Dial returns a client connection to service that resolves instances
// through etcd and balances round-robin across those that report SERVING,
// unless a call is pinned to one (Pin). The connection is
// lazy: it does not wait for an instance to exist; use CheckReady for
// that. opts are appended to the defaults (transport).
func Dial(ctx context.Context, cli *clientv3.Client, service string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	if err := checkService(service); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("discovery: dial %s: %w", service, err)
	}
	b, err := resolver.NewBuilder(cli)
	if err != nil {
		return nil, fmt.Errorf("discovery: dial %s: build resolver: %w", service, err)
	}
	opts = slices.Concat([]grpc.DialOption{
		grpc.WithResolvers(b),
		grpc.WithConnectParams(reconnect),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"` + Policy + `":{}}],"healthCheckConfig":{"serviceName":""}}`),
	}, transport, opts)
	conn, err := grpc.NewClient("etcd:///"+Target(service), opts...)
	if err != nil {
		return nil, fmt.Errorf("discovery: dial %s: %w", service, err)
	}
	return conn, nil
}

// reconnect is how connections retry an instance that went away. gRPC's
// default waits up to two minutes between attempts, so an instance that
// restarts at the address it had (a killed process started again, a pod
// that kept its IP) would get no calls for that long, even when it is the
// only one left. Peers inside a cluster are cheap to retry: attempts here
// back off from 200ms to at most 3s.
var reconnect = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 200 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 3 * time.Second},
	MinConnectTimeout: 3 * time.Second,
}

// transport are the dial options of every connection: plaintext,
// keepalive, fixed flow-control windows (chunks.Window), OpenTelemetry
// client instrumentation.
var transport = []grpc.DialOption{
	grpc.WithTransportCredentials(insecure.NewCredentials()),
	grpc.WithInitialWindowSize(chunks.Window),
	grpc.WithInitialConnWindowSize(chunks.ConnWindow),
	grpc.WithStatsHandler(otelgrpc.NewClientHandler()),
	grpc.WithKeepaliveParams(keepalive.ClientParameters{
		Time:                20 * time.Second,
		Timeout:             10 * time.Second,
		PermitWithoutStream: true,
	}),
}

// DialAddr returns a lazy client connection to the one instance at addr,
// whatever discovery and its health say of it: for calls only that
// instance can serve, such as those about what a draining instance still
// holds. A connection attempt gives up after a few seconds. opts are
// appended to the defaults, as for Dial.
func DialAddr(addr string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	opts = slices.Concat([]grpc.DialOption{grpc.WithConnectParams(reconnect)}, transport, opts)
	conn, err := grpc.NewClient("passthrough:///"+addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("discovery: dial %s: %w", addr, err)
	}
	return conn, nil
}

// Endpoints lists the addresses currently registered for service, sorted.
func Endpoints(ctx context.Context, cli *clientv3.Client, service string) ([]string, error) {
	ins, err := Instances(ctx, cli, service)
	if err != nil {
		return nil, err
	}
	addrs := make([]string, len(ins))
	for i, in := range ins {
		addrs[i] = in.Addr
	}
	return addrs, nil
}

// Instance is a registered instance of a service.
type Instance struct {
	Addr string
	// Metadata is what the instance registered beside its address.
	Metadata map[string]string
}

// Instances lists the instances registered for service, sorted by address.
func Instances(ctx context.Context, cli *clientv3.Client, service string) ([]Instance, error) {
	if err := checkService(service); err != nil {
		return nil, err
	}
	// As etcd's endpoints manager lists them: a serializable read.
	resp, err := cli.Get(ctx, Target(service)+"/", clientv3.WithPrefix(), clientv3.WithSerializable())
	if err != nil {
		return nil, fmt.Errorf("discovery: list %s: %w", service, err)
	}
	out := make([]Instance, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		if in, ok := instanceOf(kv.Value); ok {
			out = append(out, in)
		}
	}
	sortInstances(out)
	return out, nil
}

// ErrNotServing is returned by CheckReady when the service answers but
// reports that it is not serving.
var ErrNotServing = errors.New("not serving")

// CheckReady asks service over conn for its overall health and returns an
// error naming the service unless it reports SERVING.
func CheckReady(ctx context.Context, conn *grpc.ClientConn, service string) error {
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return fmt.Errorf("discovery: health check of %s: %w", service, err)
	}
	if s := resp.GetStatus(); s != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("discovery: %s is %v: %w", service, s, ErrNotServing)
	}
	return nil
}
