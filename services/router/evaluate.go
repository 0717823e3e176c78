package router

import (
	"context"
	"log/slog"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
	"github.com/conch-sh/conch/services/internal/execpolicy"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
)

// sandboxEvaluate is the approval client behind the REST API. Its Evaluate
// answers what would happen to the command as a shell call on the agent's
// gateway: the gateway's exec settings are layered as the exec path layers
// them (execpolicy.Tighten, then the approval service's Effective with the
// document and the host), and for host sandbox the programs are those a
// new sandbox would run, which an executor finds: the approval service's
// own filesystem may hold other programs, or none.
type sandboxEvaluate struct {
	approvalv1.ApprovalServiceClient
	exec     executorv1.ExecutorServiceClient
	gateways gatewayGetter
	log      *slog.Logger
}

// gatewayGetter finds an account's gateway.
type gatewayGetter interface {
	Get(ctx context.Context, account, name string) (*routerv1.Gateway, error)
}

func (c sandboxEvaluate) Evaluate(ctx context.Context, req *approvalv1.EvaluateRequest, opts ...grpc.CallOption) (*approvalv1.EvaluateResponse, error) {
	// What a client says a sandbox finds, or which settings apply, counts
	// for nothing.
	req.SandboxResolution, req.Settings = nil, nil
	if err := c.gatewaySettings(ctx, req); err != nil {
		return nil, err
	}
	if h := req.GetHost(); h == approvalv1.Host_HOST_UNSPECIFIED || h == approvalv1.Host_HOST_SANDBOX {
		res, err := c.exec.ResolveCommand(ctx, &executorv1.ResolveCommandRequest{
			Command: req.GetCommand(), Cwd: req.GetCwd(), PathPrepend: req.GetSettings().GetPathPrepend(),
		})
		switch status.Code(err) {
		case codes.OK:
			req.SandboxResolution = &approvalv1.SandboxResolution{Segments: res.GetSegments()}
		case codes.InvalidArgument:
			return nil, err
		default:
			// Without an executor, the approval service's own
			// filesystem is the best guess there is.
			c.log.WarnContext(ctx, "evaluate: no executor to resolve the command as a sandbox would", "error", err)
		}
	}
	return c.ApprovalServiceClient.Evaluate(ctx, req, opts...)
}

// gatewaySettings puts the exec settings of the agent's gateway into req,
// as a shell call on that gateway gets them, and the gateway's host when
// req names none. An agent that names no gateway is judged by the
// exec-approvals document alone.
func (c sandboxEvaluate) gatewaySettings(ctx context.Context, req *approvalv1.EvaluateRequest) error {
	scope, ok := tenant.From(ctx)
	if !ok || req.GetAgent() == "" || c.gateways == nil {
		return nil
	}
	g, err := c.gateways.Get(ctx, scope.Account, req.GetAgent())
	if errs.KindOf(err) == errs.NotFound {
		return nil
	}
	if err != nil {
		return err
	}
	var o execpolicy.Override
	if h := req.GetHost(); h != approvalv1.Host_HOST_UNSPECIFIED {
		o.Host = execpolicy.Word(execpolicy.Hosts, h)
	}
	settings, refusals := execpolicy.Tighten(g.GetExec(), o)
	if len(refusals) > 0 {
		// A host the gateway does not run commands on: the question is
		// what its settings say there, so they are judged for that host
		// (stricter-wins with the document, as for any gateway or node).
		settings = &approvalv1.ExecSettings{}
		if g.GetExec() != nil {
			settings = proto.Clone(g.GetExec()).(*approvalv1.ExecSettings)
		}
		settings.Host = req.GetHost()
	}
	req.Settings, req.Host = settings, settings.GetHost()
	return nil
}
