package wsync

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// Errors of the file primitives besides the system's (fs.ErrNotExist,
// ELOOP for a symlink on the way, ENOSPC for a full workspace), wrapped.
var (
	// ErrNotRegular means the path names something other than a regular
	// file.
	ErrNotRegular = errors.New("wsync: not a regular file")
	// ErrTooLarge means the content was longer than Create's limit.
	ErrTooLarge = errors.New("wsync: content larger than the limit")
	// ErrNotDir means a parent of the path to create is neither a
	// directory nor missing.
	ErrNotDir = errors.New("wsync: a parent is not a directory")
)

// FileMeta is a regular file of the workspace.
type FileMeta struct {
	// Path is workspace-absolute ("/a/b").
	Path string
	Meta
}

// Stat returns the regular file at p; a symlink anywhere in the path, or
// anything but a regular file, is refused.
func (r *Root) Stat(p string) (Meta, error) {
	f, err := r.openat(p, unix.O_PATH, 0)
	if err != nil {
		return Meta{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Meta{}, fmt.Errorf("wsync: stat %s: %w", p, err)
	}
	switch {
	case st.Mode()&fs.ModeSymlink != 0:
		// What opening it to read says of a symlink.
		return Meta{}, fmt.Errorf("wsync: stat %s: %w", p, unix.ELOOP)
	case !st.Mode().IsRegular():
		return Meta{}, fmt.Errorf("wsync: %s: %w", p, ErrNotRegular)
	}
	return Meta{Type: File, Size: st.Size(), Mode: st.Mode().Perm(), ModTime: st.ModTime()}, nil
}

// Files lists the regular files of the workspace in path order, at most
// max of them, and whether there were more. Symlinks are neither listed
// nor followed.
func (r *Root) Files(maxFiles int) ([]FileMeta, bool, error) {
	root := fmt.Sprintf("/proc/self/fd/%d/", r.dir.Fd())
	var out []FileMeta
	more := errors.New("more")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while we walked
			}
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if len(out) == maxFiles {
			return more
		}
		rel := strings.TrimPrefix(p, root)
		out = append(out, FileMeta{Path: "/" + filepath.ToSlash(rel), Meta: Meta{Type: File, Size: info.Size(), Mode: info.Mode().Perm(), ModTime: info.ModTime()}})
		return nil
	})
	truncated := errors.Is(err, more)
	if err != nil && !truncated {
		return nil, false, fmt.Errorf("wsync: list files: %w", err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, truncated, nil
}

// Create writes the regular file p from src, with the permission bits of
// mode, owned by the root's uid, making missing parent directories. The
// content goes into an unnamed file that is given p's name only once src
// is complete, so a failed write, or one longer than limit bytes
// (ErrTooLarge), leaves nothing behind and whatever p was untouched.
func (r *Root) Create(p string, mode fs.FileMode, src io.Reader, limit int64) (Meta, error) {
	rel, err := clean(p)
	if err != nil {
		return Meta{}, err
	}
	d, err := r.makeParents(path.Dir(rel))
	if err != nil {
		return Meta{}, fmt.Errorf("wsync: create %s: %w", p, err)
	}
	defer d.Close()
	fd, err := unix.Openat(int(d.Fd()), ".", unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return Meta{}, fmt.Errorf("wsync: create %s: %w", p, err)
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	n, err := io.Copy(f, io.LimitReader(src, limit+1))
	switch {
	case err != nil:
		return Meta{}, fmt.Errorf("wsync: write %s: %w", p, err)
	case n > limit:
		return Meta{}, fmt.Errorf("wsync: write %s: %w", p, ErrTooLarge)
	}
	if err := f.Chown(r.uid, r.uid); err != nil {
		return Meta{}, fmt.Errorf("wsync: chown %s: %w", p, err)
	}
	if err := f.Chmod(mode.Perm()); err != nil {
		return Meta{}, fmt.Errorf("wsync: chmod %s: %w", p, err)
	}
	st, err := f.Stat()
	if err != nil {
		return Meta{}, fmt.Errorf("wsync: stat %s: %w", p, err)
	}
	// The unnamed file gets a name no one else uses, then takes p's in
	// one rename: p is the old file or the whole new one, never a part.
	base := path.Base(rel)
	tmp := ".conch-upload-" + randomSuffix()
	if err := unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", fd), int(d.Fd()), tmp, unix.AT_SYMLINK_FOLLOW); err != nil {
		return Meta{}, fmt.Errorf("wsync: create %s: %w", p, err)
	}
	if err := unix.Renameat(int(d.Fd()), tmp, int(d.Fd()), base); err != nil {
		_ = unix.Unlinkat(int(d.Fd()), tmp, 0)
		return Meta{}, fmt.Errorf("wsync: create %s: %w", p, err)
	}
	return Meta{Type: File, Size: st.Size(), Mode: st.Mode().Perm(), ModTime: st.ModTime()}, nil
}

// makeParents opens the directory dir (relative to the root, "." for the
// root itself), making what is missing of it; no component may be a
// symlink.
func (r *Root) makeParents(dir string) (*os.File, error) {
	cur := "."
	if dir != "." {
		for _, part := range strings.Split(dir, "/") {
			d, err := r.openDir(cur)
			if err != nil {
				return nil, err
			}
			err = unix.Mkdirat(int(d.Fd()), part, 0o755)
			if err == nil {
				err = unix.Fchownat(int(d.Fd()), part, r.uid, r.uid, unix.AT_SYMLINK_NOFOLLOW)
			} else if errors.Is(err, unix.EEXIST) {
				err = isDir(d, part)
			}
			d.Close()
			if err != nil {
				return nil, err
			}
			cur = path.Join(cur, part)
		}
	}
	return r.openDir(cur)
}

// isDir says why name in d is not a directory to create a file in, or nil.
// It may change before the next open, which never follows a symlink.
func isDir(d *os.File, name string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(int(d.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return nil
	case unix.S_IFLNK:
		return unix.ELOOP
	}
	return ErrNotDir
}

// openDir opens the directory dir, relative to the root ("." for the root).
func (r *Root) openDir(dir string) (*os.File, error) {
	if dir != "." {
		return r.openat("/"+dir, unix.O_DIRECTORY|unix.O_RDONLY, 0)
	}
	d, err := unix.Openat(int(r.dir.Fd()), ".", unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(d), "/"), nil
}

func randomSuffix() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // crypto/rand.Read never returns an error
	return hex.EncodeToString(b)
}

// RemoveFile removes the regular file p; anything else is refused.
func (r *Root) RemoveFile(p string) error {
	d, base, err := r.parent(p)
	if err != nil {
		return err
	}
	defer d.Close()
	var st unix.Stat_t
	if err := unix.Fstatat(int(d.Fd()), base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("wsync: remove %s: %w", p, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("wsync: remove %s: %w", p, ErrNotRegular)
	}
	if err := unix.Unlinkat(int(d.Fd()), base, 0); err != nil {
		return fmt.Errorf("wsync: remove %s: %w", p, err)
	}
	return nil
}
