// Package workspacetest serves a real workspace service for tests: on
// loopback, over a directory store and a test etcd, behind the cluster's
// signed-scope and error interceptors, as the executor and the router
// reach it.
package workspacetest

import (
	"cmp"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	workspacev1 "github.com/conch-sh/conch/gen/go/conch/workspace/v1"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/internal/signing"
	"github.com/conch-sh/conch/services/internal/store/fsstore"
	"github.com/conch-sh/conch/services/workspace"
	"github.com/conch-sh/conch/services/workspace/files"
	"github.com/conch-sh/conch/services/workspace/snapshots"
	"github.com/conch-sh/conch/services/workspace/templates"
)

// Start serves the workspace service until the test ends and returns a
// client that signs scopes like the router.
func Start(t testing.TB) workspacev1.WorkspaceServiceClient {
	t.Helper()
	return workspacev1.NewWorkspaceServiceClient(serve(t, templates.Config{}))
}

// StartTemplates serves the workspace service with its templates, bounded
// by cfg (its zero fields take small test defaults), and returns clients
// of both.
func StartTemplates(t testing.TB, cfg templates.Config) (workspacev1.WorkspaceServiceClient, workspacev1.TemplateServiceClient) {
	t.Helper()
	conn := serve(t, cfg)
	return workspacev1.NewWorkspaceServiceClient(conn), workspacev1.NewTemplateServiceClient(conn)
}

func serve(t testing.TB, tc templates.Config) *grpc.ClientConn {
	t.Helper()
	st, err := fsstore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	fsvc, err := files.New(st, etcdxtest.StartForTest(t), files.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fsvc.Close)
	keys, _ := signing.ParseKeys("k1:" + strings.Repeat("s", 32))
	sg, _ := signing.New(keys)
	srv, err := workspace.New(fsvc, snapshots.New(st), sg)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := tenant.NewSigner("test-internal-secret-0123456789")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(
		grpc.ChainUnaryInterceptor(signer.UnaryServerInterceptor(), errs.UnaryServerInterceptor(nil)),
		grpc.ChainStreamInterceptor(signer.StreamServerInterceptor(), errs.StreamServerInterceptor(nil)),
	)
	srv.Register(g)
	tc.MaxTemplates = cmp.Or(tc.MaxTemplates, 5)
	tc.MaxBytes = cmp.Or(tc.MaxBytes, 256<<20)
	tc.MaxFiles = cmp.Or(tc.MaxFiles, 100000)
	tc.BuildDir = cmp.Or(tc.BuildDir, t.TempDir())
	tpl := templates.New(st, tc)
	t.Cleanup(tpl.Close)
	tsrv, err := workspace.NewTemplates(tpl)
	if err != nil {
		t.Fatal(err)
	}
	tsrv.Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(signer.UnaryClientInterceptor()), grpc.WithChainStreamInterceptor(signer.StreamClientInterceptor()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
