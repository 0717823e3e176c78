// Package executor is the executor service: it owns sandboxes and runs commands in them.
package executor

import (
	"google.golang.org/grpc"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
)

// Server serves ExecutorService. RPCs not yet built answer Unimplemented.
type Server struct {
	executorv1.UnimplementedExecutorServiceServer
}

// New returns the executor service.
func New() *Server {
	return &Server{}
}

// Register registers the service's gRPC handlers on g.
func (s *Server) Register(g *grpc.Server) {
	executorv1.RegisterExecutorServiceServer(g, s)
}
