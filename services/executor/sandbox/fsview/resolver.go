package fsview

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrNotFound means a name resolves to no program the sandbox's user may
// run.
var ErrNotFound = errors.New("fsview: program not found")

// Resolver finds the program a command names as the sandbox's shell would.
// It is the approval policy's Resolver (package policy) for commands that
// run in a sandbox.
type Resolver struct {
	// View is the sandbox's filesystem.
	View *View
	// Path are the entries of the shell's PATH in order; empty and
	// relative entries are taken relative to the working directory, as
	// the shell takes them.
	Path []string
}

// LookPath returns the program name runs when started in dir: an absolute
// path in the sandbox whose directories are resolved, so that it names
// where the program is rather than how it was reached, and whose last
// component is the name it is started under (a symlink perhaps; RealPath
// resolves that too). dir is taken as the shell's working directory; it is
// walked like the rest, so a dir reached through a symlink or ".." is
// where the kernel would be.
//
// A name with a slash is the file it names. A bare name is searched along
// Path and, as the shell does, a candidate that is missing, not a
// directory on the way, not an executable regular file or a symlink loop
// is passed over; a candidate the host cannot see (ErrPrivate) or one
// changed while it was looked at ends the search with that error.
func (r Resolver) LookPath(name, dir string) (string, error) {
	if !path.IsAbs(dir) {
		return "", fmt.Errorf("fsview: working directory %q must be absolute", dir)
	}
	if name == "" || strings.HasSuffix(name, "/") {
		return "", fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	if strings.Contains(name, "/") {
		if !path.IsAbs(name) {
			name = dir + "/" + name
		}
		return r.View.executable(name)
	}
	for _, d := range r.Path {
		if !path.IsAbs(d) {
			d = dir + "/" + d
		}
		p, err := r.View.executable(d + "/" + name)
		if err == nil {
			return p, nil
		}
		if !passOver(err) {
			return "", err
		}
	}
	return "", fmt.Errorf("%w: %q", ErrNotFound, name)
}

// passOver reports whether a PATH search goes on past a candidate that
// failed with err, as dash and bash do when exec fails.
func passOver(err error) bool {
	for _, e := range []error{unix.ENOENT, unix.ENOTDIR, unix.EACCES, unix.ELOOP, unix.ENAMETOOLONG} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// RealPath returns p with every symlink resolved in the view, or p when
// that fails.
func (r Resolver) RealPath(p string) string {
	if real, err := r.View.Resolve(p); err == nil {
		return real
	}
	return p
}
