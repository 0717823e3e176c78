package etcdx

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap/zapcore"

	"github.com/conch-sh/conch/services/internal/platform/dirlock"
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
	// QuotaBytes is the backend quota: past it etcd raises NOSPACE and
	// refuses writes. Zero means 2 GiB.
	QuotaBytes int64
	// TLS, when set, makes etcd serve clients and its peer over TLS and
	// accept only clients holding a certificate its CA signed; with auth
	// on, each client's user is its certificate's common name.
	TLS *ServerTLS
}

// ServerTLS are the files of an etcd member's TLS: the CA that signs the
// clients it accepts, and its own certificate.
type ServerTLS struct {
	CAFile, CertFile, KeyFile string
	// Root, when set, is a client of the user root (a certificate whose
	// common name is root): with it the member turns etcd's
	// authentication on once it serves, so that every request is checked
	// against the permissions of its certificate's user.
	Root *tls.Config
}

func (t *ServerTLS) info() transport.TLSInfo {
	return transport.TLSInfo{CertFile: t.CertFile, KeyFile: t.KeyFile, TrustedCAFile: t.CAFile, ClientCertAuth: true}
}

// Embedded is an etcd member running inside the process: a single
// member on loopback (StartEmbedded) or one of a static cluster
// (StartMember). It holds its data dir (package dirlock) until closed.
type Embedded struct {
	etcd      *embed.Etcd
	endpoints []string
	mute      *atomic.Bool
	lock      *dirlock.Lock
}

// lockHolder is what a process refused an etcd data dir is told holds it.
const lockHolder = "etcd"

// StartEmbedded starts a single-member etcd on free loopback ports and
// waits until it serves, for up to 30s or as long as ctx allows. It
// retries with new ports if another process grabbed a chosen port first.
// Auto-compaction keeps one hour of history and the backend quota is
// 2 GiB unless opts says otherwise. Another etcd holding opts.Dir is a
// *dirlock.HeldError.
func StartEmbedded(ctx context.Context, opts EmbeddedOptions) (*Embedded, error) {
	if opts.Dir == "" {
		return nil, errors.New("etcdx: start embedded etcd: no data dir")
	}
	ctx, cancel := context.WithTimeoutCause(ctx, embeddedStartTimeout, fmt.Errorf("not ready after %v: %w", embeddedStartTimeout, context.DeadlineExceeded))
	defer cancel()
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
	if opts.TLS != nil {
		clientURL.Scheme, peerURL.Scheme = "https", "https"
	}

	cfg := newConfig("conch", opts.Dir, *clientURL, *peerURL, opts.UnsafeNoFsync)
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	if opts.QuotaBytes > 0 {
		cfg.QuotaBackendBytes = opts.QuotaBytes
	}
	if opts.TLS != nil {
		cfg.ClientTLSInfo, cfg.PeerTLSInfo = opts.TLS.info(), opts.TLS.info()
	}
	emb, err := start(ctx, cfg, opts.Logger, clientURL.String())
	if err != nil {
		return nil, err
	}
	if err := waitReady(ctx, emb.etcd); err != nil {
		emb.Close()
		return nil, err
	}
	if opts.TLS != nil && opts.TLS.Root != nil {
		if err := EnableAuth(ctx, emb.endpoints, opts.TLS.Root); err != nil {
			emb.Close()
			return nil, err
		}
	}
	return emb, nil
}

// EnableAuth turns etcd's authentication on, as the user root of the
// client certificate in root: it makes the root user and role when they
// are missing. Already on, it changes nothing.
func EnableAuth(ctx context.Context, endpoints []string, root *tls.Config) error {
	cli, err := NewClient(ctx, ClientOptions{Endpoints: endpoints, TLS: root})
	if err != nil {
		return fmt.Errorf("etcdx: enable auth: %w", err)
	}
	defer cli.Close()
	st, err := cli.AuthStatus(ctx)
	if err != nil {
		return fmt.Errorf("etcdx: enable auth: %w", err)
	}
	if st.Enabled {
		return nil
	}
	if _, err := cli.RoleAdd(ctx, "root"); err != nil && !errors.Is(err, rpctypes.ErrRoleAlreadyExist) {
		return fmt.Errorf("etcdx: enable auth: add role root: %w", err)
	}
	if _, err := cli.UserAddWithOptions(ctx, "root", "", &clientv3.UserAddOptions{NoPassword: true}); err != nil && !errors.Is(err, rpctypes.ErrUserAlreadyExist) {
		return fmt.Errorf("etcdx: enable auth: add user root: %w", err)
	}
	if _, err := cli.UserGrantRole(ctx, "root", "root"); err != nil {
		return fmt.Errorf("etcdx: enable auth: grant root: %w", err)
	}
	if _, err := cli.AuthEnable(ctx); err != nil {
		return fmt.Errorf("etcdx: enable auth: %w", err)
	}
	return nil
}

// newConfig is the configuration every embedded etcd of conch shares:
// one client and one peer URL, listened on and advertised as they are;
// auto-compaction keeping one hour of history; a 2 GiB backend quota; etcd's
// own logging at error level.
func newConfig(name, dir string, clientURL, peerURL url.URL, noFsync bool) *embed.Config {
	cfg := embed.NewConfig()
	cfg.Name = name
	cfg.Dir = dir
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.AutoCompactionMode = embed.CompactorModePeriodic
	cfg.AutoCompactionRetention = embeddedCompaction
	cfg.QuotaBackendBytes = embeddedQuotaBytes
	cfg.UnsafeNoFsync = noFsync
	cfg.LogLevel = "error"
	return cfg
}

// start takes cfg.Dir for this process (package dirlock), so that a
// second etcd on it is refused at once instead of waiting, unbounded and
// in silence, for etcd's lock on its backend; then it starts etcd there,
// with its logs routed to log, reached at endpoint.
//
// It returns when ctx ends, whatever etcd is doing: embed.StartEtcd takes
// no context, and waits without bound for that backend lock when an etcd
// conch did not start holds it. That start is then left to finish on its
// own; what it started is closed and the dir given up after it.
func start(ctx context.Context, cfg *embed.Config, log *slog.Logger, endpoint string) (*Embedded, error) {
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, err
	}
	lock, err := dirlock.Acquire(cfg.Dir, lockHolder)
	if err != nil {
		return nil, err
	}
	// mute silences etcd's logs for an orderly close.
	mute := new(atomic.Bool)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zapLogger(log, zapcore.ErrorLevel, mute))
	type started struct {
		e   *embed.Etcd
		err error
	}
	done := make(chan started, 1)
	go func() {
		e, err := embed.StartEtcd(cfg)
		done <- started{e, err}
	}()
	select {
	case s := <-done:
		if s.err != nil {
			_ = lock.Release()
			return nil, s.err
		}
		return &Embedded{etcd: s.e, endpoints: []string{endpoint}, mute: mute, lock: lock}, nil
	case <-ctx.Done():
		mute.Store(true)
		go func() {
			if s := <-done; s.err == nil {
				closeEtcd(s.e)
			}
			_ = lock.Release()
		}()
		return nil, fmt.Errorf("start: %w", context.Cause(ctx))
	}
}

// waitReady waits until e serves, fails, or ctx ends.
func waitReady(ctx context.Context, e *embed.Etcd) error {
	select {
	case <-e.Server.ReadyNotify():
		return nil
	case err := <-e.Err():
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
		return fmt.Errorf("wait until ready: %w", context.Cause(ctx))
	}
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

// Close stops etcd, waits for it to exit and gives its data dir up.
func (e *Embedded) Close() {
	e.mute.Store(true)
	closeEtcd(e.etcd)
	if e.lock != nil {
		_ = e.lock.Release()
	}
}

// closeEtcd stops e, serving or not. embed's Close waits for its client
// servers, which start only once the member serves or its server stops,
// and stops the server only after them: a member that never served (a
// member of a cluster without a quorum yet) is stopped first, or Close
// would wait for as long as the quorum takes (etcd-io/etcd#9533).
func closeEtcd(e *embed.Etcd) {
	select {
	case <-e.Server.ReadyNotify():
	default:
		e.Server.Stop()
	}
	e.Close()
}

// Permission is one key range an etcd user may read, or read and write:
// every key that starts with Prefix.
type Permission struct {
	Prefix string
	Write  bool
}

// EnsureUsers makes each user of users (a name and its permissions) an
// etcd user of a role of the same name holding exactly those
// permissions, as the user root of the client certificate in root. A user
// authenticates with a client certificate whose common name is its name;
// it has no password.
func EnsureUsers(ctx context.Context, endpoints []string, root *tls.Config, users map[string][]Permission) error {
	cli, err := NewClient(ctx, ClientOptions{Endpoints: endpoints, TLS: root})
	if err != nil {
		return fmt.Errorf("etcdx: users: %w", err)
	}
	defer cli.Close()
	for name, perms := range users {
		if _, err := cli.RoleAdd(ctx, name); err != nil && !errors.Is(err, rpctypes.ErrRoleAlreadyExist) {
			return fmt.Errorf("etcdx: add role %s: %w", name, err)
		}
		for _, p := range perms {
			kind := clientv3.PermissionType(clientv3.PermRead)
			if p.Write {
				kind = clientv3.PermissionType(clientv3.PermReadWrite)
			}
			if _, err := cli.RoleGrantPermission(ctx, name, p.Prefix, clientv3.GetPrefixRangeEnd(p.Prefix), kind); err != nil {
				return fmt.Errorf("etcdx: grant %s %s: %w", name, p.Prefix, err)
			}
		}
		if _, err := cli.UserAddWithOptions(ctx, name, "", &clientv3.UserAddOptions{NoPassword: true}); err != nil && !errors.Is(err, rpctypes.ErrUserAlreadyExist) {
			return fmt.Errorf("etcdx: add user %s: %w", name, err)
		}
		if _, err := cli.UserGrantRole(ctx, name, name); err != nil {
			return fmt.Errorf("etcdx: grant role %s: %w", name, err)
		}
		if err := revokeOthers(ctx, cli, name, perms); err != nil {
			return err
		}
	}
	return nil
}

// revokeOthers takes from user name's role every permission perms does
// not hold, and from the user every other role (root's, granted by hand):
// a permission dropped from a service's list, or given beside it, does
// not outlive the next run.
func revokeOthers(ctx context.Context, cli *clientv3.Client, name string, perms []Permission) error {
	want := map[string]bool{}
	for _, p := range perms {
		want[p.Prefix+"\x00"+clientv3.GetPrefixRangeEnd(p.Prefix)] = true
	}
	role, err := cli.RoleGet(ctx, name)
	if err != nil {
		return fmt.Errorf("etcdx: get role %s: %w", name, err)
	}
	for _, p := range role.Perm {
		if !want[string(p.Key)+"\x00"+string(p.RangeEnd)] {
			if _, err := cli.RoleRevokePermission(ctx, name, string(p.Key), string(p.RangeEnd)); err != nil {
				return fmt.Errorf("etcdx: revoke %s %q: %w", name, p.Key, err)
			}
		}
	}
	user, err := cli.UserGet(ctx, name)
	if err != nil {
		return fmt.Errorf("etcdx: get user %s: %w", name, err)
	}
	for _, r := range user.Roles {
		if r != name {
			if _, err := cli.UserRevokeRole(ctx, name, r); err != nil {
				return fmt.Errorf("etcdx: revoke role %s from %s: %w", r, name, err)
			}
		}
	}
	return nil
}
