package executor

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	"github.com/conch-sh/conch/services/executor/sandbox"
	"github.com/conch-sh/conch/services/executor/sandbox/agent"
	"github.com/conch-sh/conch/services/executor/sandbox/seccomp"
	"github.com/conch-sh/conch/services/executor/sandbox/wire"
	"github.com/conch-sh/conch/services/executor/toolshim"
	"github.com/conch-sh/conch/services/internal/platform/discovery"
	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
	"github.com/conch-sh/conch/services/internal/platform/grpcserver"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
)

// TestMain lets the test binary serve as the sandbox agent, and as the
// tool commands of a sandbox, as the conch binary does.
func TestMain(m *testing.M) {
	if name, ok := toolshim.Command(os.Args[0], wire.ToolsDir); ok {
		os.Exit(toolshim.Run(wire.ToolsDir, name, os.Args[1:], os.Stdout, os.Stderr))
	}
	if served, err := agent.Serve(os.Args[1:]); served {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	for _, r := range runtimes {
		r.Close()
	}
	os.Exit(code)
}

var (
	rtMu     sync.Mutex
	runtimes []*sandbox.Runtime
)

// newRuntime returns a sandbox runtime with its own state dir and cgroup.
func newRuntime(t testing.TB) *sandbox.Runtime { return newRuntimeOn(t, "") }

// newRuntimeOn is newRuntime with its sandboxes' writable state in
// storage ("": tmpfs).
func newRuntimeOn(t testing.TB, storage string) *sandbox.Runtime {
	t.Helper()
	dir, err := os.MkdirTemp("", "conch-executor-test-")
	if err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(dir, 0o711)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	prog, err := seccomp.Program()
	if err != nil {
		t.Fatal(err)
	}
	r, err := sandbox.NewRuntime(sandbox.Config{Seccomp: prog, StateDir: filepath.Join(dir, "state"), Storage: storage, CgroupParent: "conch-test/" + filepath.Base(dir)})
	if err != nil {
		t.Fatal(err)
	}
	if storage != "" {
		// Before its storage goes, which the caller's cleanup removes.
		t.Cleanup(r.Close)
		return r
	}
	rtMu.Lock()
	runtimes = append(runtimes, r)
	rtMu.Unlock()
	return r
}

// testExecutor is an executor served over real gRPC with signed scopes.
type testExecutor struct {
	svc    *Service
	client executorv1.ExecutorServiceClient
}

func startExecutor(t testing.TB, opts ...Option) *testExecutor {
	t.Helper()
	return startExecutorOn(t, newRuntime(t), opts...)
}

// startExecutorOn is startExecutor on the runtime rt.
func startExecutorOn(t testing.TB, rt Runtime, opts ...Option) *testExecutor {
	t.Helper()
	cli := etcdxtest.StartForTest(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	svc := startServiceOn(t, rt, lis.Addr().String(), cli, opts...)
	signer, err := tenant.NewSigner("test-secret-0123456789")
	if err != nil {
		t.Fatal(err)
	}
	// The server and connection of a deployed executor and its router,
	// less discovery.
	g := grpcserver.New(grpcserver.Options{
		Name:               "executor",
		UnaryInterceptors:  []grpc.UnaryServerInterceptor{signer.UnaryServerInterceptor()},
		StreamInterceptors: []grpc.StreamServerInterceptor{signer.StreamServerInterceptor()},
	})
	NewServer(svc).Register(g.GRPC())
	go func() { _ = g.Serve(lis) }()
	conn, err := discovery.DialAddr(lis.Addr().String(),
		grpc.WithChainUnaryInterceptor(signer.UnaryClientInterceptor()),
		grpc.WithChainStreamInterceptor(signer.StreamClientInterceptor()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20), grpc.MaxCallSendMsgSize(16<<20)))
	if err != nil {
		t.Fatal(err)
	}
	// Runs before startService's cleanup, which ends the service.
	t.Cleanup(func() {
		_ = conn.Close()
		g.GRPC().Stop()
	})
	return &testExecutor{svc: svc, client: executorv1.NewExecutorServiceClient(conn)}
}

// startService runs a Service advertised at addr, with real sandboxes and
// etcd cli, until the test ends.
func startService(t testing.TB, addr string, cli *clientv3.Client, opts ...Option) *Service {
	t.Helper()
	return startServiceOn(t, newRuntime(t), addr, cli, opts...)
}

func startServiceOn(t testing.TB, rt Runtime, addr string, cli *clientv3.Client, opts ...Option) *Service {
	t.Helper()
	svc, err := NewService(t.Context(), "test-executor", addr, rt, cli, nil, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = svc.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return svc
}

// as returns a context calling as account.
func as(t testing.TB, account string) context.Context {
	return tenant.With(t.Context(), tenant.Scope{Account: account})
}
