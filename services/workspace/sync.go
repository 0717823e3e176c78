package workspace

import (
	"context"
	"errors"
	"io"

	workspacev1 "github.com/conch-sh/conch/gen/go/conch/workspace/v1"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/workspace/files"
)

// Hydrate streams a workspace into a sandbox, sending only what changed
// since the caller's copy. Every entry of the workspace is sent, sorted by
// key (a directory before its content; create parents that have no entry
// of their own); a file whose etag equals have[path] is
// sent without data and the caller keeps its copy (applying mode and time),
// any other file entry is followed by all of its data messages (none for an
// empty file). Then come the paths of have that no longer exist, then the
// revision. Symlinks arrive as entries with link_target and must be created
// as links, never followed.
func (s *Server) Hydrate(req *workspacev1.HydrateRequest, stream workspacev1.WorkspaceService_HydrateServer) error {
	ctx := stream.Context()
	ws, err := syncScope(ctx, req.GetUser())
	if err != nil {
		return err
	}
	return s.files.Hydrate(ctx, ws, req.GetHave(), func(m files.HydrateMsg) error {
		out := &workspacev1.HydrateResponse{}
		switch {
		case m.Entry != nil:
			out.Message = &workspacev1.HydrateResponse_Entry{Entry: toProto(*m.Entry)}
		case m.Data != nil:
			out.Message = &workspacev1.HydrateResponse_Data{Data: m.Data}
		case m.Removed != "":
			out.Message = &workspacev1.HydrateResponse_Removed{Removed: m.Removed}
		default:
			out.Message = &workspacev1.HydrateResponse_Revision{Revision: m.Revision}
		}
		return stream.Send(out)
	})
}

// Flush applies a sandbox's changes under the workspace's lock: begin, then
// entries (a file entry's content follows in data messages; its size, when
// not 0, and its etag, when set, must match) and removals, applied in the
// order sent, then commit. Nothing is visible before the commit; a stream
// that ends another way applies nothing; a quota overrun refuses the whole
// flush. The quota is the service's, or the smaller one begin asks for. An
// entry of another kind in the way of the caller's (a file where it writes
// a directory or below it, a directory where it writes a file) is moved
// aside to <name>.conflict-<time>; a removal naming the file (or kind) the
// caller last synced keeps what was written there since. The response
// lists both as conflicts.
func (s *Server) Flush(stream workspacev1.WorkspaceService_FlushServer) error {
	ctx := stream.Context()
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	begin := first.GetBegin()
	if begin == nil {
		return errs.New(errs.InvalidArgument, "the first message of Flush must be begin")
	}
	ws, err := syncScope(ctx, begin.GetUser())
	if err != nil {
		return err
	}
	f := s.files.BeginFlush(ws)
	if begin.GetExactRemovals() {
		f.ExactRemovals()
	}
	if begin.GetQuotaBytes() < 0 || begin.GetQuotaFiles() < 0 {
		return errs.New(errs.InvalidArgument, "begin.quota_bytes, begin.quota_files: must not be negative")
	}
	f.Narrow(begin.GetQuotaBytes(), begin.GetQuotaFiles())
	// Anything but a commit (an error, a dropped stream) discards what was
	// staged; nothing becomes visible.
	defer f.Abort(context.WithoutCancel(ctx))
	next := &peekStream{recv: stream.Recv}
	for {
		m, err := next.Recv()
		if errors.Is(err, io.EOF) {
			return errs.New(errs.InvalidArgument, "flush ended without commit; nothing was applied")
		}
		if err != nil {
			return err
		}
		switch msg := m.GetMessage().(type) {
		case *workspacev1.FlushRequest_Entry:
			e := fromProto(msg.Entry)
			var r io.Reader = eofReader{}
			if e.Type == files.File {
				r = &dataReader{recv: next.data}
			}
			if err := f.Put(ctx, e, r); err != nil {
				return err
			}
		case *workspacev1.FlushRequest_Removed:
			if err := f.Remove(msg.Removed); err != nil {
				return err
			}
		case *workspacev1.FlushRequest_Removal:
			if err := f.RemoveSynced(msg.Removal.GetPath(), typeFromProto(msg.Removal.GetType()), msg.Removal.GetEtag()); err != nil {
				return err
			}
		case *workspacev1.FlushRequest_Commit:
			if !msg.Commit {
				return errs.New(errs.InvalidArgument, "commit must be true")
			}
			res, err := f.Commit(ctx)
			if err != nil {
				return err
			}
			out := &workspacev1.FlushResponse{Revision: res.Revision, UsedBytes: res.Bytes, UsedFiles: res.Files}
			for _, c := range res.Conflicts {
				out.Conflicts = append(out.Conflicts, &workspacev1.Conflict{Path: c.Path, Reason: c.Reason})
			}
			return stream.SendAndClose(out)
		case *workspacev1.FlushRequest_Data:
			return errs.New(errs.InvalidArgument, "data must follow a file entry")
		default:
			return errs.New(errs.InvalidArgument, "begin may only be the first message")
		}
	}
}

// GetUsage returns a workspace's usage and quota.
func (s *Server) GetUsage(ctx context.Context, req *workspacev1.GetUsageRequest) (*workspacev1.GetUsageResponse, error) {
	ws, err := syncScope(ctx, req.GetUser())
	if err != nil {
		return nil, err
	}
	u, err := s.files.Usage(ctx, ws)
	if err != nil {
		return nil, err
	}
	return &workspacev1.GetUsageResponse{UsedBytes: u.Bytes, UsedFiles: u.Files, QuotaBytes: u.QuotaBytes, QuotaFiles: u.QuotaFiles}, nil
}

// peekStream lets a file's data be read up to the next non-data message,
// which is kept for the main loop.
type peekStream struct {
	recv    func() (*workspacev1.FlushRequest, error)
	pending *workspacev1.FlushRequest
}

func (p *peekStream) Recv() (*workspacev1.FlushRequest, error) {
	if m := p.pending; m != nil {
		p.pending = nil
		return m, nil
	}
	return p.recv()
}

// data returns the next data message's bytes, or io.EOF at the next other
// message.
func (p *peekStream) data() ([]byte, error) {
	m, err := p.Recv()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, io.ErrUnexpectedEOF
		}
		return nil, err
	}
	if d, ok := m.GetMessage().(*workspacev1.FlushRequest_Data); ok {
		return d.Data, nil
	}
	p.pending = m
	return nil, io.EOF
}

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }
