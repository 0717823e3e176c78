package placement

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	"github.com/conch-sh/conch/services/internal/platform/discovery"
)

func TestDirectConnections(t *testing.T) {
	dialed := 0
	d := &direct{dial: func(addr string) (*grpc.ClientConn, error) {
		dialed++
		return grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}}
	a, err := d.conn("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := d.conn("127.0.0.1:1"); again != a || dialed != 1 {
		t.Fatalf("second conn to the same executor: %p, %d dials; want the first, 1 dial", again, dialed)
	}

	// A connection unused for directIdle is closed when another is asked for.
	d.conns["127.0.0.1:1"].used = time.Now().Add(-2 * directIdle)
	if _, err := d.conn("127.0.0.1:2"); err != nil {
		t.Fatal(err)
	}
	if _, kept := d.conns["127.0.0.1:1"]; kept || a.GetState() != connectivity.Shutdown {
		t.Fatalf("idle connection kept %v, state %v; want it closed", kept, a.GetState())
	}

	// Only an unsent pinned call falls back.
	pinned := discovery.Pin(context.Background(), "127.0.0.1:2")
	unsent := unreachableForTest(t)
	for _, tt := range []struct {
		name string
		ctx  context.Context
		err  error
		want bool
	}{
		{"unsent pinned call", pinned, unsent, true},
		{"not pinned", context.Background(), unsent, false},
		{"the executor's own error", pinned, status.Error(codes.Unavailable, "shutting down"), false},
		{"success", pinned, nil, false},
		{"not a status", pinned, errors.New("boom"), false},
	} {
		if got := d.fallback(tt.ctx, tt.err) != nil; got != tt.want {
			t.Errorf("%s: fallback %v, want %v", tt.name, got, tt.want)
		}
	}

	// Once the router stops, every connection is closed and none opened.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b := d.conns["127.0.0.1:2"].cc
	d.closeAll(ctx)
	if b.GetState() != connectivity.Shutdown || len(d.conns) != 0 {
		t.Fatalf("after closeAll: state %v, %d kept", b.GetState(), len(d.conns))
	}
	if _, err := d.conn("127.0.0.1:3"); !errors.Is(err, errNoDirect) {
		t.Fatalf("conn after closeAll: %v, want errNoDirect", err)
	}
	if d.fallback(pinned, unsent) != nil {
		t.Fatal("fallback after closeAll")
	}
}

// unreachableForTest is the error of a pinned call the balancer left
// unsent: one pinned to an instance the connection does not know.
func unreachableForTest(t *testing.T) error {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///127.0.0.1:1", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"`+discovery.Policy+`":{}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(discovery.Pin(context.Background(), "127.0.0.1:9"), 10*time.Second)
	defer cancel()
	err = cc.Invoke(ctx, executorv1.ExecutorService_GetSandbox_FullMethodName, &executorv1.GetSandboxRequest{}, &executorv1.GetSandboxResponse{})
	if !discovery.Unreachable(err) {
		t.Fatalf("pinned call to an unknown instance: %v", err)
	}
	return err
}
