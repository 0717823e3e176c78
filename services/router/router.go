// Package router is the router service: the only public HTTP entry of conch.
// It authenticates API keys, serves the REST API of all four services through
// grpc-gateway, and (in later work) the OpenAI-compatible API, the agent loop
// and the web UI.
package router

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
	"github.com/conch-sh/conch/services/internal/outbound"
	"github.com/conch-sh/conch/services/router/accounts"
	"github.com/conch-sh/conch/services/router/gateways"
	"github.com/conch-sh/conch/services/router/nodes"
	"github.com/conch-sh/conch/services/router/review"
	"github.com/conch-sh/conch/services/router/toolhost"
	"github.com/conch-sh/conch/services/router/upstream"
)

// Service is the router's gRPC side.
type Service struct {
	etcd     *clientv3.Client
	accounts *accounts.Store
	gateways *gateways.Store
	nodes    *nodes.Store
	grants   *toolhost.Grants
	// Every outbound call made for a tenant goes through guard: upstream
	// models (upstream), webhook and MCP tools (http), the built-ins
	// (egress) and the reviewer.
	guard    *outbound.Guard
	upstream *http.Client
	http     *http.Client
	egress   *http.Client
}

// New returns the router service, whose calls for tenants go through
// guard.
func New(ctx context.Context, cli *clientv3.Client, cfg Config, guard *outbound.Guard, log *slog.Logger) (*Service, error) {
	if cli == nil || guard == nil {
		return nil, errors.New("router: nil etcd client or outbound guard")
	}
	store, err := accounts.New(ctx, cli, cfg.AdminKey, cfg.AdminAccount)
	if err != nil {
		return nil, err
	}
	keys, err := cfg.Keyring()
	if err != nil {
		return nil, err
	}
	gws, err := gateways.New(cli, keys, log, guard)
	if err != nil {
		return nil, err
	}
	gws.SetQuotaLimits(store.Limits)
	return &Service{
		etcd:     cli,
		accounts: store,
		gateways: gws,
		nodes:    nodes.New(cli),
		grants:   toolhost.NewGrants(cli),
		guard:    guard,
		upstream: upstreamClient(guard),
		http:     guard.Client(5 * time.Minute),
		egress:   builtinsClient(guard),
	}, nil
}

// upstreamClient calls upstream models: many concurrent completions, so
// enough idle connections per host that a busy gateway does not
// reconnect; no overall timeout (a gateway's upstream.timeout_seconds
// bounds each call).
func upstreamClient(guard *outbound.Guard) *http.Client {
	c := guard.Client(0)
	tr := c.Transport.(*http.Transport)
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 1024, 256
	return c
}

// builtinsClient calls the built-in tools' targets, with bounded time.
func builtinsClient(guard *outbound.Guard) *http.Client {
	c := guard.Client(60 * time.Second)
	tr := c.Transport.(*http.Transport)
	tr.TLSHandshakeTimeout, tr.ResponseHeaderTimeout = 10*time.Second, 30*time.Second
	tr.MaxIdleConns, tr.IdleConnTimeout = 16, 30*time.Second
	return c
}

// UpstreamClient calls upstream models through the outbound guard.
func (s *Service) UpstreamClient() *http.Client { return s.upstream }

// Grants returns the tool grants of sandboxes.
func (s *Service) Grants() *toolhost.Grants { return s.grants }

// ToolDeps are the HTTP clients server tools use.
func (s *Service) ToolDeps() toolhost.Deps { return toolhost.Deps{HTTP: s.http, Egress: s.egress} }

// Gateways returns the gateway store.
func (s *Service) Gateways() *gateways.Store { return s.gateways }

// Run keeps the router's caches in step with etcd until ctx ends.
func (s *Service) Run(ctx context.Context) {
	go s.accounts.Watch(ctx)
	s.gateways.Watch(ctx)
}

// Accounts returns the account store, which authenticates HTTP requests.
func (s *Service) Accounts() *accounts.Store { return s.accounts }

// Register registers the router's gRPC services on g.
func (s *Service) Register(g *grpc.Server) {
	routerv1.RegisterAccountServiceServer(g, &accountServer{store: s.accounts, etcd: s.etcd})
	routerv1.RegisterGatewayServiceServer(g, &gatewayServer{store: s.gateways, accounts: s.accounts})
	routerv1.RegisterNodeServiceServer(g, &nodeServer{store: s.nodes})
	routerv1.RegisterToolHostServiceServer(g, &toolHostServer{gateways: s.gateways, grants: s.grants, deps: s.ToolDeps()})
	// The reviewer calls a gateway's upstream as completions do.
	routerv1.RegisterReviewServiceServer(g, &review.Server{Gateways: s.gateways, Client: s.guard.Client(review.Timeout), Retry: upstream.DefaultRetry})
}
