// Package launch starts conch processes: one service against an external
// etcd (`conch router|executor|approval|workspace`), or the whole cluster in
// one process with embedded etcd (`conch dev`). Either way the services talk
// only through etcd discovery, exactly as in a cluster.
package launch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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
	"github.com/conch-sh/conch/services/internal/audit"
	"github.com/conch-sh/conch/services/internal/placement"
	"github.com/conch-sh/conch/services/internal/platform/discovery"
	"github.com/conch-sh/conch/services/internal/platform/etcdx"
	"github.com/conch-sh/conch/services/internal/platform/logging"
	"github.com/conch-sh/conch/services/internal/platform/serving"
	"github.com/conch-sh/conch/services/internal/platform/telemetry"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/router"
)

// egressDeny is the ranges the egress proxy refuses besides its own:
// the configured ones and etcd's addresses.
func egressDeny(ctx context.Context, c *executor.Config, etcd []string) []netip.Prefix {
	out := c.EgressDenyPrefixes()
	for _, ep := range etcd {
		host := ep
		if u, err := url.Parse(ep); err == nil && u.Host != "" {
			host = u.Host
		}
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		addrs, _ := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		for _, a := range addrs {
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
		}
	}
	return out
}

// startExecutor builds the executor service: its sandbox runtime under a
// per-instance state dir and cgroup, and its domain, which records addr as
// where its sandboxes are reached.
func (p *process) startExecutor(ctx context.Context, cfg executor.Config, addr string, auditFlush time.Duration) (*executor.Server, *executor.Service, func(), error) {
	host, _ := os.Hostname()
	name := sandbox.InstanceName(strings.ReplaceAll(host, "-", "_"), strings.NewReplacer("-", "x", "_", "y").Replace(randomSecret()[:6]))
	if err := sandbox.SweepStale(cfg.SandboxStateDir, "/sys/fs/cgroup", cfg.SandboxCgroup); err != nil {
		p.log.Warn("sweeping stale sandboxes failed", "error", err)
	}
	dir := filepath.Join(cfg.SandboxStateDir, name)
	rt, err := sandbox.NewRuntime(sandbox.Config{
		StateDir: dir, RootFS: cfg.SandboxRootFS, UIDBase: cfg.SandboxUIDBase, UIDLockDir: cfg.SandboxUIDLockDir,
		CgroupParent: cfg.SandboxCgroup + "/" + name, PoolSize: cfg.SandboxPool, Logger: p.log,
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("executor: %w", err)
	}
	wsConn, err := p.dial(ctx, "workspace")
	if err != nil {
		rt.Close()
		return nil, nil, nil, fmt.Errorf("executor: dial workspace: %w", err)
	}
	ws := executor.NewWorkspaceClient(workspacev1.NewWorkspaceServiceClient(wsConn), executor.PersistentWorkspaceBytes)
	routerConn, err := p.dial(ctx, "router")
	if err != nil {
		_ = wsConn.Close()
		rt.Close()
		return nil, nil, nil, fmt.Errorf("executor: dial router: %w", err)
	}
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
	proxy := egressproxy.New(egressproxy.Config{Deny: egressDeny(ctx, &cfg, p.etcd.Endpoints()), Log: p.log})
	opts := []executor.Option{executor.WithWorkspaces(ws), executor.WithToolCaller(callTool), executor.WithMaxSandboxes(cfg.MaxSandboxes), executor.WithFlushTimeout(cfg.FlushTimeout), executor.WithEgress(proxy)}
	if cfg.GatewayHost {
		opts = append(opts, executor.WithGatewayHost(&hostexec.Runner{Dir: cfg.GatewayWorkdir}))
	}
	apConn, err := p.dial(ctx, "approval")
	if err != nil {
		_ = wsConn.Close()
		_ = routerConn.Close()
		rt.Close()
		return nil, nil, nil, fmt.Errorf("executor: dial approval: %w", err)
	}
	// Outcomes and connections go to the approval service's audit trail:
	// executors never reach the object store. The forwarder outlives the
	// drain, so that what the last commands record is sent.
	fwd := executor.NewAuditForwarder(approvalv1.NewAuditServiceClient(apConn), auditFlush, audit.DefaultMaxBuffered, p.log)
	opts = append(opts, executor.WithAudit(fwd))
	fctx, stopFwd := context.WithCancel(context.WithoutCancel(ctx))
	fwdDone := make(chan struct{})
	go func() { _ = fwd.Run(fctx); close(fwdDone) }()
	svc, err := executor.NewService(ctx, name, addr, rt, p.etcd, p.log, opts...)
	if err != nil {
		stopFwd()
		<-fwdDone
		_ = wsConn.Close()
		_ = routerConn.Close()
		_ = apConn.Close()
		rt.Close()
		return nil, nil, nil, err
	}
	srv := executor.NewServer(svc).WithApprovals(approvalv1.NewApprovalServiceClient(apConn))
	return srv, svc, func() {
		stopFwd()
		<-fwdDone
		rt.Close()
		_ = wsConn.Close()
		_ = routerConn.Close()
		_ = apConn.Close()
	}, nil
}

// executorMeta is what an executor registers beside its address: its
// capacity, which the router places sandboxes by.
func executorMeta(svc *executor.Service) map[string]string {
	return map[string]string{placement.MetaMaxSandboxes: strconv.Itoa(svc.MaxSandboxes())}
}

// RunExecutor runs `conch executor`.
func RunExecutor(ctx context.Context, cfg ExecutorConfig) error {
	p, err := newProcess(ctx, "conch-executor", &cfg.Common)
	if err != nil {
		return err
	}
	defer p.close(ctx)
	lis, addr, err := listen("executor", cfg.GRPCAddr, cfg.AdvertiseAddr)
	if err != nil {
		return err
	}
	srv, svc, cleanup, err := p.startExecutor(ctx, cfg.Config, addr, audit.DefaultFlushEvery)
	if err != nil {
		_ = lis.Close()
		return err
	}
	defer cleanup()
	g, gctx := errgroup.WithContext(ctx)
	p.serveExecutor(gctx, g, lis, addr, svc, srv, &cfg.Common)
	if cfg.MetricsAddr != "" {
		g.Go(func() error { return p.serveMetrics(gctx, cfg.MetricsAddr, cfg.ShutdownTimeout) })
	}
	return g.Wait()
}

// serveExecutor serves the executor's gRPC server on lis and runs its
// domain, both in g, until ctx ends. The domain outlives the server: its
// shutdown, which destroys the sandboxes and revokes the lease their
// records live under, begins only once the server has drained, so a call
// still accepted while draining never meets a half-shut executor.
func (p *process) serveExecutor(ctx context.Context, g *errgroup.Group, lis net.Listener, addr string, svc *executor.Service, srv *executor.Server, c *Common) {
	svcCtx, stopSvc := context.WithCancel(context.WithoutCancel(ctx))
	g.Go(func() error { return svc.Run(svcCtx) })
	g.Go(func() error {
		defer stopSvc()
		return p.serveOn(ctx, "executor", lis, addr, executorMeta(svc), c, srv.Register)
	})
	// New sandboxes go elsewhere as soon as the shutdown begins, and so do
	// nodes: a node's stream would hold the drain to its deadline.
	g.Go(func() error {
		<-ctx.Done()
		svc.Drain()
		return nil
	})
}

// process is what every conch process sets up before its services: logging,
// telemetry, an etcd client and the scope signer.
type process struct {
	log    *slog.Logger
	tel    *telemetry.Telemetry
	etcd   *clientv3.Client
	signer *tenant.Signer
}

// newProcess sets up the process named name (its telemetry service name)
// from the settings in c.
func newProcess(ctx context.Context, name string, c *Common) (*process, error) {
	lvl, err := logging.ParseLevel(c.LogLevel)
	if err != nil {
		return nil, err
	}
	p := &process{log: logging.New(os.Stderr, lvl)}
	slog.SetDefault(p.log)
	if p.tel, err = telemetry.Setup(ctx, telemetry.Options{ServiceName: name, OTLPEndpoint: c.OTLPEndpoint}); err != nil {
		return nil, err
	}
	if p.signer, err = tenant.NewSigner(c.InternalSecret); err != nil {
		p.close(ctx)
		return nil, err
	}
	if p.etcd, err = etcdx.NewClient(ctx, etcdx.ClientOptions{
		Endpoints: c.EtcdEndpoints, DialTimeout: 5 * time.Second, RequestTimeout: c.EtcdRequestTimeout, Logger: p.log,
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

// streamWindow is the gRPC flow-control window of one stream.
const streamWindow = 1 << 20

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
	// Fixed flow-control windows: gRPC's bandwidth-delay estimate
	// otherwise grows them to many MiB on fast links, and a streamed
	// download would sit in the router's memory that far ahead.
	grpc.WithInitialWindowSize(streamWindow),
	grpc.WithInitialConnWindowSize(4 * streamWindow),
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

// serve runs one service's gRPC server on addr until ctx ends.
func (p *process) serve(ctx context.Context, name, addr, advertise string, c *Common, register func(*grpc.Server)) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s: listen: %w", name, err)
	}
	return p.serveOn(ctx, name, lis, advertise, nil, c, register)
}

// listen opens a service's gRPC listener before the service is built, for a
// service that must know the address it will be reached at.
func listen(name, addr, advertise string) (net.Listener, string, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("%s: listen: %w", name, err)
	}
	advertised, err := serving.Advertised(lis, advertise)
	if err != nil {
		_ = lis.Close()
		return nil, "", fmt.Errorf("%s: %w", name, err)
	}
	return lis, advertised, nil
}

// serveOn runs one service's gRPC server on lis until ctx ends, registered
// with meta.
func (p *process) serveOn(ctx context.Context, name string, lis net.Listener, advertise string, meta map[string]string, c *Common, register func(*grpc.Server)) error {
	return serving.Run(ctx, serving.Options{
		Metadata:       meta,
		Name:           name,
		Listener:       lis,
		AdvertiseAddr:  advertise,
		Etcd:           p.etcd,
		Signer:         p.signer,
		Register:       register,
		Logger:         p.log,
		DrainDelay:     c.DrainDelay,
		StopTimeout:    c.ShutdownTimeout,
		TracerProvider: p.tel.TracerProvider(),
		MeterProvider:  p.tel.MeterProvider(),
	})
}

// RunRouter runs `conch router`.
func RunRouter(ctx context.Context, cfg RouterConfig) error {
	p, err := newProcess(ctx, "conch-router", &cfg.Common)
	if err != nil {
		return err
	}
	defer p.close(ctx)
	svc, err := router.New(ctx, p.etcd, cfg.Config, p.log)
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	// The caches the HTTP API reads stay current while it drains.
	svcCtx, stopSvc := context.WithCancel(context.WithoutCancel(ctx))
	g.Go(func() error { svc.Run(svcCtx); return nil })
	g.Go(func() error {
		return p.serve(gctx, "router", cfg.GRPCAddr, cfg.AdvertiseAddr, &cfg.Common, svc.Register)
	})
	g.Go(func() error {
		defer stopSvc()
		return p.serveHTTP(gctx, cfg.HTTPAddr, svc, cfg.PublicURL, cfg.HTTPConfig, &cfg.Common, nil)
	})
	return g.Wait()
}

// RunService runs `conch executor|approval`.
func RunService(ctx context.Context, name string, cfg ApprovalConfig) error {
	p, err := newProcess(ctx, "conch-"+name, &cfg.Common)
	if err != nil {
		return err
	}
	defer p.close(ctx)
	lis, addr, err := listen(name, cfg.GRPCAddr, cfg.AdvertiseAddr)
	if err != nil {
		return err
	}
	register, run, err := registerFunc(ctx, name, p, addr, cfg.AuditConfig)
	if err != nil {
		_ = lis.Close()
		return err
	}
	return p.runServiceOn(ctx, name, lis, addr, &cfg.Common, register, run)
}

// runService serves one service's gRPC server, its background work (run,
// when not nil) and /metrics when asked.
func (p *process) runService(ctx context.Context, name string, c *Common, register func(*grpc.Server), run func(context.Context) error) error {
	lis, addr, err := listen(name, c.GRPCAddr, c.AdvertiseAddr)
	if err != nil {
		return err
	}
	return p.runServiceOn(ctx, name, lis, addr, c, register, run)
}

// runServiceOn is runService on a listener already open at addr.
func (p *process) runServiceOn(ctx context.Context, name string, lis net.Listener, addr string, c *Common, register func(*grpc.Server), run func(context.Context) error) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return p.serveOn(gctx, name, lis, addr, nil, c, register) })
	if run != nil {
		g.Go(func() error { return run(gctx) })
	}
	if c.MetricsAddr != "" {
		g.Go(func() error { return p.serveMetrics(gctx, c.MetricsAddr, c.ShutdownTimeout) })
	}
	return g.Wait()
}

// registerFunc builds a service without configuration of its own (the
// workspace service has RunWorkspace) that will be reached at addr; run,
// when not nil, is its background work and runs beside the gRPC server.
func registerFunc(ctx context.Context, name string, p *process, addr string, ac approval.AuditConfig) (register func(*grpc.Server), run func(context.Context) error, err error) {
	switch name {
	case "approval":
		st, err := approvalstore.New(p.etcd, approval.KeyPrefix)
		if err != nil {
			return nil, nil, err
		}
		trail, err := p.newAudit(ctx, ac, "approval-"+addr)
		if err != nil {
			return nil, nil, err
		}
		// The router's reviewer answers allowlist misses first where a
		// gateway names one; the connection is made on first use.
		router, err := p.dial(context.Background(), "router")
		if err != nil {
			return nil, nil, err
		}
		// Named by its address, the replica that leads the notifier
		// election is the one an operator can find.
		cfg := approval.Options{Logger: p.log, Name: addr, Reviewer: routerv1.NewReviewServiceClient(router)}
		if trail != nil {
			cfg.Audit = trail.writer
		}
		svc, err := approval.New(st, cfg)
		if err != nil {
			return nil, nil, err
		}
		var api *approval.AuditServer
		if trail != nil {
			if api, err = approval.NewAuditServer(trail.store, p.etcd, audit.DefaultEtcdPrefix, svc, trail.writer); err != nil {
				return nil, nil, err
			}
		}
		register := func(g *grpc.Server) {
			svc.Register(g)
			if api != nil {
				api.Register(g)
			}
		}
		run := func(ctx context.Context) error {
			g, gctx := errgroup.WithContext(ctx)
			g.Go(func() error { return svc.Run(gctx) })
			g.Go(func() error { return trail.run(gctx) })
			return g.Wait()
		}
		return register, run, nil
	}
	return nil, nil, fmt.Errorf("unknown service %q", name)
}

// serveHTTP serves the router's public HTTP API on addr until ctx ends, then
// drains (see router.NewHTTPHandler) for c.DrainDelay and stops, waiting up
// to c.ShutdownTimeout for the requests in flight. What the handler calls
// outlives ctx until then. When ready is not nil it receives the bound
// address once the server listens.
func (p *process) serveHTTP(ctx context.Context, addr string, svc *router.Service, publicURL string, hc router.HTTPConfig, c *Common, ready chan<- string) error {
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
		ResponseRetention: hc.ResponseRetention,
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
