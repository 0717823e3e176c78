package workspace_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	workspacev1 "github.com/conch-sh/conch/gen/go/conch/workspace/v1"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/internal/quota"
	"github.com/conch-sh/conch/services/workspace"
	"github.com/conch-sh/conch/services/workspace/workspacetest"
)

// start serves the workspace service on loopback with the cluster's
// interceptors and returns a client that signs scopes like the router.
func start(t *testing.T) workspacev1.WorkspaceServiceClient {
	return workspacetest.Start(t)
}

func scoped(t *testing.T, user string) context.Context {
	return tenant.With(t.Context(), tenant.Scope{Account: "acme", User: user, PublicURL: "http://conch.example"})
}

func entry(p string, typ workspacev1.FileType) *workspacev1.FlushRequest {
	return &workspacev1.FlushRequest{Message: &workspacev1.FlushRequest_Entry{Entry: &workspacev1.Entry{Path: p, Type: typ}}}
}

func data(s string) *workspacev1.FlushRequest {
	return &workspacev1.FlushRequest{Message: &workspacev1.FlushRequest_Data{Data: []byte(s)}}
}

var (
	begin  = &workspacev1.FlushRequest{Message: &workspacev1.FlushRequest_Begin{Begin: &workspacev1.FlushBegin{User: "sbx"}}}
	commit = &workspacev1.FlushRequest{Message: &workspacev1.FlushRequest_Commit{Commit: true}}
)

func flush(ctx context.Context, c workspacev1.WorkspaceServiceClient, msgs ...*workspacev1.FlushRequest) (*workspacev1.FlushResponse, error) {
	stream, err := c.Flush(ctx)
	if err != nil {
		return nil, err
	}
	for _, m := range msgs {
		if err := stream.Send(m); err != nil {
			break
		}
	}
	return stream.CloseAndRecv()
}

func hydrate(t *testing.T, c workspacev1.WorkspaceServiceClient, have map[string]string) (map[string]string, int64) {
	t.Helper()
	stream, err := c.Hydrate(scoped(t, ""), &workspacev1.HydrateRequest{User: "sbx", Have: have})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	var cur string
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			t.Fatal("hydrate ended without a revision")
		}
		if err != nil {
			t.Fatal(err)
		}
		switch x := m.GetMessage().(type) {
		case *workspacev1.HydrateResponse_Entry:
			cur = x.Entry.GetPath()
			got[cur] = x.Entry.GetType().String() + ":" + x.Entry.GetLinkTarget()
		case *workspacev1.HydrateResponse_Data:
			got[cur] += string(x.Data)
		case *workspacev1.HydrateResponse_Removed:
			got[x.Removed] = "removed"
		case *workspacev1.HydrateResponse_Revision:
			return got, x.Revision
		}
	}
}

func TestSyncOverGRPC(t *testing.T) {
	c := start(t)
	ctx := scoped(t, "")
	res, err := flush(ctx, c, begin,
		entry("/dir", workspacev1.FileType_FILE_TYPE_DIR),
		entry("/dir/a.txt", workspacev1.FileType_FILE_TYPE_FILE), data("hel"), data(""), data("lo"),
		entry("/empty", workspacev1.FileType_FILE_TYPE_FILE),
		&workspacev1.FlushRequest{Message: &workspacev1.FlushRequest_Entry{Entry: &workspacev1.Entry{Path: "/dir/up", Type: workspacev1.FileType_FILE_TYPE_SYMLINK, LinkTarget: "../.."}}},
		entry("/gone", workspacev1.FileType_FILE_TYPE_FILE), data("x"),
		&workspacev1.FlushRequest{Message: &workspacev1.FlushRequest_Removed{Removed: "/gone"}},
		commit)
	if err != nil {
		t.Fatal(err)
	}
	if res.GetRevision() != 1 || res.GetUsedFiles() != 4 || res.GetUsedBytes() != 5 {
		t.Fatalf("flush = %v", res)
	}
	got, rev := hydrate(t, c, map[string]string{"/stale": "x"})
	want := map[string]string{
		"/dir": "FILE_TYPE_DIR:", "/dir/a.txt": "FILE_TYPE_FILE:hello", "/empty": "FILE_TYPE_FILE:",
		"/dir/up": "FILE_TYPE_SYMLINK:../..", "/stale": "removed",
	}
	if rev != 1 || len(got) != len(want) {
		t.Fatalf("hydrate = %v (revision %d)", got, rev)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("hydrate %s = %q, want %q", k, got[k], v)
		}
	}
	u, err := c.GetUsage(ctx, &workspacev1.GetUsageRequest{User: "sbx"})
	if err != nil || u.GetUsedFiles() != 4 || u.GetQuotaBytes() != quota.DefaultBytes {
		t.Fatalf("usage = %v, %v", u, err)
	}

	// Broken or interrupted flushes apply nothing.
	bad := []struct {
		name string
		msgs []*workspacev1.FlushRequest
		code codes.Code
	}{
		{"no begin", []*workspacev1.FlushRequest{entry("/x", workspacev1.FileType_FILE_TYPE_FILE), commit}, codes.InvalidArgument},
		{"no commit", []*workspacev1.FlushRequest{begin, entry("/x", workspacev1.FileType_FILE_TYPE_FILE), data("x")}, codes.InvalidArgument},
		{"data first", []*workspacev1.FlushRequest{begin, data("x"), commit}, codes.InvalidArgument},
		{"second begin", []*workspacev1.FlushRequest{begin, begin, commit}, codes.InvalidArgument},
		{"bad user", []*workspacev1.FlushRequest{{Message: &workspacev1.FlushRequest_Begin{Begin: &workspacev1.FlushBegin{User: "../sbx"}}}, commit}, codes.InvalidArgument},
		{"traversal", []*workspacev1.FlushRequest{begin, entry("/../x", workspacev1.FileType_FILE_TYPE_FILE), commit}, codes.InvalidArgument},
		{"unknown type", []*workspacev1.FlushRequest{begin, entry("/fifo", workspacev1.FileType_FILE_TYPE_UNSPECIFIED), commit}, codes.InvalidArgument},
	}
	for _, tt := range bad {
		if _, err := flush(ctx, c, tt.msgs...); status.Code(err) != tt.code {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.code)
		}
	}
	// A sender that goes away mid-file.
	cctx, cancel := context.WithCancel(ctx)
	stream, err := c.Flush(cctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = stream.Send(begin)
	_ = stream.Send(entry("/half", workspacev1.FileType_FILE_TYPE_FILE))
	_ = stream.Send(data(strings.Repeat("h", 1<<20)))
	cancel()
	_, _ = stream.CloseAndRecv()
	if got, rev := hydrate(t, c, nil); rev != 1 || len(got) != 4 {
		t.Fatalf("after refused flushes: %v (revision %d)", got, rev)
	}
}

func TestScopeIsRequired(t *testing.T) {
	c := start(t)
	// No signed scope at all, and forged unsigned or badly signed metadata.
	forged := []context.Context{
		t.Context(),
		metadata.AppendToOutgoingContext(t.Context(), "conch-account", "acme", "x-shell-user-id", "alice"),
	}
	for i, ctx := range forged {
		if _, err := c.List(ctx, &workspacev1.ListRequest{Path: "/"}); status.Code(err) != codes.Unauthenticated {
			t.Errorf("case %d: list = %v, want Unauthenticated", i, err)
		}
		if _, err := c.GetUsage(ctx, &workspacev1.GetUsageRequest{User: "alice"}); status.Code(err) != codes.Unauthenticated {
			t.Errorf("case %d: usage = %v, want Unauthenticated", i, err)
		}
	}
	if _, err := c.List(scoped(t, ""), &workspacev1.ListRequest{Path: "/"}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "X-Shell-User-Id") {
		t.Errorf("list without a user = %v", err)
	}
	// A public URL names its file without any scope.
	w, err := c.WriteFile(scoped(t, "alice"))
	if err != nil {
		t.Fatal(err)
	}
	_ = w.Send(&workspacev1.WriteFileRequest{Message: &workspacev1.WriteFileRequest_Header{Header: &workspacev1.WriteFileHeader{Path: "/pub"}}})
	_ = w.Send(&workspacev1.WriteFileRequest{Message: &workspacev1.WriteFileRequest_Data{Data: []byte("public")}})
	if _, err := w.CloseAndRecv(); err != nil {
		t.Fatal(err)
	}
	pu, err := c.CreatePublicURL(scoped(t, "alice"), &workspacev1.CreatePublicURLRequest{Path: "/pub"})
	if err != nil || !strings.HasPrefix(pu.GetUrl(), "http://conch.example"+workspace.PublicPath) {
		t.Fatalf("public url = %v, %v", pu, err)
	}
	rs, err := c.ReadPublicFile(t.Context(), &workspacev1.ReadPublicFileRequest{Token: strings.TrimPrefix(pu.GetUrl(), "http://conch.example"+workspace.PublicPath)})
	if err != nil {
		t.Fatal(err)
	}
	var content string
	for {
		m, err := rs.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		content += string(m.GetData())
	}
	if content != "public" {
		t.Fatalf("public content = %q", content)
	}
}
