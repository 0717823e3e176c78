package etcdx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap/zapcore"
)

// DefaultDialTimeout bounds connecting to etcd when ClientOptions leaves
// DialTimeout zero.
const DefaultDialTimeout = 5 * time.Second

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
	// Logger receives the etcd client's error logs; nil discards them.
	Logger *slog.Logger
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
	eps := strings.Join(opts.Endpoints, ",")
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:            opts.Endpoints,
		DialTimeout:          opts.DialTimeout,
		DialKeepAliveTime:    30 * time.Second,
		DialKeepAliveTimeout: 10 * time.Second,
		MaxCallSendMsgSize:   maxCallSendMsgSize,
		MaxCallRecvMsgSize:   maxCallRecvMsgSize,
		Logger:               zapLogger(opts.Logger, zapcore.ErrorLevel, new(atomic.Bool)),
	})
	if err != nil {
		return nil, fmt.Errorf("etcdx: connect to etcd at %s: %w", eps, err)
	}
	checkCtx, cancel := context.WithTimeout(ctx, opts.DialTimeout)
	defer cancel()
	// A linearizable read needs a leader, so it proves the cluster is
	// usable, not just that a socket opened.
	if _, err := cli.Get(checkCtx, "conch/", clientv3.WithCountOnly()); err != nil {
		return nil, errors.Join(
			fmt.Errorf("etcdx: etcd at %s did not answer within %v: %w", eps, opts.DialTimeout, err),
			cli.Close(),
		)
	}
	return cli, nil
}
