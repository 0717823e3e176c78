// Package wsync reads and writes a sandbox's workspace from the host for
// hydrating and flushing persistent workspaces, and for the executor's
// file calls (files.go). The workspace is written by
// untrusted code, so nothing here ever follows a symlink: entries are read
// with lstat, files are opened relative to the workspace root with
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, and symlinks are recorded as symlinks.
package wsync

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Type is an entry's kind.
type Type int

// The kinds of entries; anything else (devices, sockets, fifos) is skipped.
const (
	File Type = iota + 1
	Dir
	Symlink
)

// Meta is one entry as the host saw it.
type Meta struct {
	Type    Type
	Size    int64
	Mode    fs.FileMode // permission bits
	ModTime time.Time
	Target  string // of a symlink
}

// ErrTooMany means the workspace has more entries than allowed.
var ErrTooMany = errors.New("wsync: too many entries")

// Scan lists the workspace at root as workspace-absolute paths ("/a/b"),
// without following symlinks. It fails beyond maxEntries entries.
func Scan(root string, maxEntries int) (map[string]Meta, error) {
	out := map[string]Meta{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		info, err := d.Info() // lstat: WalkDir never follows symlinks
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while we walked
			}
			return err
		}
		m := Meta{Mode: info.Mode().Perm(), ModTime: info.ModTime()}
		switch {
		case info.Mode().IsRegular():
			m.Type, m.Size = File, info.Size()
		case info.IsDir():
			m.Type = Dir
		case info.Mode()&fs.ModeSymlink != 0:
			m.Type = Symlink
			if m.Target, err = os.Readlink(p); err != nil {
				return nil
			}
		default:
			return nil
		}
		if len(out) >= maxEntries {
			return ErrTooMany
		}
		out["/"+filepath.ToSlash(rel)] = m
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("wsync: scan %s: %w", root, err)
	}
	return out, nil
}

// Changes are what differ between two scans.
type Changes struct {
	// Changed are new or modified entries, parents before children.
	Changed []string
	// Removed are entries gone, children before parents.
	Removed []string
}

// Diff compares a scan with the previous one.
func Diff(before, after map[string]Meta) Changes {
	var c Changes
	for p, m := range after {
		if b, ok := before[p]; !ok || b.Type != m.Type || b.Size != m.Size || !b.ModTime.Equal(m.ModTime) || b.Mode != m.Mode || b.Target != m.Target {
			c.Changed = append(c.Changed, p)
		}
	}
	for p, b := range before {
		// A changed kind is a removal, then a creation.
		if m, ok := after[p]; !ok || m.Type != b.Type {
			c.Removed = append(c.Removed, p)
		}
	}
	sort.Strings(c.Changed)
	sort.Sort(sort.Reverse(sort.StringSlice(c.Removed)))
	return c
}

// clean checks a workspace-absolute path and returns it relative to root.
func clean(p string) (string, error) {
	if !strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) || len(p) > 4096 {
		return "", fmt.Errorf("wsync: bad path %q", p)
	}
	c := path.Clean(p)
	if c != p || c == "/" {
		return "", fmt.Errorf("wsync: bad path %q", p)
	}
	for _, part := range strings.Split(c[1:], "/") {
		if part == "." || part == ".." || len(part) > 255 {
			return "", fmt.Errorf("wsync: bad path %q", p)
		}
	}
	return c[1:], nil
}

// resolve are the openat2 rules: stay beneath the root, follow nothing.
const resolve = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// Root is an open workspace directory.
type Root struct {
	dir *os.File
	uid int
}

// OpenRoot opens the workspace at dir; files created in it belong to uid.
func OpenRoot(dir string, uid int) (*Root, error) {
	f, err := os.OpenFile(dir, unix.O_DIRECTORY|unix.O_NOFOLLOW|os.O_RDONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("wsync: open root: %w", err)
	}
	return &Root{dir: f, uid: uid}, nil
}

// Close closes the root.
func (r *Root) Close() error { return r.dir.Close() }

// Scan lists the workspace through the open handle, like Scan: what it
// lists is the directory OpenRoot opened, even after that directory was
// unmounted or its path replaced, never whatever the path names now.
func (r *Root) Scan(maxEntries int) (map[string]Meta, error) {
	// The trailing slash makes the walk follow the descriptor's link to
	// the directory itself.
	return Scan(fmt.Sprintf("/proc/self/fd/%d/", r.dir.Fd()), maxEntries)
}

func (r *Root) openat(p string, flags uint64, mode uint32) (*os.File, error) {
	rel, err := clean(p)
	if err != nil {
		return nil, err
	}
	fd, err := unix.Openat2(int(r.dir.Fd()), rel, &unix.OpenHow{Flags: flags | unix.O_CLOEXEC | unix.O_NOFOLLOW, Mode: uint64(mode), Resolve: resolve})
	if err != nil {
		return nil, fmt.Errorf("wsync: open %s: %w", p, err)
	}
	return os.NewFile(uintptr(fd), p), nil
}

// Open opens a regular file of the workspace for reading; a symlink
// anywhere in the path, or anything but a regular file, is refused.
func (r *Root) Open(p string) (*os.File, error) {
	f, err := r.openat(p, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("wsync: %s: %w", p, ErrNotRegular)
	}
	return f, nil
}

// WriteFile creates or replaces a file with the bytes of src, with the
// permission bits of mode (never setuid, setgid or sticky, whatever the
// process umask) and, unless zero, the modification time mtime.
func (r *Root) WriteFile(p string, mode fs.FileMode, mtime time.Time, src io.Reader) error {
	_ = r.Remove(p) // replaces whatever was there, symlinks included, without following it
	f, err := r.openat(p, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, uint32(mode.Perm()&0o777))
	if err != nil {
		return err
	}
	_, err = io.Copy(f, src)
	if err == nil {
		err = f.Chown(r.uid, r.uid)
	}
	if err == nil {
		// fchmod is not masked by the umask, as the create was.
		err = f.Chmod(mode.Perm())
	}
	if err == nil && !mtime.IsZero() {
		tv := unix.NsecToTimeval(mtime.UnixNano())
		err = unix.Futimes(int(f.Fd()), []unix.Timeval{tv, tv})
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("wsync: write %s: %w", p, err)
	}
	return nil
}

// parent opens the directory holding p and returns it with p's base name.
func (r *Root) parent(p string) (*os.File, string, error) {
	rel, err := clean(p)
	if err != nil {
		return nil, "", err
	}
	dir, base := path.Split(rel)
	if dir == "" {
		d, err := unix.Openat(int(r.dir.Fd()), ".", unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, "", err
		}
		return os.NewFile(uintptr(d), "/"), base, nil
	}
	f, err := r.openat("/"+strings.TrimSuffix(dir, "/"), unix.O_DIRECTORY|unix.O_RDONLY, 0)
	if err != nil {
		return nil, "", err
	}
	return f, base, nil
}

// Mkdir creates a directory (its parent must exist).
func (r *Root) Mkdir(p string, mode fs.FileMode) error {
	d, base, err := r.parent(p)
	if err != nil {
		return err
	}
	defer d.Close()
	perm := uint32(mode.Perm() | 0o700)
	if err := unix.Mkdirat(int(d.Fd()), base, perm); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("wsync: mkdir %s: %w", p, err)
	}
	// Mkdirat's mode was masked by the umask; the stored mode is restored
	// (the owner always keeps rwx, so the workspace stays usable).
	if err := unix.Fchmodat(int(d.Fd()), base, perm, 0); err != nil {
		return fmt.Errorf("wsync: chmod %s: %w", p, err)
	}
	return unix.Fchownat(int(d.Fd()), base, r.uid, r.uid, unix.AT_SYMLINK_NOFOLLOW)
}

// Symlink creates a symlink; its target is stored, never resolved here.
func (r *Root) Symlink(p, target string) error {
	d, base, err := r.parent(p)
	if err != nil {
		return err
	}
	defer d.Close()
	_ = unix.Unlinkat(int(d.Fd()), base, 0)
	if err := unix.Symlinkat(target, int(d.Fd()), base); err != nil {
		return fmt.Errorf("wsync: symlink %s: %w", p, err)
	}
	return unix.Fchownat(int(d.Fd()), base, r.uid, r.uid, unix.AT_SYMLINK_NOFOLLOW)
}

// Remove removes a file, symlink or empty directory.
func (r *Root) Remove(p string) error {
	d, base, err := r.parent(p)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := unix.Unlinkat(int(d.Fd()), base, 0); err != nil {
		if errors.Is(err, unix.EISDIR) {
			err = unix.Unlinkat(int(d.Fd()), base, unix.AT_REMOVEDIR)
		}
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("wsync: remove %s: %w", p, err)
		}
	}
	return nil
}
