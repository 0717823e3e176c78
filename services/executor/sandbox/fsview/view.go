package fsview

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Mount is one entry of a sandbox's mount table.
//
// An entry with neither Source nor Link is a filesystem of the sandbox's
// own (a tmpfs, proc, dev, or a directory made in one): the host cannot
// see into it. What lies under no entry is the sandbox's root, which is
// read-only and empty but for the directories leading to entries.
type Mount struct {
	// Target is where the entry appears in the sandbox: absolute, clean,
	// not "/".
	Target string
	// Source is the host file or directory bound at Target. It is a path
	// the executor chose (a root filesystem's dir, a sandbox's state) and
	// is opened as the host sees it, as bubblewrap did when it mounted it;
	// nothing beneath it is reached through a symlink.
	Source string
	// Link, when set, makes Target a symlink with this text.
	Link string
}

// Errors of a walk besides the system's (fs.ErrNotExist, ENOTDIR, EACCES,
// ELOOP, ENAMETOOLONG), all returned inside an *fs.PathError.
var (
	// ErrPrivate means the path lies in a filesystem of the sandbox's own,
	// which the host cannot see: it may or may not exist.
	ErrPrivate = errors.New("fsview: path is private to the sandbox")
	// ErrChanged means the path changed while it was walked: a directory
	// that had been seen became a symlink or moved.
	ErrChanged    = errors.New("fsview: path changed while it was resolved")
	errRelative   = errors.New("fsview: path must be absolute")
	errNotRegular = errors.New("fsview: not a regular file")
)

const (
	// maxLinks is how many symlinks one walk follows, as Linux's
	// MAXSYMLINKS.
	maxLinks = 40
	// maxPath and maxName are Linux's PATH_MAX and NAME_MAX.
	maxPath = 4096
	maxName = 255
)

// View is a sandbox's filesystem as its processes see it.
type View struct {
	mounts   []Mount // in effect: none hidden by a later one
	uid, gid uint32
}

// New returns the view of a mount table given in the order its entries
// are mounted: an entry hides whatever an earlier one put at or beneath
// its target. uid and gid are the unprivileged host ids the sandbox's
// processes run as; they decide what those may search and execute.
func New(mounts []Mount, uid, gid int) (*View, error) {
	var live []Mount
	for i, m := range mounts {
		switch {
		case !path.IsAbs(m.Target) || path.Clean(m.Target) != m.Target || m.Target == "/":
			return nil, fmt.Errorf("fsview: mount %d: target %q must be an absolute, clean path other than /", i, m.Target)
		case m.Source != "" && m.Link != "":
			return nil, fmt.Errorf("fsview: mount %d (%s): a source or a link, not both", i, m.Target)
		case m.Source != "" && !path.IsAbs(m.Source):
			return nil, fmt.Errorf("fsview: mount %d (%s): source %q must be absolute", i, m.Target, m.Source)
		}
		live = slices.DeleteFunc(live, func(o Mount) bool { return within(o.Target, m.Target) })
		live = append(live, m)
	}
	if uid < 0 || gid < 0 {
		return nil, fmt.Errorf("fsview: uid %d and gid %d must not be negative", uid, gid)
	}
	return &View{mounts: live, uid: uint32(uid), gid: uint32(gid)}, nil
}

// within reports whether p is dir or lies beneath it.
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// mountOf returns the entry p lies in, the one with the deepest target at
// or above p; nil means the root.
func (v *View) mountOf(p string) *Mount {
	var best *Mount
	for i := range v.mounts {
		if m := &v.mounts[i]; within(p, m.Target) && (best == nil || len(m.Target) > len(best.Target)) {
			best = m
		}
	}
	return best
}

// leadsTo reports whether an entry lies beneath p, which makes p a
// directory whatever holds it.
func (v *View) leadsTo(p string) bool {
	for _, m := range v.mounts {
		if strings.HasPrefix(m.Target, p+"/") {
			return true
		}
	}
	return false
}

// node is what a path names: its type and permissions, and a symlink's
// text.
type node struct {
	mode     uint32 // st_mode
	uid, gid uint32
	link     string
}

// dirNode stands for the directories the sandbox's runtime made: the root,
// those leading to entries, and the roots of its own filesystems.
var dirNode = node{mode: unix.S_IFDIR | 0o755}

func (n node) is(typ uint32) bool { return n.mode&unix.S_IFMT == typ }

// may reports whether the sandbox's user has the permission bit (1 search
// or execute, 4 read) on n: the owner's bits if it owns n, else the
// group's if n is its group's, else the others'.
func (v *View) may(n node, bit uint32) bool {
	perm := n.mode & 0o777
	switch {
	case n.uid == v.uid:
		return perm>>6&bit != 0
	case n.gid == v.gid:
		return perm>>3&bit != 0
	}
	return perm&bit != 0
}

// lstat returns what p names without following a final symlink. p must be
// absolute and clean, and its directories must hold no symlink in the view.
func (v *View) lstat(p string) (node, error) {
	if p == "/" {
		return dirNode, nil
	}
	m := v.mountOf(p)
	if m != nil && m.Target == p {
		switch {
		case m.Link != "":
			return node{mode: unix.S_IFLNK | 0o777, link: m.Link}, nil
		case m.Source == "":
			return dirNode, nil
		}
		fd, err := openSource(m.Source, unix.O_PATH)
		if err != nil {
			return node{}, err
		}
		defer unix.Close(fd)
		return stat(fd)
	}
	if v.leadsTo(p) {
		return dirNode, nil
	}
	switch {
	case m == nil:
		return node{}, unix.ENOENT
	case m.Source == "":
		return node{}, ErrPrivate
	case m.Link != "":
		// Never asked: a walk follows the link before looking beneath it.
		return node{}, unix.ENOTDIR
	}
	fd, err := openBeneath(m, p, unix.O_PATH)
	if err != nil {
		return node{}, err
	}
	defer unix.Close(fd)
	n, err := stat(fd)
	if err == nil && n.is(unix.S_IFLNK) {
		n.link, err = readlink(fd)
	}
	return n, err
}

// openSource opens an entry's source as the host sees it.
func openSource(src string, flags int) (int, error) {
	return unix.Open(src, flags|unix.O_CLOEXEC, 0)
}

// openBeneath opens p, which lies beneath m's target, in m's source
// without following any symlink on the way: a final one is opened itself
// with O_PATH, else refused.
func openBeneath(m *Mount, p string, flags int) (int, error) {
	root, err := openSource(m.Source, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		// ENOTDIR when the source is a file: nothing lies beneath it.
		return -1, err
	}
	defer unix.Close(root)
	fd, err := unix.Openat2(root, p[len(m.Target)+1:], &unix.OpenHow{
		Flags:   uint64(flags | unix.O_NOFOLLOW | unix.O_CLOEXEC),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS,
	})
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) || errors.Is(err, unix.EAGAIN) {
		// The walk saw every directory of p as a directory, and asks for
		// a final symlink only with O_PATH: this one was swapped since.
		return -1, ErrChanged
	}
	return fd, err
}

func stat(fd int) (node, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return node{}, err
	}
	return node{mode: st.Mode, uid: st.Uid, gid: st.Gid}, nil
}

// readlink reads the text of the symlink fd was opened on with O_PATH.
func readlink(fd int) (string, error) {
	buf := make([]byte, maxPath)
	n, err := unix.Readlinkat(fd, "", buf)
	if err != nil {
		return "", err
	}
	if n == len(buf) {
		return "", unix.ENAMETOOLONG
	}
	return string(buf[:n]), nil
}

// walk resolves the absolute path p as the kernel would in the sandbox:
// component by component, ".." from where a symlink led, symlinks
// followed except a final one when follow is false. It returns the path it
// reached, with no symlink but perhaps the final one, and what is there.
func (v *View) walk(p string, follow bool) (string, node, error) {
	fail := func(err error) (string, node, error) {
		return "", node{}, &fs.PathError{Op: "resolve", Path: p, Err: err}
	}
	switch {
	case !path.IsAbs(p):
		return fail(errRelative)
	case len(p) >= maxPath:
		return fail(unix.ENAMETOOLONG)
	}
	cur, n := "/", dirNode
	rest := strings.TrimLeft(p, "/")
	links := 0
	for rest != "" {
		name, tail, slash := strings.Cut(rest, "/")
		rest = strings.TrimLeft(tail, "/")
		// n is the directory name is looked up in.
		if !v.may(n, 1) {
			return fail(unix.EACCES)
		}
		switch {
		case len(name) > maxName:
			return fail(unix.ENAMETOOLONG)
		case name == ".":
			continue
		case name == "..":
			cur = path.Dir(cur)
			var err error
			if n, err = v.lstat(cur); err != nil {
				return fail(err)
			}
			continue
		}
		next := path.Join(cur, name)
		nn, err := v.lstat(next)
		if err != nil {
			return fail(err)
		}
		if nn.is(unix.S_IFLNK) && (slash || follow) {
			if links++; links > maxLinks {
				return fail(unix.ELOOP)
			}
			if nn.link == "" {
				return fail(unix.ENOENT)
			}
			target := nn.link
			if slash {
				// What followed the link, or a trailing slash that asks
				// for a directory.
				target += "/" + rest
			}
			if path.IsAbs(target) {
				cur, n = "/", dirNode
			}
			rest = strings.TrimLeft(target, "/")
			continue
		}
		cur, n = next, nn
		if slash && !n.is(unix.S_IFDIR) {
			return fail(unix.ENOTDIR)
		}
	}
	return cur, n, nil
}

// Resolve returns the absolute path p names in the sandbox with every
// symlink resolved.
func (v *View) Resolve(p string) (string, error) {
	real, _, err := v.walk(p, true)
	return real, err
}

// Open opens for reading the regular file p names in the sandbox,
// following symlinks in the view only.
func (v *View) Open(p string) (*os.File, error) {
	real, n, err := v.walk(p, true)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*os.File, error) {
		return nil, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	if !n.is(unix.S_IFREG) {
		return fail(errNotRegular)
	}
	m := v.mountOf(real)
	var fd int
	switch {
	case m == nil || m.Source == "":
		return fail(ErrChanged) // lstat found a file where none can be
	case m.Target == real:
		fd, err = openSource(m.Source, unix.O_RDONLY|unix.O_NONBLOCK)
	default:
		fd, err = openBeneath(m, real, unix.O_RDONLY|unix.O_NONBLOCK)
	}
	if err != nil {
		return fail(err)
	}
	if n, err = stat(fd); err != nil || !n.is(unix.S_IFREG) {
		unix.Close(fd)
		return fail(ErrChanged)
	}
	return os.NewFile(uintptr(fd), real), nil
}

// executable returns the path p names with its directories resolved, when
// it names a regular file the sandbox's user may execute. Its last
// component is kept: a symlink there is how the program was started,
// which matters to multi-call binaries.
func (v *View) executable(p string) (string, error) {
	lp, n, err := v.walk(p, false)
	if err != nil {
		return "", err
	}
	if n.is(unix.S_IFLNK) {
		if _, n, err = v.walk(lp, true); err != nil {
			return "", err
		}
	}
	if !n.is(unix.S_IFREG) || !v.may(n, 1) {
		// What execve(2) says of a directory or a file without the bit.
		return "", &fs.PathError{Op: "exec", Path: p, Err: unix.EACCES}
	}
	return lp, nil
}
