package executor

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	workspacev1 "github.com/conch-sh/conch/gen/go/conch/workspace/v1"
	"github.com/conch-sh/conch/services/executor/wsclient"
)

// hungWorkspace is a workspace service whose first flush never answers:
// it holds the stream until the caller gives up. Later flushes are stored.
type hungWorkspace struct {
	workspacev1.UnimplementedWorkspaceServiceServer
	flushes atomic.Int32
	// release ends a hung flush when the test ends, so that an executor
	// without a flush deadline fails the test instead of hanging its
	// shutdown.
	release chan struct{}
}

func (h *hungWorkspace) Hydrate(_ *workspacev1.HydrateRequest, stream grpc.ServerStreamingServer[workspacev1.HydrateResponse]) error {
	return stream.Send(&workspacev1.HydrateResponse{Message: &workspacev1.HydrateResponse_Revision{Revision: 1}})
}

func (h *hungWorkspace) GetUsage(context.Context, *workspacev1.GetUsageRequest) (*workspacev1.GetUsageResponse, error) {
	return &workspacev1.GetUsageResponse{}, nil
}

func (h *hungWorkspace) Flush(stream grpc.ClientStreamingServer[workspacev1.FlushRequest, workspacev1.FlushResponse]) error {
	if h.flushes.Add(1) == 1 {
		select {
		case <-stream.Context().Done():
			return stream.Context().Err()
		case <-h.release:
			return errors.New("released at the end of the test")
		}
	}
	for {
		if _, err := stream.Recv(); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return err
		}
	}
	return stream.SendAndClose(&workspacev1.FlushResponse{Revision: 2})
}

// TestFlushTimeout checks that a workspace service that never answers a
// flush costs one command its saved changes, within the flush timeout,
// and never holds the sandbox's later commands.
func TestFlushTimeout(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	ws := &hungWorkspace{release: make(chan struct{})}
	workspacev1.RegisterWorkspaceServiceServer(g, ws)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })

	const timeout = 2 * time.Second
	x := startExecutor(t, WithWorkspaces(wsclient.NewWorkspaces(workspacev1.NewWorkspaceServiceClient(conn), 1<<20)), WithFlushTimeout(timeout))
	t.Cleanup(func() { close(ws.release) })
	ctx := as(t, "acct")
	created, err := x.client.CreateSandbox(ctx, &executorv1.CreateSandboxRequest{Persistent: true, User: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = x.client.DestroySandbox(as(t, "acct"), &executorv1.DestroySandboxRequest{Id: created.GetId()})
	})

	// Before the fix the command never returned; the call's own deadline
	// turns that into a failure rather than a hung test.
	run := func(command string) (*executorv1.RunCommandResponse, time.Duration) {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, timeout+20*time.Second)
		defer cancel()
		start := time.Now()
		resp, err := x.client.RunCommand(ctx, &executorv1.RunCommandRequest{SandboxId: created.GetId(), Command: command})
		if err != nil {
			t.Fatalf("%s: %v", command, err)
		}
		return resp, time.Since(start)
	}
	resp, took := run("echo kept > f")
	want := "the command ran but its workspace changes could not be saved: flush timed out after " + timeout.String()
	if !strings.Contains(resp.GetError(), want) || resp.GetOutcome().GetType() != executorv1.OutcomeType_OUTCOME_TYPE_ERROR {
		t.Fatalf("result = %v, want an error %q", resp, want)
	}
	if took > timeout+10*time.Second {
		t.Fatalf("the result took %s, with a flush timeout of %s", took, timeout)
	}
	resp, _ = run("cat f")
	if resp.GetError() != "" || resp.GetStdout() != "kept\n" {
		t.Fatalf("the next command = %v, want it to run and its flush to save f", resp)
	}
	if n := ws.flushes.Load(); n != 2 {
		t.Fatalf("%d flushes, want the hung one and the next", n)
	}
}
