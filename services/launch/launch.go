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
	"github.com/conch-sh/conch/services/internal/platform/config"
	"github.com/conch-sh/conch/services/internal/platform/discovery"
	"github.com/conch-sh/conch/services/internal/platform/etcdx"
	"github.com/conch-sh/conch/services/internal/platform/logging"
	"github.com/conch-sh/conch/services/internal/platform/serving"
	"github.com/conch-sh/conch/services/internal/platform/telemetry"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/router"
)

// Common is the configuration every single-service command shares.
type Common struct {
	EtcdEndpoints   []string      `flag:"etcd-endpoints" env:"CONCH_ETCD_ENDPOINTS" default:"127.0.0.1:2379" usage:"etcd endpoints, comma separated"`
	GRPCAddr        string        `flag:"grpc-addr" env:"CONCH_GRPC_ADDR" default:"127.0.0.1:0" usage:"gRPC listen address"`
	AdvertiseAddr   string        `flag:"advertise-addr" env:"CONCH_ADVERTISE_ADDR" usage:"address registered in etcd for other services to dial (default: the listen address)"`
	InternalSecret  string        `env:"CONCH_INTERNAL_SECRET" usage:"secret shared by the cluster's services to sign call scopes (at least 16 bytes)"`
	MetricsAddr     string        `flag:"metrics-addr" env:"CONCH_METRICS_ADDR" usage:"address serving /metrics (empty: none; the router serves it on --http-addr)"`
	LogLevel        string        `flag:"log-level" env:"CONCH_LOG_LEVEL" default:"info" usage:"debug, info, warn or error"`
	OTLPEndpoint    string        `flag:"otlp-endpoint" env:"OTEL_EXPORTER_OTLP_ENDPOINT" usage:"OTLP gRPC endpoint for traces (empty: no export)"`
	ShutdownTimeout time.Duration `flag:"shutdown-timeout" env:"CONCH_SHUTDOWN_TIMEOUT" default:"10s" usage:"hard deadline for draining on shutdown"`
	// EtcdRequestTimeout bounds each call to etcd, so that a cluster
	// that lost its quorum fails requests instead of holding them.
	EtcdRequestTimeout time.Duration `flag:"etcd-request-timeout" env:"CONCH_ETCD_REQUEST_TIMEOUT" default:"5s" usage:"how long one etcd call may wait for an answer (longer than a leader election)"`
	DrainDelay         time.Duration `flag:"drain-delay" env:"CONCH_DRAIN_DELAY" default:"0s" usage:"time to keep serving after leaving discovery and reporting NOT_SERVING"`
}

// Validate checks the shared settings.
func (c *Common) Validate() error {
	if len(c.EtcdEndpoints) == 0 {
		return config.Invalid("--etcd-endpoints", "at least one endpoint is required")
	}
	if _, _, err := net.SplitHostPort(c.GRPCAddr); err != nil {
		return config.Invalid("--grpc-addr", "%v", err)
	}
	if len(c.InternalSecret) < 16 {
		return config.Invalid("CONCH_INTERNAL_SECRET", "must be set to at least 16 bytes")
	}
	if _, err := logging.ParseLevel(c.LogLevel); err != nil {
		return config.Invalid("--log-level", "%v", err)
	}
	if c.ShutdownTimeout <= 0 {
		return config.Invalid("--shutdown-timeout", "must be positive")
	}
	if c.EtcdRequestTimeout <= 0 {
		return config.Invalid("--etcd-request-timeout", "must be positive")
	}
	return nil
}

// RouterConfig is the configuration of `conch router`.
type RouterConfig struct {
	Common
	HTTPAddr     string `flag:"http-addr" env:"CONCH_HTTP_ADDR" default:"127.0.0.1:8080" usage:"public HTTP listen address"`
	PublicURL    string `flag:"public-url" env:"CONCH_PUBLIC_URL" usage:"public base URL of the router, for links it hands out (default: the request's host)"`
	AdminKey     string `env:"CONCH_ADMIN_KEY" usage:"API key of the admin, who manages accounts"`
	AdminAccount string `flag:"admin-account" env:"CONCH_ADMIN_ACCOUNT" default:"admin" usage:"account id of the admin key"`
	HTTPConfig
}

// HTTPConfig tunes the router's public HTTP API, in `conch router` and
// `conch dev`.
type HTTPConfig struct {
	// UploadIdleTimeout bounds a stalled upload body.
	UploadIdleTimeout time.Duration `flag:"upload-idle-timeout" env:"CONCH_UPLOAD_IDLE_TIMEOUT" default:"30s" usage:"how long a file upload may send no bytes before it is cut"`
	// MaxConcurrentCompletions sheds load beyond what the router runs.
	MaxConcurrentCompletions int `flag:"max-concurrent-completions" env:"CONCH_MAX_CONCURRENT_COMPLETIONS" default:"512" usage:"chat completions this router runs at once; beyond, 503 with Retry-After"`
	// ResponseRetention is how long the Responses API keeps a response.
	ResponseRetention time.Duration `flag:"response-retention" env:"CONCH_RESPONSE_RETENTION" default:"720h" usage:"how long a stored response of the Responses API is kept (previous_response_id, GET /v1/responses/{id})"`
}

// Validate checks the HTTP settings.
func (c *HTTPConfig) Validate() error {
	if c.UploadIdleTimeout <= 0 {
		return config.Invalid("--upload-idle-timeout", "must be positive")
	}
	if c.MaxConcurrentCompletions < 1 || c.MaxConcurrentCompletions > 1<<20 {
		return config.Invalid("--max-concurrent-completions", "must be between 1 and %d", 1<<20)
	}
	if c.ResponseRetention < time.Minute || c.ResponseRetention > 366*24*time.Hour {
		return config.Invalid("--response-retention", "must be between 1m and 8784h (366 days)")
	}
	return nil
}

// Validate checks the router's settings.
func (c *RouterConfig) Validate() error {
	if err := c.Common.Validate(); err != nil {
		return err
	}
	if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
		return config.Invalid("--http-addr", "%v", err)
	}
	if c.AdminKey != "" && len(c.AdminKey) < 16 {
		return config.Invalid("CONCH_ADMIN_KEY", "must be at least 16 characters")
	}
	if err := c.HTTPConfig.Validate(); err != nil {
		return err
	}
	return validPublicURL(c.PublicURL)
}

// ServiceConfig is the configuration of `conch approval`.
type ServiceConfig struct {
	Common
	AuditConfig
}

// Validate checks the service's settings.
func (c *ServiceConfig) Validate() error {
	if err := c.Common.Validate(); err != nil {
		return err
	}
	return c.AuditConfig.Validate()
}

// ExecutorConfig configures the executor's sandboxes.
type ExecutorConfig struct {
	SandboxStateDir string `flag:"sandbox-state-dir" env:"CONCH_SANDBOX_STATE_DIR" default:"/run/conch-executor" usage:"host directory for sandbox state; every parent must be searchable by others"`
	SandboxRootFS   string `flag:"sandbox-rootfs" env:"CONCH_SANDBOX_ROOTFS" default:"/" usage:"root filesystem whose /usr, /bin, /lib* and chosen /etc files sandboxes see read-only"`
	SandboxUIDBase  int    `flag:"sandbox-uid-base" env:"CONCH_SANDBOX_UID_BASE" default:"200000" usage:"first host uid given to sandboxes (each live sandbox has its own)"`
	// Every executor of a host must share the uid lock dir: it is where a
	// live sandbox's uid is claimed host-wide (its default is
	// sandbox.DefaultUIDLockDir).
	SandboxUIDLockDir string `flag:"sandbox-uid-lock-dir" env:"CONCH_SANDBOX_UID_LOCK_DIR" default:"/run/conch-sandbox-uids" usage:"host directory where every executor of the host claims its sandboxes' uids"`
	SandboxCgroup     string `flag:"sandbox-cgroup" env:"CONCH_SANDBOX_CGROUP" default:"conch" usage:"cgroup under which sandboxes' groups are made"`
	SandboxPool       int    `flag:"sandbox-pool" env:"CONCH_SANDBOX_POOL" default:"2" usage:"sandboxes kept built ahead of demand (0: none)"`
	// The gateway host: commands run on the executor's machine, outside
	// any sandbox, only as the exec policy and approvals allow.
	GatewayHost    bool   `flag:"gateway-host" env:"CONCH_GATEWAY_HOST" default:"true" usage:"allow exec host gateway: commands on this machine outside any sandbox, behind the exec policy"`
	GatewayWorkdir string `flag:"gateway-workdir" env:"CONCH_GATEWAY_WORKDIR" default:"/tmp" usage:"where gateway-host commands start, and their HOME"`
	MaxSandboxes   int    `flag:"max-sandboxes" env:"CONCH_MAX_SANDBOXES" default:"256" usage:"sandboxes this executor holds at most; beyond, creates are refused and the router places them elsewhere"`
	// A hung workspace service must not hold a sandbox's commands: a
	// flush that takes longer fails and its command says so.
	FlushTimeout time.Duration `flag:"flush-timeout" env:"CONCH_FLUSH_TIMEOUT" default:"60s" usage:"how long saving a persistent workspace after a command may take before the command is answered with an error"`
	// Sandbox egress never reaches loopback, private, link-local and
	// other non-public ranges, the executor host's own addresses or
	// etcd's; these are refused besides (MinIO's, say, when it has a
	// public address).
	EgressDeny []string `flag:"egress-deny" env:"CONCH_EGRESS_DENY" usage:"extra addresses or CIDRs sandbox egress never reaches, comma separated"`
}

// egressDeny is the ranges the egress proxy refuses besides its own:
// the configured ones and etcd's addresses.
func (c *ExecutorConfig) egressDeny(ctx context.Context, etcd []string) []netip.Prefix {
	var out []netip.Prefix
	for _, d := range c.EgressDeny {
		if p, err := parsePrefix(d); err == nil {
			out = append(out, p)
		}
	}
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

// parsePrefix reads "10.1.2.3" or "10.1.0.0/16".
func parsePrefix(s string) (netip.Prefix, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	return p.Masked(), err
}

// Validate checks the executor's settings.
func (c *ExecutorConfig) Validate() error {
	if !filepath.IsAbs(c.SandboxStateDir) {
		return config.Invalid("--sandbox-state-dir", "must be an absolute path")
	}
	if !filepath.IsAbs(c.SandboxRootFS) {
		return config.Invalid("--sandbox-rootfs", "must be an absolute path")
	}
	if c.SandboxUIDBase < 1000 || c.SandboxUIDBase > 1<<31-1<<17 {
		return config.Invalid("--sandbox-uid-base", "must be between 1000 and %d", 1<<31-1<<17)
	}
	if !filepath.IsAbs(c.SandboxUIDLockDir) {
		return config.Invalid("--sandbox-uid-lock-dir", "must be an absolute path")
	}
	if c.SandboxPool < 0 || c.SandboxPool > 64 {
		return config.Invalid("--sandbox-pool", "must be between 0 and 64")
	}
	if c.SandboxCgroup == "" || strings.Contains(c.SandboxCgroup, "..") || filepath.IsAbs(c.SandboxCgroup) {
		return config.Invalid("--sandbox-cgroup", "must be a relative cgroup path without ..")
	}
	if c.MaxSandboxes < 1 || c.MaxSandboxes > 100000 {
		return config.Invalid("--max-sandboxes", "must be between 1 and 100000")
	}
	if !filepath.IsAbs(c.GatewayWorkdir) {
		return config.Invalid("--gateway-workdir", "must be an absolute path")
	}
	if c.FlushTimeout <= 0 {
		return config.Invalid("--flush-timeout", "must be positive")
	}
	for _, d := range c.EgressDeny {
		if _, err := parsePrefix(d); err != nil {
			return config.Invalid("--egress-deny", "%q is not an address or CIDR", d)
		}
	}
	return nil
}

// ExecutorServiceConfig is the configuration of `conch executor`.
type ExecutorServiceConfig struct {
	Common
	ExecutorConfig
}

// Validate checks the executor service's settings.
func (c *ExecutorServiceConfig) Validate() error {
	if err := c.Common.Validate(); err != nil {
		return err
	}
	return c.ExecutorConfig.Validate()
}

// startExecutor builds the executor service: its sandbox runtime under a
// per-instance state dir and cgroup, and its domain, which records addr as
// where its sandboxes are reached.
func (p *process) startExecutor(ctx context.Context, cfg ExecutorConfig, addr string, auditFlush time.Duration) (*executor.Server, *executor.Service, func(), error) {
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
	proxy := egressproxy.New(egressproxy.Config{Deny: cfg.egressDeny(ctx, p.etcd.Endpoints()), Log: p.log})
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
func RunExecutor(ctx context.Context, cfg ExecutorServiceConfig) error {
	p, err := newProcess(ctx, "conch-executor", &cfg.Common)
	if err != nil {
		return err
	}
	defer p.close(ctx)
	lis, addr, err := listen("executor", cfg.GRPCAddr, cfg.AdvertiseAddr)
	if err != nil {
		return err
	}
	srv, svc, cleanup, err := p.startExecutor(ctx, cfg.ExecutorConfig, addr, audit.DefaultFlushEvery)
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
	svc, err := router.New(ctx, p.etcd, router.Config{AdminKey: cfg.AdminKey, AdminAccount: cfg.AdminAccount, PublicURL: cfg.PublicURL}, p.log)
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
func RunService(ctx context.Context, name string, cfg ServiceConfig) error {
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
func registerFunc(ctx context.Context, name string, p *process, addr string, ac AuditConfig) (register func(*grpc.Server), run func(context.Context) error, err error) {
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
		cfg := approval.Config{Logger: p.log, Name: addr, Reviewer: routerv1.NewReviewServiceClient(router)}
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
func (p *process) serveHTTP(ctx context.Context, addr string, svc *router.Service, publicURL string, hc HTTPConfig, c *Common, ready chan<- string) error {
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

func validPublicURL(s string) error {
	if s == "" {
		return nil
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return config.Invalid("--public-url", "must be an absolute http:// or https:// URL without query or fragment")
	}
	return nil
}
