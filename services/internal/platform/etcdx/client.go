package etcdx

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/conch-sh/conch/services/internal/platform/errs"
)

// DefaultDialTimeout bounds connecting to etcd when ClientOptions leaves
// DialTimeout zero.
const DefaultDialTimeout = 5 * time.Second

// DefaultRequestTimeout bounds one etcd call when ClientOptions leaves
// RequestTimeout zero: longer than a leader election, so losing any one
// member goes unnoticed, and short enough that a request waiting on a
// cluster without quorum fails while its caller still waits for it.
const DefaultRequestTimeout = 5 * time.Second

// ErrNoAnswer is wrapped by the error of an etcd call that got no answer
// within the client's RequestTimeout.
var ErrNoAnswer = errors.New("etcd did not answer in time; the etcd cluster may have lost its quorum")

// Message size limits for etcd clients. The server rejects requests over
// 1.5 MiB by default, so sending more is pointless; responses (range reads)
// may be larger but are capped so a runaway read cannot exhaust memory.
const (
	maxCallSendMsgSize = 2 << 20
	maxCallRecvMsgSize = 64 << 20
)

// ClientOptions configures NewClient.
type ClientOptions struct {
	// Endpoints are etcd client URLs or host:port pairs. Required.
	Endpoints []string
	// DialTimeout bounds the connection check; zero means
	// DefaultDialTimeout.
	DialTimeout time.Duration
	// RequestTimeout bounds each unary call (reads, writes, leases,
	// including etcd's own retries); zero means DefaultRequestTimeout.
	// Watches and lease keepalives are streams and are not bounded.
	RequestTimeout time.Duration
	// Logger receives the etcd client's error logs; nil discards them.
	Logger *slog.Logger
	// TLS, when set, is how the client authenticates to etcd and
	// verifies it (a client certificate: mTLS); endpoints are then
	// https.
	TLS *tls.Config
}

// NewClient connects to etcd and checks that the cluster answers a read
// within DialTimeout, so a wrong endpoint fails at startup rather than on
// first use.
func NewClient(ctx context.Context, opts ClientOptions) (*clientv3.Client, error) {
	if len(opts.Endpoints) == 0 {
		return nil, errors.New("etcdx: connect to etcd: no endpoints")
	}
	if opts.DialTimeout == 0 {
		opts.DialTimeout = DefaultDialTimeout
	}
	if opts.RequestTimeout == 0 {
		opts.RequestTimeout = DefaultRequestTimeout
	}
	eps := strings.Join(opts.Endpoints, ",")
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:            opts.Endpoints,
		DialTimeout:          opts.DialTimeout,
		DialKeepAliveTime:    30 * time.Second,
		DialKeepAliveTimeout: 10 * time.Second,
		MaxCallSendMsgSize:   maxCallSendMsgSize,
		MaxCallRecvMsgSize:   maxCallRecvMsgSize,
		Logger:               zapLogger(opts.Logger, zapcore.ErrorLevel, new(atomic.Bool)),
		DialOptions: []grpc.DialOption{
			grpc.WithChainUnaryInterceptor(etcdMetadataOnlyUnary, boundCalls(opts.RequestTimeout)),
			grpc.WithChainStreamInterceptor(etcdMetadataOnlyStream),
		},
		TLS: opts.TLS,
	})
	if err != nil {
		return nil, fmt.Errorf("etcdx: connect to etcd at %s: %w", eps, err)
	}
	checkCtx, cancel := context.WithTimeout(ctx, opts.DialTimeout)
	defer cancel()
	// A linearizable read needs a leader, so it proves the cluster is
	// usable, not just that a socket opened. A user whose role may not
	// read all of conch/ is refused that read, which proves it as well.
	if _, err := cli.Get(checkCtx, "conch/", clientv3.WithCountOnly()); err != nil && !errors.Is(err, rpctypes.ErrPermissionDenied) {
		if ctx.Err() != nil {
			// Asked to stop while waiting: that is the reason, not etcd.
			return nil, errors.Join(fmt.Errorf("etcdx: connect to etcd at %s: %w", eps, context.Cause(ctx)), cli.Close())
		}
		return nil, errors.Join(
			fmt.Errorf("etcdx: etcd at %s did not answer within %v: %w", eps, opts.DialTimeout, err),
			cli.Close(),
		)
	}
	return cli, nil
}

// etcdMetadata are the only outgoing metadata an etcd call carries.
var etcdMetadata = []string{rpctypes.MetadataRequireLeaderKey, rpctypes.MetadataClientAPIVersionKey}

// etcdMetadataOnly drops every outgoing metadata key of ctx but etcd's
// own. A call made while serving a request would otherwise carry the
// request's metadata to etcd: grpc-gateway's "authorization" (a tenant's
// API key, which etcd reads as an auth token of its own) among them.
func etcdMetadataOnly(ctx context.Context) context.Context {
	md, ok := metadata.FromOutgoingContext(ctx)
	if !ok {
		return ctx
	}
	keep := metadata.MD{}
	for _, k := range etcdMetadata {
		if v := md.Get(k); len(v) > 0 {
			keep.Set(k, v...)
		}
	}
	return metadata.NewOutgoingContext(ctx, keep)
}

func etcdMetadataOnlyUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return invoker(etcdMetadataOnly(ctx), method, req, reply, cc, opts...)
}

func etcdMetadataOnlyStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return streamer(etcdMetadataOnly(ctx), desc, cc, method, opts...)
}

// boundCalls gives each unary etcd call at most timeout. Without a bound, a
// linearizable read on a cluster that lost its quorum waits for a leader
// that never comes, and etcd's client retries each such read up to a
// hundred times, so a request would hang for as long as the quorum is
// lost. A call out of time fails with an errs.Unavailable error wrapping
// ErrNoAnswer, which is not a gRPC status, so that etcd's retrying
// interceptor (which wraps this one) returns it rather than trying again.
func boundCalls(timeout time.Duration) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		callCtx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		err := invoker(callCtx, method, req, reply, cc, opts...)
		if err != nil && ctx.Err() == nil && callCtx.Err() != nil {
			return errs.Wrap(errs.Unavailable, ErrNoAnswer, "etcdx: %s: no answer within %v", path.Base(method), timeout)
		}
		return err
	}
}
