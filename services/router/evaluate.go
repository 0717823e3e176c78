package router

import (
	"context"
	"log/slog"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
)

// sandboxEvaluate is the approval client behind the REST API. Its Evaluate
// of a command for host sandbox judges the programs a new sandbox would
// run, which an executor finds: the approval service's own filesystem may
// hold other programs, or none.
type sandboxEvaluate struct {
	approvalv1.ApprovalServiceClient
	exec executorv1.ExecutorServiceClient
	log  *slog.Logger
}

func (c sandboxEvaluate) Evaluate(ctx context.Context, req *approvalv1.EvaluateRequest, opts ...grpc.CallOption) (*approvalv1.EvaluateResponse, error) {
	// What a client says a sandbox finds counts for nothing.
	req.SandboxResolution = nil
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
