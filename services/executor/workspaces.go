package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	workspacev1 "github.com/conch-sh/conch/gen/go/conch/workspace/v1"
	"github.com/conch-sh/conch/services/executor/wsync"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/internal/quota"
)

// Workspaces stores persistent workspaces: the workspace service.
type Workspaces interface {
	// Usage returns what the user's workspace stores: bytes and entries.
	Usage(ctx context.Context, account, user string) (bytes, files int64, err error)
	// Hydrate fills root with the user's workspace and returns its revision.
	Hydrate(ctx context.Context, account, user string, root *wsync.Root) (int64, error)
	// Flush sends the changes of root since the last sync and returns the
	// new revision, and the changed paths it could not send (a file
	// replaced or removed since the scan), which are not synced.
	Flush(ctx context.Context, account, user string, base int64, root *wsync.Root, scan map[string]wsync.Meta, c wsync.Changes) (rev int64, unsent []string, err error)
}

// workspaceClient is Workspaces over the workspace service's gRPC API.
type workspaceClient struct {
	c         workspacev1.WorkspaceServiceClient
	maxBytes  int64 // a flush never sends more, whatever sparse files claim
	chunkSize int
}

// NewWorkspaceClient returns Workspaces over c; a flush sends at most
// maxBytes of file content.
func NewWorkspaceClient(c workspacev1.WorkspaceServiceClient, maxBytes int64) Workspaces {
	return &workspaceClient{c: c, maxBytes: maxBytes, chunkSize: 256 << 10}
}

func scoped(ctx context.Context, account, user string) context.Context {
	return tenant.With(ctx, tenant.Scope{Account: account, User: user})
}

// Hydrate implements Workspaces.
func (w *workspaceClient) Hydrate(ctx context.Context, account, user string, root *wsync.Root) (int64, error) {
	stream, err := w.c.Hydrate(scoped(ctx, account, user), &workspacev1.HydrateRequest{User: user})
	if err != nil {
		return 0, fmt.Errorf("executor: hydrate %s: %w", user, errs.FromStatus(err))
	}
	var file *io.PipeWriter
	var fileDone chan error
	endFile := func() error {
		if file == nil {
			return nil
		}
		_ = file.Close()
		err := <-fileDone
		file = nil
		return err
	}
	defer func() {
		if file != nil {
			_ = file.CloseWithError(errors.New("hydrate aborted"))
			<-fileDone
		}
	}()
	for {
		m, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("stream ended without a revision")
			}
			return 0, fmt.Errorf("executor: hydrate %s: %w", user, errs.FromStatus(err))
		}
		switch msg := m.GetMessage().(type) {
		case *workspacev1.HydrateResponse_Entry:
			if err := endFile(); err != nil {
				return 0, err
			}
			e := msg.Entry
			switch e.GetType() {
			case workspacev1.FileType_FILE_TYPE_DIR:
				err = root.Mkdir(e.GetPath(), fs.FileMode(e.GetMode()))
			case workspacev1.FileType_FILE_TYPE_SYMLINK:
				err = root.Symlink(e.GetPath(), e.GetLinkTarget())
			case workspacev1.FileType_FILE_TYPE_FILE:
				r, wr := io.Pipe()
				file, fileDone = wr, make(chan error, 1)
				var mtime time.Time
				if e.GetModified() != nil {
					mtime = e.GetModified().AsTime()
				}
				go func(p string, mode fs.FileMode) { fileDone <- root.WriteFile(p, mode, mtime, r); _ = r.Close() }(e.GetPath(), fs.FileMode(e.GetMode()))
			}
			if err != nil {
				return 0, fmt.Errorf("executor: hydrate %s: %w", user, err)
			}
		case *workspacev1.HydrateResponse_Data:
			if file == nil {
				return 0, fmt.Errorf("executor: hydrate %s: data without a file entry", user)
			}
			if _, err := file.Write(msg.Data); err != nil {
				// The pipe only says it was closed; the writer says why
				// (e.g. the workspace's filesystem is full).
				_ = file.CloseWithError(err)
				if werr := <-fileDone; werr != nil {
					err = werr
				}
				file = nil
				return 0, fmt.Errorf("executor: hydrate %s: %w", user, err)
			}
		case *workspacev1.HydrateResponse_Removed:
			if err := endFile(); err != nil {
				return 0, err
			}
			if err := root.Remove(msg.Removed); err != nil {
				return 0, fmt.Errorf("executor: hydrate %s: %w", user, err)
			}
		case *workspacev1.HydrateResponse_Revision:
			if err := endFile(); err != nil {
				return 0, err
			}
			return msg.Revision, nil
		}
	}
}

// Usage implements Workspaces.
func (w *workspaceClient) Usage(ctx context.Context, account, user string) (bytes, files int64, err error) {
	u, err := w.c.GetUsage(scoped(ctx, account, user), &workspacev1.GetUsageRequest{User: user})
	if err != nil {
		return 0, 0, fmt.Errorf("executor: usage of %s: %w", user, errs.FromStatus(err))
	}
	return u.GetUsedBytes(), u.GetUsedFiles(), nil
}

// Flush implements Workspaces.
func (w *workspaceClient) Flush(ctx context.Context, account, user string, base int64, root *wsync.Root, scan map[string]wsync.Meta, c wsync.Changes) (int64, []string, error) {
	var total int64
	for _, p := range c.Changed {
		if m := scan[p]; m.Type == wsync.File {
			total += m.Size
		}
	}
	if total > w.maxBytes {
		// An early refusal of what the workspace service would refuse
		// anyway, before reading a byte: every file is sent whole, a
		// sparse one with all its holes.
		return 0, nil, quota.Exceeded("the changed files hold %d bytes (sparse files count their whole length), more than the quota of %d bytes; delete files to make room", total, w.maxBytes)
	}
	ctx, cancel := context.WithCancel(scoped(ctx, account, user))
	defer cancel()
	stream, err := w.c.Flush(ctx)
	if err != nil {
		return 0, nil, fmt.Errorf("executor: flush %s: %w", user, errs.FromStatus(err))
	}
	send := func(m *workspacev1.FlushRequest) error {
		if err := stream.Send(m); err != nil {
			_, rerr := stream.CloseAndRecv()
			return fmt.Errorf("executor: flush %s: %w", user, errs.FromStatus(errors.Join(err, rerr)))
		}
		return nil
	}
	if err := send(&workspacev1.FlushRequest{Message: &workspacev1.FlushRequest_Begin{Begin: &workspacev1.FlushBegin{User: user, BaseRevision: base, ExactRemovals: true}}}); err != nil {
		return 0, nil, err
	}
	// Every removed path is listed, children first: removals are exact, so
	// what was added since this sandbox's copy survives its deletes.
	for _, p := range c.Removed {
		if err := send(&workspacev1.FlushRequest{Message: &workspacev1.FlushRequest_Removed{Removed: p}}); err != nil {
			return 0, nil, err
		}
	}
	var unsent []string
	buf := make([]byte, w.chunkSize)
	for _, p := range c.Changed {
		m := scan[p]
		e := &workspacev1.Entry{Name: baseName(p), Path: p, Size: m.Size, Modified: timestamppb.New(m.ModTime), Mode: uint32(m.Mode), LinkTarget: m.Target}
		var f io.ReadCloser
		switch m.Type {
		case wsync.Dir:
			e.Type, e.Size = workspacev1.FileType_FILE_TYPE_DIR, 0
		case wsync.Symlink:
			e.Type = workspacev1.FileType_FILE_TYPE_SYMLINK
		case wsync.File:
			e.Type = workspacev1.FileType_FILE_TYPE_FILE
			if f, err = root.Open(p); err != nil {
				// Replaced or removed since the scan: not synced, so the
				// next flush looks at it again.
				unsent = append(unsent, p)
				continue
			}
		}
		if err := send(&workspacev1.FlushRequest{Message: &workspacev1.FlushRequest_Entry{Entry: e}}); err != nil {
			if f != nil {
				f.Close()
			}
			return 0, nil, err
		}
		if f != nil {
			// Never more than the scanned size: a file that grows is sent
			// again by the next flush.
			err := sendFile(io.LimitReader(f, m.Size), buf, func(b []byte) error {
				return send(&workspacev1.FlushRequest{Message: &workspacev1.FlushRequest_Data{Data: b}})
			})
			f.Close()
			if err != nil {
				return 0, nil, err
			}
		}
	}
	if err := send(&workspacev1.FlushRequest{Message: &workspacev1.FlushRequest_Commit{Commit: true}}); err != nil {
		return 0, nil, err
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return 0, nil, fmt.Errorf("executor: flush %s: %w", user, errs.FromStatus(err))
	}
	return resp.GetRevision(), unsent, nil
}

func sendFile(r io.Reader, buf []byte, send func([]byte) error) error {
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if serr := send(append([]byte(nil), buf[:n]...)); serr != nil {
				return serr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("executor: read workspace file: %w", err)
		}
	}
}

func baseName(p string) string {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			return p[i+1:]
		}
	}
	return p
}
