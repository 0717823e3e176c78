package placement

import (
	"context"
	"time"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	"github.com/conch-sh/conch/services/internal/platform/errs"
)

// HelloTimeout bounds the wait for a connecting node's hello.
const HelloTimeout = 10 * time.Second

// ReadHello reads a node's first message from stream, which must be its
// hello, waiting at most HelloTimeout.
func ReadHello(ctx context.Context, stream interface {
	Recv() (*executorv1.AttachNodeRequest, error)
}) (*executorv1.NodeHello, error) {
	first := make(chan *executorv1.AttachNodeRequest, 1)
	go func() {
		if m, err := stream.Recv(); err == nil {
			first <- m
		}
		close(first)
	}()
	var hello *executorv1.NodeHello
	select {
	case m := <-first:
		hello = m.GetHello()
	case <-time.After(HelloTimeout):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if hello == nil {
		return nil, errs.New(errs.InvalidArgument, "a node's first message must be its hello")
	}
	return hello, nil
}
