package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel"
	"google.golang.org/grpc"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
	workspacev1 "github.com/conch-sh/conch/gen/go/conch/workspace/v1"
	"github.com/conch-sh/conch/services/internal/platform/discovery"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/etcdx"
	"github.com/conch-sh/conch/services/internal/platform/restjson"
	"github.com/conch-sh/conch/services/internal/platform/telemetry"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/internal/store"
	"github.com/conch-sh/conch/services/router/accounts"
	"github.com/conch-sh/conch/services/router/anthropic"
	"github.com/conch-sh/conch/services/router/apierror"
	"github.com/conch-sh/conch/services/router/completion"
	"github.com/conch-sh/conch/services/router/containers"
	"github.com/conch-sh/conch/services/router/mcpserver"
	"github.com/conch-sh/conch/services/router/openai"
	"github.com/conch-sh/conch/services/router/responsestore"
	"github.com/conch-sh/conch/services/router/skills"
)

// ServiceNames are the four services, in the order /readyz reports them.
var ServiceNames = []string{"router", "executor", "approval", "workspace"}

// EtcdSpace is what the router reads of etcd's space (etcdx.SpaceWatcher):
// what it last saw, and whether a bulk write (a stored response) of a
// size may go.
type EtcdSpace interface {
	Space() etcdx.Space
	AdmitBulk(size int64) error
}

// authenticator resolves a bearer key to a principal.
type authenticator interface {
	Authenticate(ctx context.Context, key string) (accounts.Principal, error)
}

// HTTPOptions configure the router's HTTP handler.
type HTTPOptions struct {
	// Etcd keeps the OpenAI-compatible API's session state.
	Etcd *clientv3.Client
	// Service is the router's gRPC side, whose tool grants and clients the
	// API shares.
	Service *Service
	// Conns are client connections, through discovery, to each service of
	// ServiceNames.
	Conns map[string]*grpc.ClientConn
	// Metrics serves /metrics.
	Metrics http.Handler
	// PublicURL is the base of links handed out; empty: the request's host.
	PublicURL string
	// UploadIdleTimeout bounds the wait for the next bytes of a file
	// upload; 0 means DefaultUploadIdleTimeout.
	UploadIdleTimeout time.Duration
	// MaxConcurrentCompletions bounds the completions running at once;
	// 0 means completion.DefaultMaxConcurrent.
	MaxConcurrentCompletions int
	// ApprovalPause is how long a Messages API request without a stream
	// waits for an approval before it pauses (HTTPConfig).
	ApprovalPause time.Duration
	// ResponseRetention is how long stored responses of the Responses
	// API are kept; 0 means responsestore.DefaultRetention.
	ResponseRetention time.Duration
	// ResponseObjects keeps the stored responses' bodies and
	// conversations.
	ResponseObjects store.Store
	// Space reports etcd's space to /readyz and refuses storing
	// responses when etcd is short of it; nil: neither.
	Space EtcdSpace
	// Logger receives request errors.
	Logger *slog.Logger
	// InternalSecret is the cluster's, from which the key of the tokens
	// routers sign for each other (terminals opened from a browser) is
	// derived; empty: a random one, and a token verifies only at the
	// router that signed it.
	InternalSecret string
}

// NewHTTPHandler returns the router's public HTTP handler: /healthz, /readyz,
// /metrics without auth; /v1, /api/v1 and /mcp behind bearer auth; gRPC calls
// (HTTP/2) of paired nodes, which authenticate with their pairing token.
//
// When ctx ends the router drains: it goes on serving, but /readyz answers
// 503 so a load balancer sends new clients elsewhere, every response closes
// its connection so kept-alive clients reconnect elsewhere too, and node
// streams end so their nodes attach through another router.
func NewHTTPHandler(ctx context.Context, opts HTTPOptions) (http.Handler, error) {
	if opts.Service == nil || opts.Etcd == nil || opts.Metrics == nil || opts.ResponseObjects == nil {
		return nil, errors.New("router: Service, Etcd, Metrics and ResponseObjects are required")
	}
	for _, name := range ServiceNames {
		if opts.Conns[name] == nil {
			return nil, fmt.Errorf("router: no connection to %s", name)
		}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	gw, err := newGatewayMux(ctx, opts.Conns, opts.Service.Gateways(), opts.Logger)
	if err != nil {
		return nil, err
	}
	ro := responsestore.Options{Etcd: opts.Etcd, Objects: opts.ResponseObjects, Retention: opts.ResponseRetention,
		Limits: opts.Service.Accounts().Limits, Logger: opts.Logger}
	if opts.Space != nil {
		ro.Room = opts.Space.AdmitBulk
	}
	stored, err := responsestore.New(ro)
	if err != nil {
		return nil, err
	}
	go stored.Run(ctx)
	// Skills keep their archives in the same bucket as stored responses.
	skillStore, err := skills.New(skills.Options{Etcd: opts.Etcd, Objects: opts.ResponseObjects,
		Limits: opts.Service.Accounts().Limits, Logger: opts.Logger})
	if err != nil {
		return nil, err
	}
	go skillStore.Run(ctx)
	core, err := completion.New(completion.Options{
		Gateways:   opts.Service.Gateways(),
		Executor:   executorv1.NewExecutorServiceClient(opts.Conns["executor"]),
		Approvals:  approvalv1.NewApprovalServiceClient(opts.Conns["approval"]),
		Etcd:       opts.Etcd,
		Turns:      stored,
		Grants:     opts.Service.Grants(),
		ToolDeps:   opts.Service.ToolDeps(),
		HTTPClient: opts.Service.UpstreamClient(),
		Logger:     opts.Logger,
		Skills:     skillStore,

		MaxConcurrent: opts.MaxConcurrentCompletions,
	})
	if err != nil {
		return nil, err
	}
	v1 := openai.NewHandler(core, stored, opts.Logger)
	a := &authMiddleware{auth: opts.Service.Accounts(), publicURL: strings.TrimRight(opts.PublicURL, "/"), log: opts.Logger}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.Handle("GET /readyz", &readiness{conns: opts.Conns, draining: ctx.Done(), space: opts.Space})
	mux.Handle("GET /metrics", opts.Metrics)
	mux.Handle("/v1/", a.wrap(openAIErrors, v1))
	ctr, err := containers.NewHandler(executorv1.NewExecutorServiceClient(opts.Conns["executor"]), skillStore, opts.Logger)
	if err != nil {
		return nil, err
	}
	// Anthropic's SDKs send their key as x-api-key.
	messages := anthropic.NewHandler(core, opts.ApprovalPause, opts.Logger)
	ak := *a
	ak.apiKeyHeader = true
	mux.Handle("/v1/messages", ak.wrap(anthropicErrors, messages))
	mux.Handle("/v1/messages/", ak.wrap(anthropicErrors, messages))
	// The model list is OpenAI's and Anthropic's both: a request with
	// Anthropic's version header gets Anthropic's shape.
	models := bySDK(ak.wrap(anthropicErrors, messages), a.wrap(openAIErrors, v1))
	mux.Handle("/v1/models", models)
	mux.Handle("/v1/models/", models)
	// Skills are OpenAI's and Anthropic's both, in each one's shapes.
	sk := skills.NewHandler(skillStore, opts.Logger, openAIErrors, anthropicErrors)
	skillsAPI := bySDK(ak.wrap(anthropicErrors, sk.Anthropic), a.wrap(openAIErrors, sk.OpenAI))
	mux.Handle("/v1/skills", skillsAPI)
	mux.Handle("/v1/skills/", skillsAPI)
	mux.Handle("/v1/containers", a.wrap(openAIErrors, ctr))
	mux.Handle("/v1/containers/", a.wrap(openAIErrors, ctr))
	mcpHandler, err := mcpserver.NewHandler(mcpserver.Options{
		Core:       core,
		Executor:   executorv1.NewExecutorServiceClient(opts.Conns["executor"]),
		Approvals:  approvalv1.NewApprovalServiceClient(opts.Conns["approval"]),
		Workspaces: workspacev1.NewWorkspaceServiceClient(opts.Conns["workspace"]),
		Logger:     opts.Logger,
		Claims:     &mcpClaims{ctx: ctx, etcd: opts.Etcd, accounts: opts.Service.Accounts(), log: opts.Logger},
	})
	if err != nil {
		return nil, err
	}
	// A revoked key ends the MCP sessions it opened, on every router.
	go opts.Service.Accounts().WatchRevocations(ctx, mcpHandler.EndKey)
	mux.Handle("/mcp", a.wrap(openAIErrors, mcpHandler))
	mux.Handle("/mcp/{gateway}", a.wrap(openAIErrors, mcpHandler))
	mux.Handle("/api/v1/", a.wrap(apiErrors, gw))
	ea := &execApprovals{client: approvalv1.NewApprovalServiceClient(opts.Conns["approval"]), log: opts.Logger}
	mux.Handle("GET /api/v1/exec-approvals", a.wrap(apiErrors, http.HandlerFunc(ea.get)))
	mux.Handle("PUT /api/v1/exec-approvals", a.wrap(apiErrors, http.HandlerFunc(ea.put)))
	registerUI(mux)
	mux.HandleFunc("/", home)
	if opts.UploadIdleTimeout <= 0 {
		opts.UploadIdleTimeout = DefaultUploadIdleTimeout
	}
	files := &fileRoutes{ws: workspacev1.NewWorkspaceServiceClient(opts.Conns["workspace"]), log: opts.Logger, idle: opts.UploadIdleTimeout}
	files.register(mux, func(h http.Handler) http.Handler { return a.wrap(apiErrors, h) }, gw)
	term, err := newTerminalRoutes(executorv1.NewExecutorServiceClient(opts.Conns["executor"]), opts.Service.Gateways(), opts.Service.Accounts(), opts.InternalSecret, opts.Logger)
	if err != nil {
		return nil, err
	}
	term.register(mux, func(h http.Handler) http.Handler { return a.wrap(apiErrors, h) })
	ports, err := newPortRoutes(executorv1.NewExecutorServiceClient(opts.Conns["executor"]), tokenSecret(opts.InternalSecret), opts.Logger)
	if err != nil {
		return nil, err
	}
	ports.register(mux, func(h http.Handler) http.Handler { return a.wrap(apiErrors, h) })
	watch := &watchRoutes{exec: executorv1.NewExecutorServiceClient(opts.Conns["executor"]), log: opts.Logger}
	watch.register(mux, func(h http.Handler) http.Handler { return a.wrap(apiErrors, h) })
	cmds := &commandRoutes{exec: executorv1.NewExecutorServiceClient(opts.Conns["executor"]), gw: gw, log: opts.Logger}
	cmds.register(mux, func(h http.Handler) http.Handler { return a.wrap(apiErrors, h) })
	tpl := &templateRoutes{t: workspacev1.NewTemplateServiceClient(opts.Conns["workspace"]), log: opts.Logger, idle: opts.UploadIdleTimeout}
	tpl.register(mux, func(h http.Handler) http.Handler { return a.wrap(apiErrors, h) })
	// The global providers forward to the process's once telemetry is set
	// up.
	api, err := telemetry.NewHTTPHandler(recoverPanics(opts.Logger, mux), otel.GetTracerProvider(), otel.GetMeterProvider())
	if err != nil {
		return nil, err
	}
	// Paired nodes connect here over gRPC (HTTP/2): it is the one address
	// they can reach.
	nodeGRPC := newNodeGRPC(ctx, opts.Service.nodes, executorv1.NewExecutorServiceClient(opts.Conns["executor"]), opts.Logger)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isGRPC(r) {
			nodeGRPC.ServeHTTP(w, r)
			return
		}
		if ctx.Err() != nil {
			// HTTP/1 closes the connection after this response; HTTP/2
			// sends GOAWAY.
			w.Header().Set("Connection", "close")
		}
		api.ServeHTTP(w, r)
	}), nil
}

// setQueryParser makes conch's query parser grpc-gateway's, once: the
// option sets a variable of the package, not of the mux, so a second mux
// made while the first serves (tests make several) would write it while
// requests read it.
var setQueryParser = sync.OnceFunc(func() {
	runtime.NewServeMux(runtime.SetQueryParameterParser(restjson.QueryParser{}))
})

// gatewayMuxOptions are those of the REST API's grpc-gateway mux: conch's
// JSON codec, and every error in the API's envelope. Its query parser is
// set once for the process (setQueryParser).
func gatewayMuxOptions(log *slog.Logger) []runtime.ServeMuxOption {
	setQueryParser()
	return append([]runtime.ServeMuxOption{
		runtime.WithMarshalerOption(runtime.MIMEWildcard, restjson.New()),
		// Nothing from the HTTP request becomes gRPC metadata: the scope the
		// services trust is set by the auth middleware and signed on the way
		// out, so no header can be smuggled through.
		runtime.WithIncomingHeaderMatcher(func(string) (string, bool) { return "", false }),
	}, apierror.GatewayOptions(log)...)
}

func newGatewayMux(ctx context.Context, conns map[string]*grpc.ClientConn, gateways gatewayGetter, log *slog.Logger) (*runtime.ServeMux, error) {
	mux := runtime.NewServeMux(gatewayMuxOptions(log)...)
	register := []struct {
		service string
		fn      func(context.Context, *runtime.ServeMux, *grpc.ClientConn) error
	}{
		{"router", routerv1.RegisterAccountServiceHandler},
		{"router", routerv1.RegisterGatewayServiceHandler},
		{"router", routerv1.RegisterNodeServiceHandler},
		{"executor", executorv1.RegisterExecutorServiceHandler},
		{"workspace", workspacev1.RegisterWorkspaceServiceHandler},
		{"workspace", workspacev1.RegisterTemplateServiceHandler},
		{"approval", approvalv1.RegisterAuditServiceHandler},
	}
	for _, r := range register {
		if err := r.fn(ctx, mux, conns[r.service]); err != nil {
			return nil, fmt.Errorf("router: register %s REST handlers: %w", r.service, err)
		}
	}
	approvals := sandboxEvaluate{
		ApprovalServiceClient: approvalv1.NewApprovalServiceClient(conns["approval"]),
		exec:                  executorv1.NewExecutorServiceClient(conns["executor"]),
		gateways:              gateways, log: log,
	}
	if err := approvalv1.RegisterApprovalServiceHandlerClient(ctx, mux, approvals); err != nil {
		return nil, fmt.Errorf("router: register approval REST handlers: %w", err)
	}
	return mux, nil
}

// recoverPanics turns a panic in a handler into a logged 500, so one bad
// request never takes the connection down with a bare EOF.
func recoverPanics(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				log.ErrorContext(r.Context(), "http handler panicked", "panic", p, "path", r.URL.Path, "stack", string(debug.Stack()))
				apierror.Write(r.Context(), nil, w, errs.New(errs.Internal, "http handler panicked"))
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// errorWriter writes an error in the shape of an API surface.
type errorWriter func(w http.ResponseWriter, err error)

// openAIErrors writes OpenAI's error shape, used on /v1 and /mcp.
func openAIErrors(w http.ResponseWriter, err error) { openai.WriteAnswer(w, errs.Public(err)) }

// bySDK sends requests that carry Anthropic's anthropic-version header to
// anthropic, the others to openAI.
func bySDK(anthropic, openAI http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Anthropic-Version") != "" {
			anthropic.ServeHTTP(w, r)
			return
		}
		openAI.ServeHTTP(w, r)
	})
}

// anthropicErrors writes Anthropic's error shape, used on /v1/messages.
func anthropicErrors(w http.ResponseWriter, err error) { anthropic.WriteAnswer(w, errs.Public(err)) }

// apiErrors writes the REST API's envelope, used on /api/v1.
func apiErrors(w http.ResponseWriter, err error) { apierror.WriteAnswer(w, errs.Public(err)) }

// authMiddleware authenticates the bearer key and puts the request's scope in
// its context.
type authMiddleware struct {
	auth      authenticator
	publicURL string
	log       *slog.Logger
	// apiKeyHeader also takes the key from an x-api-key header, as
	// Anthropic's API does, when the request has no Authorization.
	apiKeyHeader bool
}

func (a *authMiddleware) wrap(fail errorWriter, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, ok := bearer(r.Header.Get("Authorization"))
		if k := r.Header.Get("X-Api-Key"); a.apiKeyHeader && r.Header.Get("Authorization") == "" && k != "" {
			key, ok = k, !strings.ContainsAny(k, " \t")
		}
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="conch"`)
			msg := "missing or malformed Authorization header: want \"Bearer <API key>\""
			if a.apiKeyHeader {
				msg = "missing or malformed API key: send it as x-api-key or as \"Authorization: Bearer <API key>\""
			}
			fail(w, errs.NewReason(errs.Unauthenticated, errs.ReasonInvalidAPIKey, "%s", msg))
			return
		}
		p, err := a.auth.Authenticate(r.Context(), key)
		if err != nil {
			if errs.KindOf(err) == errs.Unauthenticated {
				w.Header().Set("WWW-Authenticate", `Bearer realm="conch", error="invalid_token"`)
				err = &errs.Error{Kind: errs.Unauthenticated, Reason: errs.ReasonInvalidAPIKey, Err: err}
			} else {
				a.log.ErrorContext(r.Context(), "authentication failed", "error", err)
				err = errs.New(errs.Unavailable, "authentication is unavailable; try again")
			}
			fail(w, err)
			return
		}
		scope := tenant.Scope{Account: p.Account, Admin: p.Admin, PublicURL: a.publicURL,
			Key: p.KeyID, Surface: tenant.SurfaceOf(r.Header.Get(tenant.ClientHeader))}
		if scope.PublicURL == "" {
			scope.PublicURL = requestBaseURL(r)
		}
		if v, ok := r.Header["X-Shell-User-Id"]; ok {
			if len(v) != 1 || !tenant.ValidUserID(v[0]) {
				fail(w, errs.Invalid("X-Shell-User-Id", "must be "+tenant.UserIDRule))
				return
			}
			scope.User = v[0]
		}
		if v, ok := r.Header["X-Conch-Session-Id"]; ok {
			if len(v) != 1 || !tenant.ValidSessionID(v[0]) {
				fail(w, errs.Invalid("X-Conch-Session-Id", "must be 1-128 characters of [A-Za-z0-9._:@-]"))
				return
			}
			scope.Session = v[0]
		}
		next.ServeHTTP(w, r.WithContext(tenant.With(r.Context(), scope)))
	})
}

// bearer extracts the token of an "Authorization: Bearer <token>" header.
func bearer(h string) (string, bool) {
	const prefix = "bearer "
	if len(h) <= len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return "", false
	}
	tok := strings.TrimSpace(h[len(prefix):])
	return tok, tok != "" && !strings.ContainsAny(tok, " \t")
}

func requestBaseURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// readiness answers /readyz: 200 when every service has a registered
// endpoint that reports SERVING through discovery, 503 once the router
// drains.
//
// etcd's space is reported in the body ("etcd"), and an alarm makes the
// status "degraded", but it does not fail readiness: the alarm is the
// cluster's, so every router would fail at once and a load balancer would
// take them all out, ending the reads, deletes and answers to approvals
// that still work without space, and the writes that work again the
// moment the elected router has freed space. Alert on the metrics
// (conch_etcd_alarm) instead.
type readiness struct {
	conns    map[string]*grpc.ClientConn
	draining <-chan struct{}
	space    EtcdSpace
}

func (h *readiness) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	select {
	case <-h.draining:
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "draining"})
		return
	default:
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	type result struct {
		name string
		err  error
	}
	results := make(chan result, len(ServiceNames))
	for _, name := range ServiceNames {
		go func() {
			results <- result{name, discovery.CheckReady(ctx, h.conns[name], name)}
		}()
	}
	services := make(map[string]string, len(ServiceNames))
	ready := true
	for range ServiceNames {
		res := <-results
		services[res.name] = "ok"
		if res.err != nil {
			ready = false
			services[res.name] = res.err.Error()
		}
	}
	code, state := http.StatusOK, "ready"
	body := map[string]any{"services": services}
	if h.space != nil {
		etcd, degraded := etcdReport(h.space)
		body["etcd"] = etcd
		if degraded {
			state = "degraded"
		}
	}
	if !ready {
		code, state = http.StatusServiceUnavailable, "unavailable"
	}
	body["status"] = state
	writeJSON(w, code, body)
}

// etcdReport is etcd's space as /readyz shows it: each member's sizes,
// the alarms, and which writes etcd takes ("all", "small" past the
// high-water mark, "none" under NOSPACE); degraded when not all.
func etcdReport(sp EtcdSpace) (report map[string]any, degraded bool) {
	s := sp.Space()
	writes := "all"
	report = map[string]any{"members": s.Members, "alarms": s.Alarms, "high_water": s.HighWater}
	if s.Members == nil {
		report["members"] = []etcdx.MemberSpace{}
	}
	if s.Alarms == nil {
		report["alarms"] = []etcdx.Alarm{}
	}
	if err := sp.AdmitBulk(0); err != nil {
		writes = "small"
		report["bulk_writes"] = err.Error()
	}
	if s.NoSpace() {
		writes = "none"
	}
	report["writes"] = writes
	if !s.Checked.IsZero() {
		report["checked_at"] = s.Checked.UTC().Format(time.RFC3339)
	}
	if s.Err != "" {
		report["error"] = s.Err
	}
	return report, writes != "all" || len(s.Alarms) > 0
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}
