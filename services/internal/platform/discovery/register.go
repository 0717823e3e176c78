package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/naming/endpoints"
)

// DefaultTTL is the registration lease TTL when RegisterOptions leaves it
// zero: how long a killed instance stays listed.
const DefaultTTL = 10 * time.Second

// Bounds of the wait between attempts to register again after the lease
// was lost.
const (
	minRetryDelay = 100 * time.Millisecond
	maxRetryDelay = 5 * time.Second
)

// RegisterOptions configures Register.
type RegisterOptions struct {
	// TTL of the lease, rounded up to whole seconds; zero means
	// DefaultTTL.
	TTL time.Duration
	// Metadata is stored with the endpoint.
	Metadata map[string]string
	// Logger receives registration losses and retries; nil means
	// slog.Default().
	Logger *slog.Logger
}

// Registration keeps one service instance registered until Close.
type Registration struct {
	cli      *clientv3.Client
	em       endpoints.Manager
	key      string
	endpoint endpoints.Endpoint
	ttl      int64
	log      *slog.Logger

	cancel context.CancelFunc
	done   chan struct{}

	mu    sync.Mutex
	lease clientv3.LeaseID

	closeOnce sync.Once
	closeErr  error
}

// Register lists the instance of service at addr in etcd under a lease
// and keeps the lease alive in the background. If the lease is lost, for
// example because etcd was unreachable for longer than the TTL, it
// registers again with backoff. The registration ends with Close, or when
// cli is closed, in which case the lease is left to expire.
func Register(ctx context.Context, cli *clientv3.Client, service, addr string, opts RegisterOptions) (*Registration, error) {
	if err := checkService(service); err != nil {
		return nil, err
	}
	if addr == "" {
		return nil, fmt.Errorf("discovery: register %s: empty address", service)
	}
	if opts.TTL == 0 {
		opts.TTL = DefaultTTL
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	em, err := endpoints.NewManager(cli, Target(service))
	if err != nil {
		return nil, fmt.Errorf("discovery: register %s at %s: %w", service, addr, err)
	}
	key := Target(service) + "/" + addr
	r := &Registration{
		cli:      cli,
		em:       em,
		key:      key,
		endpoint: endpoints.Endpoint{Addr: addr},
		ttl:      max(1, int64(math.Ceil(opts.TTL.Seconds()))),
		log:      opts.Logger.With(slog.String("service", service), slog.String("key", key)),
		done:     make(chan struct{}),
	}
	if opts.Metadata != nil {
		r.endpoint.Metadata = opts.Metadata
	}
	lease, err := r.register(ctx)
	if err != nil {
		return nil, fmt.Errorf("discovery: register %s at %s: %w", service, addr, err)
	}
	// The client's context ends the keepalive loop when the client is
	// closed, like a killed process would.
	loopCtx, cancel := context.WithCancel(cli.Ctx())
	r.cancel = cancel
	go r.run(loopCtx, lease)
	return r, nil
}

// register grants a lease and puts the endpoint under it.
func (r *Registration) register(ctx context.Context) (clientv3.LeaseID, error) {
	grant, err := r.cli.Grant(ctx, r.ttl)
	if err != nil {
		return 0, fmt.Errorf("grant lease: %w", err)
	}
	if err := r.em.AddEndpoint(ctx, r.key, r.endpoint, clientv3.WithLease(grant.ID)); err != nil {
		// The unused lease expires on its own.
		return 0, fmt.Errorf("add endpoint: %w", err)
	}
	r.mu.Lock()
	r.lease = grant.ID
	r.mu.Unlock()
	return grant.ID, nil
}

// run keeps lease alive and registers again whenever it is lost.
func (r *Registration) run(ctx context.Context, lease clientv3.LeaseID) {
	defer close(r.done)
	for {
		ch, err := r.cli.KeepAlive(ctx, lease)
		if err == nil {
			for range ch {
			}
		}
		if ctx.Err() != nil {
			return
		}
		r.log.WarnContext(ctx, "service registration lost; registering again", slog.Any("error", err))
		if lease = r.reregister(ctx); lease == 0 {
			return
		}
	}
}

// reregister retries register with jittered exponential backoff until it
// succeeds or ctx ends, in which case it returns 0.
func (r *Registration) reregister(ctx context.Context) clientv3.LeaseID {
	delay := minRetryDelay
	for {
		attemptCtx, cancel := context.WithTimeout(ctx, time.Duration(r.ttl)*time.Second)
		lease, err := r.register(attemptCtx)
		cancel()
		if err == nil {
			r.log.InfoContext(ctx, "service registered again")
			return lease
		}
		if ctx.Err() != nil {
			return 0
		}
		wait := delay/2 + rand.N(delay/2+1)
		r.log.WarnContext(ctx, "service registration failed; retrying",
			slog.Any("error", err), slog.Duration("retry_in", wait))
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return 0
		}
		delay = min(2*delay, maxRetryDelay)
	}
}

// Close stops the keepalive and revokes the lease, which deletes the
// endpoint. Revoking rather than deleting the key by name leaves alone a
// newer registration at the same address by another instance. Calls after
// the first return the first result.
func (r *Registration) Close(ctx context.Context) error {
	r.closeOnce.Do(func() { r.closeErr = r.close(ctx) })
	return r.closeErr
}

func (r *Registration) close(ctx context.Context) error {
	r.cancel()
	select {
	case <-r.done:
	case <-ctx.Done():
		return fmt.Errorf("discovery: deregister %s: %w", r.key, ctx.Err())
	}
	r.mu.Lock()
	lease := r.lease
	r.mu.Unlock()
	if _, err := r.cli.Revoke(ctx, lease); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("discovery: deregister %s: revoke lease: %w", r.key, err)
	}
	return nil
}
