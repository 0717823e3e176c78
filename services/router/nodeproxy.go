package router

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	"github.com/conch-sh/conch/services/internal/placement"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/router/nodes"
)

// nodeProxy serves ExecutorService.AttachNode on the router's public
// address, the one place a node can reach: it checks the node's pairing
// token, then passes the stream on to an executor with the node's account
// signed in, without the token. Every other method is unimplemented here.
type nodeProxy struct {
	executorv1.UnimplementedExecutorServiceServer
	nodes *nodes.Store
	exec  executorv1.ExecutorServiceClient
	// closing ends every node stream, so nodes reconnect to another router
	// rather than hold this one's shutdown.
	closing <-chan struct{}
	log     *slog.Logger
}

// newNodeGRPC returns the gRPC server nodes reach through the router's HTTP
// listener (HTTP/2, h2c in a local cluster).
func newNodeGRPC(ctx context.Context, store *nodes.Store, exec executorv1.ExecutorServiceClient, log *slog.Logger) *grpc.Server {
	g := grpc.NewServer(
		grpc.StatsHandler(otelgrpc.NewServerHandler()),
		grpc.ChainStreamInterceptor(errs.StreamServerInterceptor(log)),
		grpc.MaxRecvMsgSize(4<<20),
	)
	executorv1.RegisterExecutorServiceServer(g, &nodeProxy{nodes: store, exec: exec, closing: ctx.Done(), log: log})
	return g
}

// isGRPC reports whether r is a gRPC call.
func isGRPC(r *http.Request) bool {
	return r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc")
}

func (p *nodeProxy) AttachNode(stream executorv1.ExecutorService_AttachNodeServer) error {
	ctx := stream.Context()
	hello, err := placement.ReadHello(ctx, stream)
	if err != nil {
		return err
	}
	account, name, err := p.nodes.Authenticate(ctx, hello.GetToken())
	if err != nil {
		return err
	}
	if hello.GetName() != name {
		return errs.New(errs.PermissionDenied, "this token pairs node %q, not %q", name, hello.GetName())
	}
	ctx, cancel := context.WithCancel(tenant.With(ctx, tenant.Scope{Account: account}))
	defer cancel()
	up, err := p.exec.AttachNode(ctx)
	if err != nil {
		return err
	}
	if err := up.Send(&executorv1.AttachNodeRequest{Message: &executorv1.AttachNodeRequest_Hello{Hello: &executorv1.NodeHello{
		Name: name, Platform: hello.GetPlatform(), Workdir: hello.GetWorkdir(),
	}}}); err != nil {
		return err
	}
	errc := make(chan error, 2)
	go func() {
		for {
			m, err := stream.Recv()
			if err == nil && m.GetHello() != nil {
				err = errs.New(errs.InvalidArgument, "a node may say hello only once")
			}
			if err == nil {
				err = up.Send(m)
			}
			if err != nil {
				errc <- err
				return
			}
		}
	}()
	go func() {
		for {
			m, err := up.Recv()
			if err == nil {
				err = stream.Send(m)
			}
			if err != nil {
				errc <- err
				return
			}
		}
	}()
	unpaired := p.nodes.Unpaired(ctx, account, name)
	p.log.InfoContext(ctx, "node connected", "node", name, "account", account)
	select {
	case err = <-errc:
		if errors.Is(err, io.EOF) {
			err = nil
		}
	case <-unpaired:
		err = ctx.Err()
		if err == nil {
			err = errs.New(errs.PermissionDenied, "node %q was unpaired", name)
		}
	case <-p.closing:
		err = errs.New(errs.Unavailable, "the router is shutting down; connect again")
	}
	p.log.InfoContext(ctx, "node disconnected", "node", name, "account", account, "reason", err)
	return err
}
