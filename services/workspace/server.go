// Package workspace is the workspace service: persistent workspaces, one per
// (account, user), in object storage; the Shell file API; signed public
// URLs; and the sync API the executor hydrates and flushes sandboxes with.
//
// The handlers here are thin: they check the call's scope, convert
// messages, call the files domain and return its errors, which the shared
// interceptors map to gRPC codes.
package workspace

import (
	"context"
	"errors"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	workspacev1 "github.com/conch-sh/conch/gen/go/conch/workspace/v1"
	"github.com/conch-sh/conch/services/internal/platform/chunks"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/internal/signing"
	"github.com/conch-sh/conch/services/workspace/files"
	"github.com/conch-sh/conch/services/workspace/snapshots"
)

// Server serves WorkspaceService.
type Server struct {
	workspacev1.UnsafeWorkspaceServiceServer
	files  *files.Service
	snaps  *snapshots.Store
	signer *signing.Signer
}

var _ workspacev1.WorkspaceServiceServer = (*Server)(nil)

// New returns the workspace service over the files domain and the
// sandboxes' snapshots, signing public URLs with signer.
func New(fs *files.Service, snaps *snapshots.Store, signer *signing.Signer) (*Server, error) {
	if fs == nil || snaps == nil || signer == nil {
		return nil, errors.New("workspace: files service, snapshots and signer are required")
	}
	return &Server{files: fs, snaps: snaps, signer: signer}, nil
}

// Register registers the service's gRPC handlers on g.
func (s *Server) Register(g *grpc.Server) {
	workspacev1.RegisterWorkspaceServiceServer(g, s)
}

// fileScope returns the workspace of a file API call: the account the
// router authenticated and the X-Shell-User-Id it passed on.
func fileScope(ctx context.Context) (files.Workspace, tenant.Scope, error) {
	sc, ok := tenant.From(ctx)
	if !ok {
		return files.Workspace{}, sc, errs.New(errs.Unauthenticated, "no account: the call did not come through the router")
	}
	if sc.User == "" {
		return files.Workspace{}, sc, errs.New(errs.InvalidArgument, "X-Shell-User-Id header is required: it names the user whose workspace to use")
	}
	ws, err := files.NewWorkspace(sc.Account, sc.User)
	return ws, sc, err
}

// syncScope returns the workspace of a sync call: the scope's account and
// the request's user.
func syncScope(ctx context.Context, user string) (files.Workspace, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return files.Workspace{}, err
	}
	return files.NewWorkspace(account, user)
}

func toProto(e files.Entry) *workspacev1.Entry {
	out := &workspacev1.Entry{
		Name: e.Name, Path: e.Path, Size: e.Size, Mode: e.Mode, LinkTarget: e.LinkTarget, Etag: e.ETag,
	}
	if !e.ModTime.IsZero() {
		out.Modified = timestamppb.New(e.ModTime)
	}
	switch e.Type {
	case files.File:
		out.Type = workspacev1.FileType_FILE_TYPE_FILE
	case files.Dir:
		out.Type = workspacev1.FileType_FILE_TYPE_DIR
	case files.Symlink:
		out.Type = workspacev1.FileType_FILE_TYPE_SYMLINK
	}
	return out
}

func fromProto(e *workspacev1.Entry) files.Entry {
	out := files.Entry{Path: e.GetPath(), Size: e.GetSize(), Mode: e.GetMode(), LinkTarget: e.GetLinkTarget(), ETag: e.GetEtag()}
	if e.GetModified() != nil {
		out.ModTime = e.GetModified().AsTime()
	}
	if t := typeFromProto(e.GetType()); t > 0 {
		out.Type = t
	}
	return out
}

// typeFromProto is the files.Type of t: 0 when unspecified, -1 for a
// value this service does not know, which the files package refuses.
func typeFromProto(t workspacev1.FileType) files.Type {
	switch t {
	case workspacev1.FileType_FILE_TYPE_UNSPECIFIED:
		return 0
	case workspacev1.FileType_FILE_TYPE_FILE:
		return files.File
	case workspacev1.FileType_FILE_TYPE_DIR:
		return files.Dir
	case workspacev1.FileType_FILE_TYPE_SYMLINK:
		return files.Symlink
	}
	return -1
}

// sendContent streams r in chunks, the first message carrying the entry.
func sendContent(r io.Reader, e files.Entry, send func(entry *workspacev1.Entry, data []byte) error) error {
	if err := send(toProto(e), nil); err != nil {
		return err
	}
	buf := make([]byte, chunks.Size)
	for {
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			if err := send(nil, buf[:n]); err != nil {
				return err
			}
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return nil
		}
		if err != nil {
			return errs.Wrap(errs.Unavailable, err, "read %s from storage", e.Path)
		}
	}
}
