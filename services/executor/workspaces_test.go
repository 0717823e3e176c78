package executor

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"google.golang.org/grpc"

	workspacev1 "github.com/conch-sh/conch/gen/go/conch/workspace/v1"
	"github.com/conch-sh/conch/services/executor/wsync"
)

// flushRecorder is the client side of a Flush stream that keeps what it
// was sent.
type flushRecorder struct {
	grpc.ClientStream
	sent []*workspacev1.FlushRequest
}

func (f *flushRecorder) Send(m *workspacev1.FlushRequest) error {
	f.sent = append(f.sent, m)
	return nil
}

func (f *flushRecorder) CloseAndRecv() (*workspacev1.FlushResponse, error) {
	return &workspacev1.FlushResponse{Revision: 7}, nil
}

type flushOnly struct {
	workspacev1.WorkspaceServiceClient
	stream *flushRecorder
}

func (c flushOnly) Flush(context.Context, ...grpc.CallOption) (grpc.ClientStreamingClient[workspacev1.FlushRequest, workspacev1.FlushResponse], error) {
	return c.stream, nil
}

// A file that cannot be opened when the flush sends it is reported unsent,
// never dropped as if it had been saved.
func TestFlushReportsUnsentFiles(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"kept", "gone"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	root, err := wsync.OpenRoot(dir, os.Getuid())
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	scan, err := root.Scan(100)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "gone")); err != nil {
		t.Fatal(err)
	}
	rec := &flushRecorder{}
	w := NewWorkspaceClient(flushOnly{stream: rec}, 1<<20)
	rev, unsent, err := w.Flush(t.Context(), "acme", "u", 3, root, scan, wsync.Diff(nil, scan))
	if err != nil || rev != 7 {
		t.Fatalf("flush: %d %v", rev, err)
	}
	if !slices.Equal(unsent, []string{"/gone"}) {
		t.Errorf("unsent = %q, want [/gone]", unsent)
	}
	var entries []string
	for _, m := range rec.sent {
		if e := m.GetEntry(); e != nil {
			entries = append(entries, e.GetPath())
		}
	}
	if !slices.Equal(entries, []string{"/kept"}) {
		t.Errorf("entries sent = %q, want [/kept]", entries)
	}
}
