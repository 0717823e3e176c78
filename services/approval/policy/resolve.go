package policy

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/conch-sh/conch/services/internal/contract"
)

// Resolver finds the binary a program name runs, the way the shell would in
// a given working directory. Implementations see the PATH and filesystem
// the command really runs with: the sandbox's, an executor host's or a
// node's.
type Resolver interface {
	// LookPath returns the absolute, cleaned path of the binary name runs
	// when started in dir, or an error when there is none.
	LookPath(name, dir string) (string, error)
}

// ErrNotFound is returned when a program name resolves to no binary.
var ErrNotFound = errors.New("policy: program not found")

// PathResolver resolves names along a PATH against a filesystem view.
type PathResolver struct {
	// Path are the PATH entries in order; relative or empty entries are
	// taken relative to the working directory, as the shell does.
	Path []string
	// Stat stats a path following symlinks; nil means os.Stat.
	Stat func(string) (fs.FileInfo, error)
	// EvalSymlinks resolves symlinks; nil means filepath.EvalSymlinks
	// when Stat is nil too, else no resolution.
	EvalSymlinks func(string) (string, error)
}

// RealPath returns p with symlinks resolved, or p when that fails.
func (r PathResolver) RealPath(p string) string {
	eval := r.EvalSymlinks
	if eval == nil {
		if r.Stat != nil {
			return p
		}
		eval = filepath.EvalSymlinks
	}
	if real, err := eval(p); err == nil {
		return real
	}
	return p
}

// SplitPath splits a PATH value into entries.
func SplitPath(v string) []string {
	if v == "" {
		return nil
	}
	return strings.Split(v, ":")
}

// DefaultPath is the PATH of a login shell on a Debian system.
const DefaultPath = contract.DefaultPath

// LookPath implements Resolver.
func (r PathResolver) LookPath(name, dir string) (string, error) {
	if name == "" {
		return "", ErrNotFound
	}
	if strings.Contains(name, "/") {
		raw := name
		if !filepath.IsAbs(raw) {
			raw = dir + "/" + raw
		}
		p := filepath.Clean(raw)
		if !r.executable(p) || !r.sameFile(raw, p) {
			return "", ErrNotFound
		}
		return p, nil
	}
	for _, d := range r.Path {
		if d == "" {
			d = "."
		}
		if !filepath.IsAbs(d) {
			d = filepath.Join(dir, d)
		}
		p := filepath.Join(d, name)
		if r.executable(p) {
			return p, nil
		}
	}
	return "", ErrNotFound
}

// sameFile reports whether raw, resolved as the kernel does (a ".." after
// a symlink leaves the link's target, not the link's directory), is the
// file its lexically cleaned form p names. A name where the two differ is
// refused rather than judged by a file it would not run. Only checked on
// the real filesystem.
func (r PathResolver) sameFile(raw, p string) bool {
	if r.Stat != nil || r.EvalSymlinks != nil || !strings.Contains(raw, "..") {
		return true
	}
	a, err1 := filepath.EvalSymlinks(raw)
	b, err2 := filepath.EvalSymlinks(p)
	return err1 == nil && err2 == nil && a == b
}

func (r PathResolver) executable(p string) bool {
	stat := r.Stat
	if stat == nil {
		stat = os.Stat
	}
	fi, err := stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// MapResolver resolves names from what a caller already resolved, such as
// an executor sending its segments: bare names map to the binary PATH
// lookup found, and every binary the caller found is listed under its own
// absolute path, so that names with a slash (./tool, bin/x) resolve
// lexically against the directory the engine tracks and count only when
// the caller saw a binary there.
type MapResolver struct {
	// Paths maps names and resolved paths to resolved paths.
	Paths map[string]string
	// Real maps resolved paths to the files they are links to, as the
	// caller saw them.
	Real map[string]string
}

// LookPath implements Resolver.
func (m MapResolver) LookPath(name, dir string) (string, error) {
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		p = filepath.Clean(p)
		if m.Paths[p] == p {
			return p, nil
		}
		return "", ErrNotFound
	}
	if p, ok := m.Paths[name]; ok {
		return p, nil
	}
	return "", ErrNotFound
}

// RealPath returns the file p links to, as the caller saw it, or p.
func (m MapResolver) RealPath(p string) string {
	if r, ok := m.Real[p]; ok {
		return r
	}
	return p
}
