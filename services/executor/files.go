package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/conch-sh/conch/services/executor/sandbox/wire"
	"github.com/conch-sh/conch/services/executor/wsync"
	"github.com/conch-sh/conch/services/internal/contract"
	"github.com/conch-sh/conch/services/internal/platform/errs"
)

// Limits of the file calls.
const (
	// MaxFileBytes is the largest file WriteFile takes: the workspace file
	// API's upload limit (docs/how-to/workspace-files.md).
	MaxFileBytes = contract.MaxFileBytes
	// MaxListedFiles is how many files ListFiles returns at most.
	MaxListedFiles = 10000
)

// File is a regular file of a sandbox's workspace.
type File struct {
	// Path is absolute in the sandbox, beneath wire.WorkspaceDir.
	Path string
	wsync.Meta
	// WrittenByAPI says the content is what WriteFile last wrote there.
	WrittenByAPI bool
}

// workspaceRel turns the sandbox path p, beneath /home/workspace, into
// the workspace-absolute path wsync works with. Nothing is resolved here:
// wsync refuses a symlink anywhere on the way.
func workspaceRel(p string) (string, error) {
	rel, ok := strings.CutPrefix(p, wire.WorkspaceDir+"/")
	if !ok || rel == "" || strings.ContainsRune(p, 0) || len(p) > 4096 || path.Clean(p) != p {
		return "", errs.New(errs.InvalidArgument, "path: must be a clean absolute path beneath %s", wire.WorkspaceDir)
	}
	for _, part := range strings.Split(rel, "/") {
		if part == "." || part == ".." || len(part) > 255 {
			return "", errs.New(errs.InvalidArgument, "path: must be a clean absolute path beneath %s, with names of at most 255 bytes", wire.WorkspaceDir)
		}
	}
	return "/" + rel, nil
}

// fileError maps what the filesystem said about p to the caller's terms.
func fileError(p string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, unix.ENOTDIR):
		return errs.New(errs.NotFound, "file %s not found", p)
	case errors.Is(err, wsync.ErrNotRegular):
		return errs.New(errs.NotFound, "%s is not a regular file", p)
	case errors.Is(err, wsync.ErrNotDir):
		return errs.New(errs.InvalidArgument, "path: a parent of %s is not a directory", p)
	case errors.Is(err, wsync.ErrTooLarge):
		return errs.New(errs.ResourceExhausted, "file larger than the limit of %d bytes (100 MiB)", MaxFileBytes)
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
		return errs.New(errs.ResourceExhausted, "the sandbox's workspace is full")
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV):
		return errs.New(errs.InvalidArgument, "path: %s passes through a symlink, which file calls never follow", p)
	case errors.Is(err, unix.EISDIR):
		return errs.New(errs.InvalidArgument, "path: %s is a directory", p)
	}
	if k := errs.KindOf(err); k != errs.Internal {
		return err
	}
	return fmt.Errorf("executor: file %s: %w", p, err)
}

// withRoot runs fn on the workspace of account's sandbox id, opened for
// the file calls; it counts as activity of the sandbox.
func (s *Service) withRoot(ctx context.Context, account, id string, fn func(e *entry, root *wsync.Root) error) error {
	e, err := s.lookup(ctx, account, id)
	if err != nil {
		return err
	}
	select {
	case <-e.sb.Done():
		return errs.New(errs.NotFound, "sandbox %q not found", id)
	default:
	}
	root, err := wsync.OpenRoot(e.sb.WorkspacePath(), e.sb.HostUID())
	if err != nil {
		return fmt.Errorf("executor: open workspace of %s: %w", id, err)
	}
	defer root.Close()
	e.touch()
	return fn(e, root)
}

func (e *entry) fileOf(p string, m wsync.Meta) File {
	e.mu.Lock()
	w, ok := e.written[p]
	e.mu.Unlock()
	return File{Path: p, Meta: m, WrittenByAPI: ok && w.Size == m.Size && w.ModTime.Equal(m.ModTime)}
}

// WriteFile writes src to the regular file p of account's sandbox id,
// replacing it once src is complete, and saves a persistent workspace.
func (s *Service) WriteFile(ctx context.Context, account, id, p string, src io.Reader) (File, error) {
	rel, err := workspaceRel(p)
	if err != nil {
		return File{}, err
	}
	var f File
	err = s.withRoot(ctx, account, id, func(e *entry, root *wsync.Root) error {
		m, err := root.Create(rel, 0o644, src, MaxFileBytes)
		if err != nil {
			return fileError(p, err)
		}
		e.mu.Lock()
		if e.written == nil {
			e.written = map[string]wsync.Meta{}
		}
		e.written[p] = m
		e.mu.Unlock()
		f = e.fileOf(p, m)
		return s.save(ctx, e, p)
	})
	return f, err
}

// save flushes a persistent workspace after a file call changed it: the
// answer says the change is kept, as a command's does.
func (s *Service) save(ctx context.Context, e *entry, p string) error {
	if !e.persistent {
		return nil
	}
	if _, err := e.ws.Flush(ctx); err != nil {
		return fmt.Errorf("executor: save %s to the persistent workspace: %w", p, err)
	}
	return nil
}

// OpenFile opens the regular file p of account's sandbox id for reading.
func (s *Service) OpenFile(ctx context.Context, account, id, p string) (*os.File, File, error) {
	rel, err := workspaceRel(p)
	if err != nil {
		return nil, File{}, err
	}
	var (
		f    *os.File
		info File
	)
	err = s.withRoot(ctx, account, id, func(e *entry, root *wsync.Root) error {
		if f, err = root.Open(rel); err != nil {
			return fileError(p, err)
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return fileError(p, err)
		}
		info = e.fileOf(p, wsync.Meta{Type: wsync.File, Size: st.Size(), Mode: st.Mode().Perm(), ModTime: st.ModTime()})
		return nil
	})
	return f, info, err
}

// StatFile returns the regular file p of account's sandbox id.
func (s *Service) StatFile(ctx context.Context, account, id, p string) (File, error) {
	rel, err := workspaceRel(p)
	if err != nil {
		return File{}, err
	}
	var f File
	err = s.withRoot(ctx, account, id, func(e *entry, root *wsync.Root) error {
		m, err := root.Stat(rel)
		if err != nil {
			return fileError(p, err)
		}
		f = e.fileOf(p, m)
		return nil
	})
	return f, err
}

// ListFiles lists the regular files of account's sandbox id, at most
// MaxListedFiles, in path order, and whether there were more.
func (s *Service) ListFiles(ctx context.Context, account, id string) ([]File, bool, error) {
	var (
		out       []File
		truncated bool
	)
	err := s.withRoot(ctx, account, id, func(e *entry, root *wsync.Root) error {
		files, more, err := root.Files(MaxListedFiles)
		if err != nil {
			return fmt.Errorf("executor: list files of %s: %w", id, err)
		}
		out, truncated = make([]File, 0, len(files)), more
		for _, f := range files {
			out = append(out, e.fileOf(wire.WorkspaceDir+f.Path, f.Meta))
		}
		return nil
	})
	return out, truncated, err
}

// DeleteFile deletes the regular file p of account's sandbox id and saves
// a persistent workspace.
func (s *Service) DeleteFile(ctx context.Context, account, id, p string) error {
	rel, err := workspaceRel(p)
	if err != nil {
		return err
	}
	return s.withRoot(ctx, account, id, func(e *entry, root *wsync.Root) error {
		if err := root.RemoveFile(rel); err != nil {
			return fileError(p, err)
		}
		e.mu.Lock()
		delete(e.written, p)
		e.mu.Unlock()
		return s.save(ctx, e, p)
	})
}
