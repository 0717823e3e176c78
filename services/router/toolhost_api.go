package router

import (
	"context"
	"slices"

	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/router/gateways"
	"github.com/conch-sh/conch/services/router/toolhost"
)

// toolHostServer serves ToolHostService: executors call it for the tool
// commands of a sandbox, which must hold a grant of the caller's account
// for that tool.
type toolHostServer struct {
	routerv1.UnsafeToolHostServiceServer
	gateways *gateways.Store
	grants   *toolhost.Grants
	deps     toolhost.Deps
}

var _ routerv1.ToolHostServiceServer = (*toolHostServer)(nil)

func (s *toolHostServer) CallTool(ctx context.Context, req *routerv1.CallToolRequest) (*routerv1.CallToolResponse, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	grant, err := s.grants.Get(ctx, account, req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	if !slices.Contains(grant.Tools, req.GetTool()) {
		return nil, errs.New(errs.NotFound, "tool %q is not available in this sandbox", req.GetTool())
	}
	g, err := s.gateways.Get(ctx, account, grant.Gateway)
	if err != nil {
		return nil, err
	}
	set, err := toolhost.Build(ctx, g, s.deps)
	if err != nil {
		return nil, errs.Wrap(errs.Unavailable, err, "tools of gateway %q", grant.Gateway)
	}
	defer set.Close()
	out, isErr, err := set.Call(ctx, req.GetTool(), req.GetArguments())
	if err != nil {
		return nil, errs.New(errs.InvalidArgument, "%v", err)
	}
	return &routerv1.CallToolResponse{Output: out, IsError: isErr}, nil
}
