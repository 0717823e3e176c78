package router

import (
	"context"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/router/accounts"
	"github.com/conch-sh/conch/services/router/gateways"
)

// gatewayServer serves GatewayService: thin handlers over gateways.Store,
// scoped to the caller's account, secrets removed from every answer.
type gatewayServer struct {
	routerv1.UnsafeGatewayServiceServer
	store *gateways.Store
	// accounts answers whether the caller's account holds a grant a
	// gateway asks for; nil refuses every grant.
	accounts *accounts.Store
}

// checkGrants refuses a gateway that asks for what its account was not
// granted: the gateway host is the operator's machine.
func (s *gatewayServer) checkGrants(ctx context.Context, account string, g *routerv1.Gateway) error {
	if g.GetExec().GetHost() != approvalv1.Host_HOST_GATEWAY {
		return nil
	}
	if s.accounts != nil {
		ok, err := s.accounts.HasGrant(ctx, account, accounts.GrantGatewayHost)
		if err != nil || ok {
			return err
		}
	}
	return accounts.ErrNotGranted(account, accounts.GrantGatewayHost)
}

var _ routerv1.GatewayServiceServer = (*gatewayServer)(nil)

func (s *gatewayServer) CreateGateway(ctx context.Context, req *routerv1.CreateGatewayRequest) (*routerv1.CreateGatewayResponse, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.checkGrants(ctx, account, req.GetGateway()); err != nil {
		return nil, err
	}
	g, err := s.store.Create(ctx, account, req.GetGateway())
	if err != nil {
		return nil, err
	}
	return &routerv1.CreateGatewayResponse{Gateway: gateways.Redact(g)}, nil
}

func (s *gatewayServer) GetGateway(ctx context.Context, req *routerv1.GetGatewayRequest) (*routerv1.GetGatewayResponse, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	g, err := s.store.Get(ctx, account, req.GetName())
	if err != nil {
		return nil, err
	}
	return &routerv1.GetGatewayResponse{Gateway: gateways.Redact(g)}, nil
}

func (s *gatewayServer) ListGateways(ctx context.Context, _ *routerv1.ListGatewaysRequest) (*routerv1.ListGatewaysResponse, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	list, err := s.store.List(ctx, account)
	if err != nil {
		return nil, err
	}
	resp := &routerv1.ListGatewaysResponse{Gateways: make([]*routerv1.Gateway, len(list))}
	for i, g := range list {
		resp.Gateways[i] = gateways.Redact(g)
	}
	return resp, nil
}

func (s *gatewayServer) UpdateGateway(ctx context.Context, req *routerv1.UpdateGatewayRequest) (*routerv1.UpdateGatewayResponse, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.checkGrants(ctx, account, req.GetGateway()); err != nil {
		return nil, err
	}
	g, err := s.store.Update(ctx, account, req.GetName(), req.GetGateway(), req.GetUpdateMask())
	if err != nil {
		return nil, err
	}
	return &routerv1.UpdateGatewayResponse{Gateway: gateways.Redact(g)}, nil
}

func (s *gatewayServer) DeleteGateway(ctx context.Context, req *routerv1.DeleteGatewayRequest) (*routerv1.DeleteGatewayResponse, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.store.Delete(ctx, account, req.GetName()); err != nil {
		return nil, err
	}
	return &routerv1.DeleteGatewayResponse{}, nil
}
