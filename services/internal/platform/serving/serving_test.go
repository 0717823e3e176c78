package serving

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
	"github.com/conch-sh/conch/services/internal/platform/discovery"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
)

// scopeEcho answers CreateAccount with the verified scope of the call, so the
// test can see what the server trusted.
type scopeEcho struct {
	routerv1.UnimplementedAccountServiceServer
}

func (scopeEcho) CreateAccount(ctx context.Context, _ *routerv1.CreateAccountRequest) (*routerv1.CreateAccountResponse, error) {
	s, ok := tenant.From(ctx)
	if !ok {
		return nil, errs.New(errs.Unauthenticated, "no scope")
	}
	return &routerv1.CreateAccountResponse{Account: &routerv1.Account{Id: s.Account, Name: s.User}}, nil
}

func TestRun(t *testing.T) {
	t.Parallel()
	cli := etcdxtest.StartForTest(t)
	signer, err := tenant.NewSigner("0123456789abcdef-test")
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{
			Name: "router", Listener: lis, Etcd: cli, Signer: signer,
			Register: func(g *grpc.Server) { routerv1.RegisterAccountServiceServer(g, scopeEcho{}) },
		})
	}()

	conn, err := discovery.Dial(t.Context(), cli, "router",
		grpc.WithChainUnaryInterceptor(signer.UnaryClientInterceptor()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	waitFor(t, func() error { return discovery.CheckReady(t.Context(), conn, "router") })

	// The signed scope reaches the handler; unsigned metadata is ignored.
	client := routerv1.NewAccountServiceClient(conn)
	scoped := tenant.With(t.Context(), tenant.Scope{Account: "acme", User: "alice"})
	resp, err := client.CreateAccount(scoped, &routerv1.CreateAccountRequest{})
	if err != nil || resp.GetAccount().GetId() != "acme" || resp.GetAccount().GetName() != "alice" {
		t.Fatalf("scoped call = %v, %v", resp, err)
	}
	smuggled := metadata.AppendToOutgoingContext(t.Context(), "conch-account", "acme")
	if _, err := client.CreateAccount(smuggled, &routerv1.CreateAccountRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("unsigned call = %v, want Unauthenticated", err)
	}

	// Cancelling leaves discovery and stops the server.
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	eps, err := discovery.Endpoints(t.Context(), cli, "router")
	if err != nil || len(eps) != 0 {
		t.Fatalf("endpoints after stop = %v, %v", eps, err)
	}
}

func TestRunRefusesWildcardAdvertiseAddress(t *testing.T) {
	t.Parallel()
	cli := etcdxtest.StartForTest(t)
	signer, err := tenant.NewSigner("0123456789abcdef-test")
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	err = Run(t.Context(), Options{Name: "executor", Listener: lis, Etcd: cli, Signer: signer, Register: func(*grpc.Server) {}})
	if err == nil {
		t.Fatal("want an error for a wildcard address")
	}
}

func waitFor(t *testing.T, f func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
