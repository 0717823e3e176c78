package etcdx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"sync/atomic"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap/zapcore"
)

// Embedded etcd settings.
const (
	embeddedStartTimeout = 30 * time.Second
	embeddedBindAttempts = 5
	embeddedQuotaBytes   = 2 << 30
	embeddedCompaction   = "1h"
)

// EmbeddedOptions configures StartEmbedded.
type EmbeddedOptions struct {
	// Dir holds etcd's data; it is created if missing and reused if it
	// already holds a member. Required.
	Dir string
	// UnsafeNoFsync skips fsync. Data may be lost on a crash, so use it
	// only for tests and throwaway development clusters.
	UnsafeNoFsync bool
	// Logger receives etcd's error logs; nil discards them.
	Logger *slog.Logger
}

// Embedded is a single-member etcd running inside the process, listening
// on loopback only.
type Embedded struct {
	etcd      *embed.Etcd
	endpoints []string
	mute      *atomic.Bool
}

// StartEmbedded starts a single-member etcd on free loopback ports and
// waits until it serves. It retries with new ports if another process
// grabbed a chosen port first. Auto-compaction keeps one hour of history
// and the backend quota is 2 GiB.
func StartEmbedded(ctx context.Context, opts EmbeddedOptions) (*Embedded, error) {
	if opts.Dir == "" {
		return nil, errors.New("etcdx: start embedded etcd: no data dir")
	}
	var err error
	for range embeddedBindAttempts {
		var e *Embedded
		e, err = startEmbedded(ctx, opts)
		if err == nil {
			return e, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
	}
	return nil, fmt.Errorf("etcdx: start embedded etcd in %s: %w", opts.Dir, err)
}

func startEmbedded(ctx context.Context, opts EmbeddedOptions) (*Embedded, error) {
	clientURL, err := freeLoopbackURL()
	if err != nil {
		return nil, err
	}
	peerURL, err := freeLoopbackURL()
	if err != nil {
		return nil, err
	}

	cfg := embed.NewConfig()
	cfg.Name = "conch"
	cfg.Dir = opts.Dir
	cfg.ListenClientUrls = []url.URL{*clientURL}
	cfg.AdvertiseClientUrls = []url.URL{*clientURL}
	cfg.ListenPeerUrls = []url.URL{*peerURL}
	cfg.AdvertisePeerUrls = []url.URL{*peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.AutoCompactionMode = embed.CompactorModePeriodic
	cfg.AutoCompactionRetention = embeddedCompaction
	cfg.QuotaBackendBytes = embeddedQuotaBytes
	cfg.UnsafeNoFsync = opts.UnsafeNoFsync
	cfg.LogLevel = "error"
	mute := new(atomic.Bool)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zapLogger(opts.Logger, zapcore.ErrorLevel, mute))

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, err
	}
	timer := time.NewTimer(embeddedStartTimeout)
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("serve: %w", err)
	case <-timer.C:
		e.Close()
		return nil, fmt.Errorf("not ready after %v", embeddedStartTimeout)
	case <-ctx.Done():
		e.Close()
		return nil, fmt.Errorf("wait until ready: %w", ctx.Err())
	}
	return &Embedded{etcd: e, endpoints: []string{clientURL.String()}, mute: mute}, nil
}

// freeLoopbackURL returns an http URL on a loopback port that was free a
// moment ago. embed cannot listen on port 0 and report the port, so the
// port is found by listening and closing; a race with another process is
// handled by the caller's retry.
func freeLoopbackURL() (*url.URL, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("find a free port: %w", err)
	}
	addr := lis.Addr().String()
	if err := lis.Close(); err != nil {
		return nil, fmt.Errorf("find a free port: %w", err)
	}
	return &url.URL{Scheme: "http", Host: addr}, nil
}

// Endpoints returns the client URLs to connect to.
func (e *Embedded) Endpoints() []string { return e.endpoints }

// Err reports a fatal serving error after startup.
func (e *Embedded) Err() <-chan error { return e.etcd.Err() }

// Close stops etcd and waits for it to exit.
func (e *Embedded) Close() {
	e.mute.Store(true)
	e.etcd.Close()
}
