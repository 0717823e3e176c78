// Package approval is the approval service: it judges commands against the exec policy and keeps approvals.
package approval

import (
	"google.golang.org/grpc"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
)

// Server serves ApprovalService. RPCs not yet built answer Unimplemented.
type Server struct {
	approvalv1.UnimplementedApprovalServiceServer
}

// New returns the approval service.
func New() *Server {
	return &Server{}
}

// Register registers the service's gRPC handlers on g.
func (s *Server) Register(g *grpc.Server) {
	approvalv1.RegisterApprovalServiceServer(g, s)
}
