// Package launch starts conch processes: one service against an external
// etcd (`conch router|executor|approval|workspace`), or the whole cluster in
// one process with embedded etcd (`conch dev`). Either way the services talk
// only through etcd discovery, exactly as in a cluster.
//
// Each service's own settings live beside it (router.Config and so on);
// launch adds the ones every service shares (Common), builds each service
// from its settings and runs all of them the same way (see component).
package launch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
	workspacev1 "github.com/conch-sh/conch/gen/go/conch/workspace/v1"
	"github.com/conch-sh/conch/services/approval"
	approvalstore "github.com/conch-sh/conch/services/approval/store"
	"github.com/conch-sh/conch/services/executor"
	"github.com/conch-sh/conch/services/executor/egressproxy"
	"github.com/conch-sh/conch/services/executor/hostexec"
	"github.com/conch-sh/conch/services/executor/sandbox"
	"github.com/conch-sh/conch/services/executor/sandbox/seccomp"
	"github.com/conch-sh/conch/services/executor/templatecache"
	"github.com/conch-sh/conch/services/executor/wsclient"
	"github.com/conch-sh/conch/services/internal/audit"
	"github.com/conch-sh/conch/services/internal/image"
	"github.com/conch-sh/conch/services/internal/outbound"
	"github.com/conch-sh/conch/services/internal/placement"
	"github.com/conch-sh/conch/services/internal/platform/discovery"
	"github.com/conch-sh/conch/services/internal/platform/etcdx"
	"github.com/conch-sh/conch/services/internal/platform/logging"
	"github.com/conch-sh/conch/services/internal/platform/telemetry"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/internal/quotas"
	"github.com/conch-sh/conch/services/internal/store"
	"github.com/conch-sh/conch/services/router"
	"github.com/conch-sh/conch/services/router/accounts"
)

// egressGuard is the guard of sandbox egress: the executor's
// --egress-deny, and etcd's hosts on every port. No --outbound-allow
// applies: the operator's exceptions are for tenants' model servers and
// tools, not for what a sandbox may reach.
func egressGuard(c *executor.Config, common *Common) (*outbound.Guard, error) {
	deny := slices.Clone(c.EgressDeny)
	for _, ep := range common.controlPlane() {
		if h, _, err := net.SplitHostPort(ep); err == nil {
			ep = h
		}
		deny = append(deny, ep)
	}
	return outbound.New(outbound.Options{Deny: deny})
}

// RunExecutor runs `conch executor`.
func RunExecutor(ctx context.Context, cfg ExecutorConfig) error {
	return runService(ctx, "executor", &cfg.Common, buildExecutor(cfg.Config, audit.DefaultFlushEvery))
}

// buildExecutor builds the executor service: its sandbox runtime under a
// per-instance state dir and cgroup, and its domain, which records the
// component's address as where its sandboxes are reached. Its audit
// records go to the approval service every auditFlush.
//
// The domain is the component's background work: its shutdown, which
// destroys the sandboxes and revokes the lease their records live under,
// begins only once the server has drained.
func buildExecutor(cfg executor.Config, auditFlush time.Duration) builder {
	return func(ctx context.Context, p *process, c *component) error {
		host, _ := os.Hostname()
		name := sandbox.InstanceName(strings.ReplaceAll(host, "-", "_"), strings.NewReplacer("-", "x", "_", "y").Replace(randomSecret()[:6]))
		if err := sandbox.SweepStale(cfg.SandboxStateDir, "/sys/fs/cgroup", cfg.SandboxCgroup); err != nil {
			p.log.Warn("sweeping stale sandboxes failed", "error", err)
		}
		dir := filepath.Join(cfg.SandboxStateDir, name)
		filter, err := seccomp.Program()
		if err != nil {
			return fmt.Errorf("executor: %w", err)
		}
		rt, err := sandbox.NewRuntime(sandbox.Config{
			StateDir: dir, Storage: cfg.SandboxStorage, RootFS: cfg.SandboxRootFS, UIDBase: cfg.SandboxUIDBase, UIDLockDir: cfg.SandboxUIDLockDir,
			CgroupParent: cfg.SandboxCgroup + "/" + name, ParentLimits: sandbox.ParentLimits{MemoryBytes: cfg.SandboxesMemoryBytes, Pids: cfg.SandboxesPids}, PoolSize: cfg.SandboxPool, LaunchAhead: cfg.LaunchAhead(), Logger: p.log,
			Seccomp: filter, TracerProvider: p.tel.TracerProvider(),
		})
		if err != nil {
			return fmt.Errorf("executor: %w", err)
		}
		c.onClose(rt.Close)
		wsConn, err := p.dial(ctx, "workspace")
		if err != nil {
			return fmt.Errorf("executor: dial workspace: %w", err)
		}
		c.onClose(func() { _ = wsConn.Close() })
		wsClient := workspacev1.NewWorkspaceServiceClient(wsConn)
		ws := wsclient.NewWorkspaces(wsClient, executor.PersistentWorkspaceBytes)
		routerConn, err := p.dial(ctx, "router")
		if err != nil {
			return fmt.Errorf("executor: dial router: %w", err)
		}
		c.onClose(func() { _ = routerConn.Close() })
		toolHost := routerv1.NewToolHostServiceClient(routerConn)
		callTool := func(ctx context.Context, account, sandboxID, tool, arguments string) (string, bool, error) {
			resp, err := toolHost.CallTool(tenant.With(ctx, tenant.Scope{Account: account}), &routerv1.CallToolRequest{SandboxId: sandboxID, Tool: tool, Arguments: arguments})
			if err != nil {
				if st, ok := status.FromError(err); ok {
					return "", false, errors.New(st.Message())
				}
				return "", false, err
			}
			return resp.GetOutput(), resp.GetIsError(), nil
		}
		guard, err := egressGuard(&cfg, p.common)
		if err != nil {
			return fmt.Errorf("executor: %w", err)
		}
		proxy := egressproxy.New(egressproxy.Config{Guard: guard, Log: p.log})
		opts := []executor.Option{executor.WithWorkspaces(ws), executor.WithSnapshots(wsclient.NewSnapshots(wsClient)), executor.WithToolCaller(callTool), executor.WithMaxSandboxes(cfg.MaxSandboxes), executor.WithAdmission(cfg.WorkSlots, cfg.AdmitWait), executor.WithFlushTimeout(cfg.FlushTimeout), executor.WithEgress(proxy), executor.WithCeilings(p.common.Ceilings), executor.WithQuotas(p.common.Quotas)}
		if cfg.TemplateCacheDir != "" {
			templates := wsclient.NewTemplates(workspacev1.NewTemplateServiceClient(wsConn))
			// The workspace service bounded each root when it built it;
			// the cache holds it to no more than it keeps in all, and
			// checks its digest.
			cache, err := templatecache.New(cfg.TemplateCacheDir, name, cfg.TemplateCacheBytes, image.Limits{MaxBytes: cfg.TemplateCacheBytes, MaxFiles: 1 << 22}, templates, p.log)
			if err != nil {
				return fmt.Errorf("executor: %w", err)
			}
			c.onClose(func() { _ = cache.Close() })
			opts = append(opts, executor.WithTemplates(templates, cache))
		}
		if cfg.GatewayHost {
			// Never as root: an unprivileged uid of its own, with no
			// supplementary groups, whose home no one else reads.
			uid := uint32(cfg.GatewayUID)
			r := &hostexec.Runner{Dir: cfg.GatewayWorkdir, Credential: &syscall.Credential{Uid: uid, Gid: uid}}
			if err := r.PrepareDir(); err != nil {
				return fmt.Errorf("executor: gateway host: %w", err)
			}
			opts = append(opts, executor.WithGatewayHost(r, cfg.GatewayHostFull))
		}
		apConn, err := p.dial(ctx, "approval")
		if err != nil {
			return fmt.Errorf("executor: dial approval: %w", err)
		}
		c.onClose(func() { _ = apConn.Close() })
		// Outcomes and connections go to the approval service's audit trail:
		// executors never reach the object store. The forwarder outlives the
		// domain, so that what the last commands record is sent.
		fwd := executor.NewAuditForwarder(approvalv1.NewAuditServiceClient(apConn), auditFlush, audit.DefaultMaxBuffered, p.log)
		opts = append(opts, executor.WithAudit(fwd))
		fctx, stopFwd := context.WithCancel(context.WithoutCancel(ctx))
		fwdDone := make(chan struct{})
		go func() { _ = fwd.Run(fctx); close(fwdDone) }()
		c.onClose(func() {
			stopFwd()
			<-fwdDone
		})
		svc, err := executor.NewService(ctx, name, c.addr, rt, p.etcd, p.log, opts...)
		if err != nil {
			return err
		}
		// The sandbox's full/off default asks no one, unless the account's
		// exec-approvals document holds deny rules for the agent: a watch
		// of the documents tells which.
		// It reads documents alone, so it holds no keys to the approval
		// service's sealed secrets.
		docs, err := approvalstore.New(p.etcd, approval.KeyPrefix, nil)
		if err != nil {
			return err
		}
		wctx, stopDocs := context.WithCancel(context.WithoutCancel(ctx))
		docsDone := make(chan struct{})
		go func() { _ = docs.WatchDocuments(wctx); close(docsDone) }()
		c.onClose(func() {
			stopDocs()
			<-docsDone
		})
		srv := executor.NewServer(svc).WithApprovals(approvalv1.NewApprovalServiceClient(apConn), docs)
		c.register = srv.Register
		c.meta = executorMeta(svc)
		c.run = svc.Run
		// New sandboxes go elsewhere as soon as the shutdown begins, and so
		// do nodes: a node's stream would hold the drain to its deadline.
		c.drain = svc.Drain
		return nil
	}
}

// executorMeta is what an executor registers beside its address: its
// capacity, which the router places sandboxes by.
func executorMeta(svc *executor.Service) map[string]string {
	return map[string]string{placement.MetaMaxSandboxes: strconv.Itoa(svc.MaxSandboxes())}
}

// process is what every conch process sets up before its services: logging,
// telemetry, an etcd client and the scope signer.
type process struct {
	common *Common
	// outbound guards the connections made for tenants (package
	// outbound): the operator's settings, with etcd as control plane.
	outbound *outbound.Guard
	log      *slog.Logger
	tel      *telemetry.Telemetry
	etcd     *clientv3.Client
	signer   *tenant.Signer
}

// newProcess sets up the process named name (its telemetry service name)
// from the settings in c.
func newProcess(ctx context.Context, name string, c *Common) (*process, error) {
	lvl, err := logging.ParseLevel(c.LogLevel)
	if err != nil {
		return nil, err
	}
	p := &process{common: c, outbound: c.Config.Guard(c.controlPlane()...), log: logging.New(os.Stderr, lvl)}
	slog.SetDefault(p.log)
	if p.tel, err = telemetry.Setup(ctx, telemetry.Options{ServiceName: name, OTLPEndpoint: c.OTLPEndpoint}); err != nil {
		return nil, err
	}
	if p.signer, err = tenant.NewSigner(c.InternalSecret); err != nil {
		p.close(ctx)
		return nil, err
	}
	etcdTLS, err := c.etcdTLS()
	if err != nil {
		p.close(ctx)
		return nil, err
	}
	if p.etcd, err = etcdx.NewClient(ctx, etcdx.ClientOptions{
		Endpoints: c.EtcdEndpoints, DialTimeout: 5 * time.Second, RequestTimeout: c.EtcdRequestTimeout, Logger: p.log, TLS: etcdTLS,
	}); err != nil {
		p.close(ctx)
		return nil, err
	}
	return p, nil
}

func (p *process) close(ctx context.Context) {
	ctx = context.WithoutCancel(ctx)
	if p.etcd != nil {
		_ = p.etcd.Close()
	}
	if p.tel != nil {
		if err := p.tel.Shutdown(ctx); err != nil {
			p.log.Warn("telemetry shutdown failed", "error", err)
		}
	}
}

// dial connects to a service through discovery, signing the call scope.
func (p *process) dial(ctx context.Context, service string, extra ...grpc.DialOption) (*grpc.ClientConn, error) {
	opts := []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(p.signer.UnaryClientInterceptor()),
		grpc.WithChainStreamInterceptor(p.signer.StreamClientInterceptor()),
	}
	return discovery.Dial(ctx, p.etcd, service, slices.Concat(opts, callOptions, extra)...)
}

// callOptions tune every connection to a service.
var callOptions = []grpc.DialOption{
	// A directory listing is one response and may exceed gRPC's
	// default 4 MiB; the workspace service bounds it below this.
	grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(32 << 20)),
}

func (p *process) dialAll(ctx context.Context) (map[string]*grpc.ClientConn, func(), error) {
	conns := make(map[string]*grpc.ClientConn, len(router.ServiceNames))
	closeAll := func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}
	for _, name := range router.ServiceNames {
		var extra []grpc.DialOption
		if name == "executor" {
			// Calls about a sandbox or node go to the executor holding it.
			// A call reaching it through the placement interceptors
			// is already signed.
			pl := placement.NewRouter(ctx, p.etcd, p.log, func(addr string) (*grpc.ClientConn, error) {
				return discovery.DialAddr(addr, callOptions...)
			})
			extra = append(extra, grpc.WithChainUnaryInterceptor(pl.UnaryClientInterceptor()), grpc.WithChainStreamInterceptor(pl.StreamClientInterceptor()))
		}
		c, err := p.dial(ctx, name, extra...)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("dial %s: %w", name, err)
		}
		conns[name] = c
	}
	return conns, closeAll, nil
}

// RunRouter runs `conch router`.
func RunRouter(ctx context.Context, cfg RouterConfig) error {
	return runService(ctx, "router", &cfg.Common, buildRouter(cfg.Config, cfg.EtcdAdminConfig, nil, nil))
}

// buildRouter builds the router service and its public HTTP API, which
// sends its bound address to ready, when not nil, once it listens. setup,
// when not nil, runs on the service once it is built. The caches the HTTP
// API reads and the watcher of etcd's space (maintaining it as admin when
// elected) are the background work, and stay current while it drains.
func buildRouter(cfg router.Config, admin EtcdAdminConfig, ready chan<- string, setup func(context.Context, *router.Service) error) builder {
	return func(ctx context.Context, p *process, c *component) error {
		space, err := p.spaceWatcher(ctx, admin, c)
		if err != nil {
			return err
		}
		svc, err := router.New(ctx, p.etcd, cfg, p.outbound, p.log)
		if err != nil {
			return err
		}
		rs := cfg.ResponseStorage
		objects, err := openStore(ctx, objectStorage{dir: rs.ResponsesDir, endpoint: rs.ResponsesS3Endpoint, access: rs.ResponsesS3Access,
			secret: rs.ResponsesS3Secret, bucket: rs.ResponsesS3Bucket, secure: rs.ResponsesS3Secure})
		if err != nil {
			return fmt.Errorf("stored responses: %w", err)
		}
		svc.Gateways().SetCeilings(p.common.Ceilings)
		svc.Accounts().SetQuotaDefaults(p.common.Quotas)
		if setup != nil {
			if err := setup(ctx, svc); err != nil {
				return err
			}
		}
		c.register = svc.Register
		c.http = func(ctx context.Context, common *Common) error {
			return p.serveHTTP(ctx, cfg.HTTPAddr, svc, space, objects, cfg.PublicURL, cfg.HTTPConfig, common, ready)
		}
		c.run = func(ctx context.Context) error {
			g, gctx := errgroup.WithContext(ctx)
			g.Go(func() error { svc.Run(gctx); return nil })
			g.Go(func() error { return space.Run(gctx) })
			return g.Wait()
		}
		return nil
	}
}

// spaceWatcher returns the watcher of etcd's space, named by the
// component's address in the maintainers' election. It maintains through
// a client of its own, as admin's user when set, whose calls may take as
// long as a defragmentation.
func (p *process) spaceWatcher(ctx context.Context, admin EtcdAdminConfig, c *component) (*etcdx.SpaceWatcher, error) {
	etcd := p.common.EtcdClientConfig
	if admin.EtcdAdminCertFile != "" {
		etcd.EtcdCertFile, etcd.EtcdKeyFile = admin.EtcdAdminCertFile, admin.EtcdAdminKeyFile
	}
	tlsCfg, err := etcd.etcdTLS()
	if err != nil {
		return nil, fmt.Errorf("etcd admin: %w", err)
	}
	cli, err := etcdx.NewClient(ctx, etcdx.ClientOptions{
		Endpoints: etcd.EtcdEndpoints, DialTimeout: 5 * time.Second, RequestTimeout: etcdx.SpaceMaintenanceTimeout, Logger: p.log, TLS: tlsCfg,
	})
	if err != nil {
		return nil, fmt.Errorf("etcd admin: %w", err)
	}
	c.onClose(func() { _ = cli.Close() })
	return etcdx.NewSpaceWatcher(etcdx.SpaceOptions{Client: p.etcd, Admin: cli, Name: c.addr, Logger: p.log, MeterProvider: p.tel.MeterProvider()})
}

// RunApproval runs `conch approval`.
func RunApproval(ctx context.Context, cfg ApprovalConfig) error {
	return runService(ctx, "approval", &cfg.Common, buildApproval(cfg.Config))
}

// buildApproval builds the approval service, sealing the secrets it
// stores with the keys cfg names, with the audit trail cfg describes (none
// when it sets no storage) and the trail's API.
func buildApproval(cfg approval.Config) builder {
	return func(ctx context.Context, p *process, c *component) error {
		keys, err := cfg.Keyring()
		if err != nil {
			return err
		}
		st, err := approvalstore.New(p.etcd, approval.KeyPrefix, keys)
		if err != nil {
			return err
		}
		st.SetQuotaLimits(func(ctx context.Context, account string) (quotas.Limits, error) {
			return accounts.Limits(ctx, p.etcd, &p.common.Quotas, account)
		})
		trail, err := p.newAudit(ctx, cfg.AuditConfig, "approval-"+c.addr)
		if err != nil {
			return err
		}
		// The router's reviewer answers allowlist misses first where a
		// gateway names one; the connection is made on first use.
		routerConn, err := p.dial(context.Background(), "router")
		if err != nil {
			return err
		}
		c.onClose(func() { _ = routerConn.Close() })
		// Named by its address, the replica that leads the notifier
		// election is the one an operator can find.
		// Forwarding connects out for tenants; the audit trail's object
		// store is control plane besides etcd.
		guard := p.common.Config.Guard(p.common.controlPlane(cfg.AuditS3Endpoint)...)
		opts := approval.Options{Logger: p.log, Name: c.addr, Reviewer: routerv1.NewReviewServiceClient(routerConn), Outbound: guard}
		if trail != nil {
			opts.Audit = trail.writer
		}
		svc, err := approval.New(st, opts)
		if err != nil {
			return err
		}
		var api *approval.AuditServer
		if trail != nil {
			if api, err = approval.NewAuditServer(trail.store, p.etcd, audit.DefaultEtcdPrefix, svc, trail.writer); err != nil {
				return err
			}
		}
		c.register = func(g *grpc.Server) {
			svc.Register(g)
			if api != nil {
				api.Register(g)
			}
		}
		// The trail is written until the server has drained, so that what
		// the last calls record is kept.
		c.run = func(ctx context.Context) error {
			g, gctx := errgroup.WithContext(ctx)
			g.Go(func() error { return svc.Run(gctx) })
			g.Go(func() error { return trail.run(gctx) })
			return g.Wait()
		}
		return nil
	}
}

// serveHTTP serves the router's public HTTP API on addr until ctx ends, then
// drains (see router.NewHTTPHandler) for c.DrainDelay and stops, waiting up
// to c.ShutdownTimeout for the requests in flight. What the handler calls
// outlives ctx until then. When ready is not nil it receives the bound
// address once the server listens.
func (p *process) serveHTTP(ctx context.Context, addr string, svc *router.Service, space router.EtcdSpace, objects store.Store, publicURL string, hc router.HTTPConfig, c *Common, ready chan<- string) error {
	deps, stopDeps := context.WithCancel(context.WithoutCancel(ctx))
	defer stopDeps()
	conns, closeConns, err := p.dialAll(deps)
	if err != nil {
		return err
	}
	defer closeConns()
	h, err := router.NewHTTPHandler(ctx, router.HTTPOptions{
		Service: svc, Etcd: p.etcd, Conns: conns, Metrics: p.tel.MetricsHandler(), PublicURL: publicURL, Logger: p.log,
		UploadIdleTimeout: hc.UploadIdleTimeout, MaxConcurrentCompletions: hc.MaxConcurrentCompletions,
		ResponseRetention: hc.ResponseRetention, ApprovalPause: hc.ApprovalPause, Space: space, ResponseObjects: objects,
		InternalSecret: c.InternalSecret,
	})
	if err != nil {
		return err
	}
	return p.listenAndServe(ctx, addr, h, c.DrainDelay, c.ShutdownTimeout, ready)
}

func (p *process) serveMetrics(ctx context.Context, addr string, timeout time.Duration) error {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", p.tel.MetricsHandler())
	return p.listenAndServe(ctx, addr, mux, 0, timeout, nil)
}

// listenAndServe serves h on addr until ctx ends and drain has passed, then
// stops taking connections and waits up to timeout for the requests in
// flight.
func (p *process) listenAndServe(ctx context.Context, addr string, h http.Handler, drain, timeout time.Duration, ready chan<- string) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("http: listen: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(p.log.Handler(), slog.LevelWarn)}
	// HTTP/2 without TLS too, for gRPC clients (paired nodes) of a cluster
	// whose TLS ends in front of the router.
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetHTTP2(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	bound := lis.Addr().String()
	p.log.Info("http server started", "addr", bound)
	if ready != nil {
		ready <- bound
	}
	select {
	case err := <-served:
		return fmt.Errorf("http: %w", err)
	case <-ctx.Done():
	}
	if drain > 0 {
		// Closing the listener at once would reset the connections a load
		// balancer still sends before it sees the drain.
		p.log.Info("http server draining", "addr", bound, "drain_delay", drain)
		select {
		case err := <-served:
			return fmt.Errorf("http: %w", err)
		case <-time.After(drain):
		}
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("http: %w", err)
	}
	p.log.Info("http server stopped", "addr", bound)
	return nil
}
