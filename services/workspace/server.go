// Package workspace is the workspace service: it stores persistent workspaces.
package workspace

import (
	"google.golang.org/grpc"

	workspacev1 "github.com/conch-sh/conch/gen/go/conch/workspace/v1"
)

// Server serves WorkspaceService. RPCs not yet built answer Unimplemented.
type Server struct {
	workspacev1.UnimplementedWorkspaceServiceServer
}

// New returns the workspace service.
func New() *Server {
	return &Server{}
}

// Register registers the service's gRPC handlers on g.
func (s *Server) Register(g *grpc.Server) {
	workspacev1.RegisterWorkspaceServiceServer(g, s)
}
