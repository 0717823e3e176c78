package wsclient

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc"

	workspacev1 "github.com/conch-sh/conch/gen/go/conch/workspace/v1"
	"github.com/conch-sh/conch/services/executor/wsync"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/quota"
)

// flushRecorder is the client side of a Flush stream that keeps what it
// was sent.
type flushRecorder struct {
	grpc.ClientStream
	sent      []*workspacev1.FlushRequest
	conflicts []*workspacev1.Conflict
}

func (f *flushRecorder) Send(m *workspacev1.FlushRequest) error {
	f.sent = append(f.sent, m)
	return nil
}

func (f *flushRecorder) CloseAndRecv() (*workspacev1.FlushResponse, error) {
	return &workspacev1.FlushResponse{Revision: 7, Conflicts: f.conflicts}, nil
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
	w := NewWorkspaces(flushOnly{stream: rec}, 1<<20)
	res, err := w.Flush(t.Context(), "acme", "u", FlushInput{Base: 3, Root: root, Scan: scan, Changes: wsync.Diff(nil, scan)})
	if err != nil || res.Revision != 7 {
		t.Fatalf("flush: %+v %v", res, err)
	}
	if !slices.Equal(res.Unsent, []string{"/gone"}) {
		t.Errorf("unsent = %q, want [/gone]", res.Unsent)
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

// A flush asks the service for the sandbox's quota (never more than the
// client's own), refuses early what cannot fit it, names with each
// removal the kind and etag last synced, returns the etags of what it
// sent and the conflicts the service reports.
func TestFlushQuotaETagsConflicts(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "new"), []byte("new content"), 0o644); err != nil {
		t.Fatal(err)
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
	before := map[string]wsync.Meta{"/old": {Type: wsync.File, Size: 3}, "/plain": {Type: wsync.File, Size: 1}, "/dir": {Type: wsync.Dir}, "/link": {Type: wsync.Symlink, Target: "old"}}
	changes := wsync.Diff(before, scan)

	rec := &flushRecorder{conflicts: []*workspacev1.Conflict{{Path: "/old", Reason: "changed"}}}
	w := NewWorkspaces(flushOnly{stream: rec}, 1<<20)
	if _, err := w.Flush(t.Context(), "acme", "u", FlushInput{Quota: quota.Limits{Bytes: 5, Files: 10}, Root: root, Scan: scan, Changes: changes}); err == nil || errs.KindOf(err) != errs.ResourceExhausted || !strings.Contains(err.Error(), "workspace quota exceeded") {
		t.Fatalf("flush of 11 bytes under a quota of 5: %v, want a quota refusal", err)
	}
	res, err := w.Flush(t.Context(), "acme", "u", FlushInput{Quota: quota.Limits{Bytes: 1 << 30, Files: 10}, Root: root, Scan: scan, Synced: before, Changes: changes, ETags: map[string]string{"/old": "abc"}})
	if err != nil {
		t.Fatal(err)
	}
	begin := rec.sent[0].GetBegin()
	if begin.GetQuotaBytes() != 1<<20 || begin.GetQuotaFiles() != 10 {
		t.Errorf("begin asks for %d bytes, %d files; want the smaller 1 MiB and 10", begin.GetQuotaBytes(), begin.GetQuotaFiles())
	}
	removals := map[string]string{}
	for _, m := range rec.sent {
		if r := m.GetRemoval(); r != nil {
			removals[r.GetPath()] = r.GetType().String() + " " + r.GetEtag()
		}
	}
	if want := map[string]string{"/old": "FILE_TYPE_FILE abc", "/plain": "FILE_TYPE_FILE ", "/dir": "FILE_TYPE_DIR ", "/link": "FILE_TYPE_SYMLINK "}; !maps.Equal(removals, want) {
		t.Errorf("removals = %v, want %v", removals, want)
	}
	sum := sha256.Sum256([]byte("new content"))
	if got := res.ETags["/new"]; got != hex.EncodeToString(sum[:]) {
		t.Errorf("etag of the sent file = %q", got)
	}
	if want := []Conflict{{Path: "/old", Reason: "changed"}}; !slices.Equal(res.Conflicts, want) {
		t.Errorf("conflicts = %v, want %v", res.Conflicts, want)
	}
}
