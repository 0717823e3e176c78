// Package wsclient is the executor's side of the workspace service: the
// persistent workspaces it hydrates and flushes, and the stores of
// snapshots and templates, each call scoped to the account (and user) it
// is for. Executors never reach the object store themselves.
package wsclient

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	workspacev1 "github.com/conch-sh/conch/gen/go/conch/workspace/v1"
	"github.com/conch-sh/conch/services/executor/wsync"
	"github.com/conch-sh/conch/services/internal/platform/chunks"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/internal/quota"
)

// FlushInput is what one flush sends.
type FlushInput struct {
	// Base is the revision last hydrated or flushed.
	Base int64
	// Quota is the sandbox's: the workspace service holds the flush to it
	// where it is smaller than its own.
	Quota quota.Limits
	Root  *wsync.Root
	Scan  map[string]wsync.Meta
	// Synced is the scan last synced: a removal names the kind of entry
	// it removes, so an entry of another kind written since is kept.
	Synced map[string]wsync.Meta
	// Changes are the paths that differ from what was last synced.
	Changes wsync.Changes
	// ETags are the etags of the files as last synced, path → etag: a
	// removal names it, so a file replaced since is kept, not deleted.
	ETags map[string]string
}

// FlushResult is the outcome of a flush.
type FlushResult struct {
	Revision int64
	// Unsent are the changed paths it could not send (a file replaced or
	// removed since the scan), which are not synced.
	Unsent []string
	// ETags are the etags of the files sent, path → etag.
	ETags map[string]string
	// Conflicts are what the workspace service kept against this
	// sandbox's changes: removals of what changed since its copy, and
	// entries of another kind moved aside for its own.
	Conflicts []Conflict
}

// Conflict is what the workspace service kept at a path, and why.
type Conflict struct {
	Path, Reason string
}

// Workspaces is the persistent workspaces over the workspace service's
// gRPC API.
type Workspaces struct {
	c        workspacev1.WorkspaceServiceClient
	maxBytes int64 // a flush never sends more, whatever sparse files claim
}

// NewWorkspaces returns the workspaces over c; a flush sends at most
// maxBytes of file content, or its sandbox's smaller quota.
func NewWorkspaces(c workspacev1.WorkspaceServiceClient, maxBytes int64) *Workspaces {
	return &Workspaces{c: c, maxBytes: maxBytes}
}

func scoped(ctx context.Context, account, user string) context.Context {
	return tenant.With(ctx, tenant.Scope{Account: account, User: user})
}

// Hydrate fills root with the user's workspace and returns its revision
// and the etag of each file it wrote.
func (w *Workspaces) Hydrate(ctx context.Context, account, user string, root *wsync.Root) (int64, map[string]string, error) {
	etags := map[string]string{}
	rev, err := w.hydrate(ctx, account, user, root, etags)
	if err != nil {
		return 0, nil, err
	}
	return rev, etags, nil
}

func (w *Workspaces) hydrate(ctx context.Context, account, user string, root *wsync.Root, etags map[string]string) (int64, error) {
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
				etags[e.GetPath()] = e.GetEtag()
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

// Usage returns what the user's workspace stores: bytes and entries.
//
// It is a persistent sandbox's first call to the workspace service, and
// a read: one the connection could not make (a name not resolved yet, a
// service restarting) is tried again, twice, before the create fails.
func (w *Workspaces) Usage(ctx context.Context, account, user string) (bytes, files int64, err error) {
	var u *workspacev1.GetUsageResponse
	for attempt, wait := 0, 250*time.Millisecond; ; attempt, wait = attempt+1, 2*wait {
		u, err = w.c.GetUsage(scoped(ctx, account, user), &workspacev1.GetUsageRequest{User: user})
		if status.Code(err) != codes.Unavailable || attempt == 2 {
			break
		}
		select {
		case <-ctx.Done():
			return 0, 0, fmt.Errorf("executor: usage of %s: %w", user, errs.FromStatus(err))
		case <-time.After(wait):
		}
	}
	if err != nil {
		return 0, 0, fmt.Errorf("executor: usage of %s: %w", user, errs.FromStatus(err))
	}
	return u.GetUsedBytes(), u.GetUsedFiles(), nil
}

// Flush sends the changes of root since the last sync.
func (w *Workspaces) Flush(ctx context.Context, account, user string, in FlushInput) (FlushResult, error) {
	root, scan, c := in.Root, in.Scan, in.Changes
	limit := w.maxBytes
	if in.Quota.Bytes > 0 {
		limit = min(limit, in.Quota.Bytes)
	}
	var total int64
	for _, p := range c.Changed {
		if m := scan[p]; m.Type == wsync.File {
			total += m.Size
		}
	}
	if total > limit {
		// An early refusal of what the workspace service would refuse
		// anyway, before reading a byte: every file is sent whole, a
		// sparse one with all its holes.
		return FlushResult{}, quota.Exceeded("the changed files hold %d bytes (sparse files count their whole length), more than the quota of %d bytes; delete files to make room", total, limit)
	}
	ctx, cancel := context.WithCancel(scoped(ctx, account, user))
	defer cancel()
	stream, err := w.c.Flush(ctx)
	if err != nil {
		return FlushResult{}, fmt.Errorf("executor: flush %s: %w", user, errs.FromStatus(err))
	}
	send := func(m *workspacev1.FlushRequest) error {
		if err := stream.Send(m); err != nil {
			_, rerr := stream.CloseAndRecv()
			return fmt.Errorf("executor: flush %s: %w", user, errs.FromStatus(errors.Join(err, rerr)))
		}
		return nil
	}
	begin := &workspacev1.FlushBegin{User: user, BaseRevision: in.Base, ExactRemovals: true, QuotaBytes: limit, QuotaFiles: in.Quota.Files}
	if err := send(&workspacev1.FlushRequest{Message: &workspacev1.FlushRequest_Begin{Begin: begin}}); err != nil {
		return FlushResult{}, err
	}
	// Every removed path is listed, children first: removals are exact, so
	// what was added since this sandbox's copy survives its deletes, and
	// each names the kind of entry and a file's content this sandbox last
	// synced, so what replaced it since survives too.
	for _, p := range c.Removed {
		r := &workspacev1.Removal{Path: p, Etag: in.ETags[p], Type: protoType(in.Synced[p].Type)}
		if err := send(&workspacev1.FlushRequest{Message: &workspacev1.FlushRequest_Removal{Removal: r}}); err != nil {
			return FlushResult{}, err
		}
	}
	res := FlushResult{ETags: map[string]string{}}
	buf := make([]byte, chunks.Size)
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
				res.Unsent = append(res.Unsent, p)
				continue
			}
		}
		if err := send(&workspacev1.FlushRequest{Message: &workspacev1.FlushRequest_Entry{Entry: e}}); err != nil {
			if f != nil {
				f.Close()
			}
			return FlushResult{}, err
		}
		if f != nil {
			// Never more than the scanned size: a file that grows is sent
			// again by the next flush. The hash of what was sent is the
			// etag the service stores it under.
			h := sha256.New()
			err := sendFile(io.TeeReader(io.LimitReader(f, m.Size), h), buf, func(b []byte) error {
				return send(&workspacev1.FlushRequest{Message: &workspacev1.FlushRequest_Data{Data: b}})
			})
			f.Close()
			if err != nil {
				return FlushResult{}, err
			}
			res.ETags[p] = hex.EncodeToString(h.Sum(nil))
		}
	}
	if err := send(&workspacev1.FlushRequest{Message: &workspacev1.FlushRequest_Commit{Commit: true}}); err != nil {
		return FlushResult{}, err
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return FlushResult{}, fmt.Errorf("executor: flush %s: %w", user, errs.FromStatus(err))
	}
	res.Revision = resp.GetRevision()
	for _, c := range resp.GetConflicts() {
		res.Conflicts = append(res.Conflicts, Conflict{Path: c.GetPath(), Reason: c.GetReason()})
	}
	return res, nil
}

// protoType is the wire type of an entry of type t.
func protoType(t wsync.Type) workspacev1.FileType {
	switch t {
	case wsync.File:
		return workspacev1.FileType_FILE_TYPE_FILE
	case wsync.Dir:
		return workspacev1.FileType_FILE_TYPE_DIR
	case wsync.Symlink:
		return workspacev1.FileType_FILE_TYPE_SYMLINK
	}
	return workspacev1.FileType_FILE_TYPE_UNSPECIFIED
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
