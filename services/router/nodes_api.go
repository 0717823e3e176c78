package router

import (
	"context"

	"google.golang.org/protobuf/types/known/timestamppb"

	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/router/nodes"
)

// nodeServer serves NodeService: thin handlers over nodes.Store, scoped to
// the caller's account.
type nodeServer struct {
	routerv1.UnsafeNodeServiceServer
	store *nodes.Store
}

var _ routerv1.NodeServiceServer = (*nodeServer)(nil)

func nodePB(n nodes.Node) *routerv1.Node {
	pb := &routerv1.Node{Name: n.Name, Connected: n.Connected, Platform: n.Platform, Executor: n.Executor, CreatedAt: timestamppb.New(n.CreatedAt)}
	if n.Connected {
		pb.ConnectedAt = timestamppb.New(n.ConnectedAt)
	}
	return pb
}

func (s *nodeServer) CreateNode(ctx context.Context, req *routerv1.CreateNodeRequest) (*routerv1.CreateNodeResponse, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	n, token, err := s.store.Create(ctx, account, req.GetName())
	if err != nil {
		return nil, err
	}
	return &routerv1.CreateNodeResponse{Node: nodePB(n), Token: token}, nil
}

func (s *nodeServer) ListNodes(ctx context.Context, _ *routerv1.ListNodesRequest) (*routerv1.ListNodesResponse, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	list, err := s.store.List(ctx, account)
	if err != nil {
		return nil, err
	}
	resp := &routerv1.ListNodesResponse{Nodes: make([]*routerv1.Node, len(list))}
	for i, n := range list {
		resp.Nodes[i] = nodePB(n)
	}
	return resp, nil
}

func (s *nodeServer) DeleteNode(ctx context.Context, req *routerv1.DeleteNodeRequest) (*routerv1.DeleteNodeResponse, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.store.Delete(ctx, account, req.GetName()); err != nil {
		return nil, err
	}
	return &routerv1.DeleteNodeResponse{}, nil
}
