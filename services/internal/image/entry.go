package image

import (
	"archive/tar"
	"io/fs"
	"path"
	"strings"
	"time"
	"unicode/utf8"
)

const (
	maxPathBytes = 4096 // PATH_MAX
	maxNameBytes = 255  // NAME_MAX: a longer name fails only when written
	maxLinkBytes = 4096

	modeSetuid = 0o4000
	modeSetgid = 0o2000
	modeSticky = 0o1000
	modePerm   = 0o777

	// maxUstarTime is the last second a ustar header's mtime holds; a later
	// or earlier one would need a pax record.
	maxUstarTime = 1<<33 - 1

	whiteoutPrefix = ".wh."

	setuidReason = "setuid or setgid bit (conch sandboxes never run setuid programs; remove it: chmod ug-s)"
	onlyFiles    = "(a template root holds only files, directories and links)"
	leavesRoot   = "path leaves the root"
)

// entry is one tar header reduced to what a template root keeps.
type entry struct {
	path  string    // cleaned and relative; "" for the root itself
	typ   byte      // tar.TypeReg, TypeDir, TypeSymlink or TypeLink
	mode  int64     // permission bits, and the sticky bit of a directory
	mtime time.Time // whole seconds a ustar header holds
	link  string    // a symlink's target as written; a hardlink's cleaned path
	size  int64     // content bytes of a regular file
}

// check judges one header by the template rules and reduces it to an entry.
// An entry with an empty path is no file of the root (the root itself, or
// pax records for the whole archive) and is skipped.
func check(hdr *tar.Header) (entry, error) {
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		// Archive-wide pax records name no file, and archive/tar applies
		// none of them to later entries.
		return entry{}, nil
	}
	p, reason := cleanPath(hdr.Name)
	if reason != "" {
		return entry{}, refuse(hdr.Name, "%s", reason)
	}
	if p == "" {
		if hdr.Typeflag != tar.TypeDir {
			return entry{}, refuse(hdr.Name, "the root itself must be a directory")
		}
		return entry{}, nil
	}
	if strings.HasPrefix(path.Base(p), whiteoutPrefix) {
		return entry{}, refuse(p, "whiteout left after the layers were merged")
	}
	e := entry{path: p, typ: hdr.Typeflag, mode: hdr.Mode & modePerm, mtime: clampTime(hdr.ModTime)}
	switch hdr.Typeflag {
	case tar.TypeDir:
		e.mode |= hdr.Mode & modeSticky
		return e, nil
	case tar.TypeReg:
		e.size = hdr.Size
	case tar.TypeSymlink:
		switch t := hdr.Linkname; {
		case t == "":
			return entry{}, refuse(p, "symlink with an empty target")
		case len(t) > maxLinkBytes:
			return entry{}, refuse(p, "symlink target is longer than %d bytes", maxLinkBytes)
		case strings.IndexByte(t, 0) >= 0:
			return entry{}, refuse(p, "symlink target contains a NUL byte")
		case !utf8.ValidString(t):
			return entry{}, refuse(p, "symlink target is not valid UTF-8")
		}
		e.link = hdr.Linkname
	case tar.TypeLink:
		target, reason := cleanPath(hdr.Linkname)
		if reason != "" {
			return entry{}, refuse(p, "hardlink target %s: %s", printable(hdr.Linkname), reason)
		}
		if target == "" {
			return entry{}, refuse(p, "hardlink to the root directory")
		}
		e.link = target
	case tar.TypeChar:
		return entry{}, refuse(p, "character device %s", onlyFiles)
	case tar.TypeBlock:
		return entry{}, refuse(p, "block device %s", onlyFiles)
	case tar.TypeFifo:
		return entry{}, refuse(p, "fifo %s", onlyFiles)
	default:
		return entry{}, refuse(p, "unsupported entry type %q %s", hdr.Typeflag, onlyFiles)
	}
	if hdr.Mode&(modeSetuid|modeSetgid) != 0 {
		return entry{}, refuse(p, setuidReason)
	}
	return e, nil
}

// cleanPath returns name as a root keeps it, "" for the root itself, or
// the reason it cannot be kept.
func cleanPath(name string) (p, reason string) {
	switch {
	case strings.IndexByte(name, 0) >= 0:
		return "", "path contains a NUL byte"
	case !utf8.ValidString(name):
		return "", "path is not valid UTF-8"
	}
	p = path.Clean(name)
	if p == ".." || strings.HasPrefix(p, "../") {
		return "", leavesRoot
	}
	// path.Clean has already folded any ".." that follows a leading "/".
	p = strings.TrimPrefix(p, "/")
	if p == "." || p == "" {
		return "", ""
	}
	if len(p) > maxPathBytes {
		return "", "path is longer than 4096 bytes"
	}
	for name := range strings.SplitSeq(p, "/") {
		if len(name) > maxNameBytes {
			return "", "a name in the path is longer than 255 bytes"
		}
	}
	return p, ""
}

func clampTime(t time.Time) time.Time {
	return time.Unix(min(max(t.Unix(), 0), maxUstarTime), 0)
}

// header is the normalized tar header of e.
func (e entry) header() *tar.Header {
	h := &tar.Header{Typeflag: e.typ, Name: e.path, Mode: e.mode, ModTime: e.mtime}
	switch e.typ {
	case tar.TypeDir:
		h.Name += "/"
	case tar.TypeReg:
		h.Size = e.size
	case tar.TypeSymlink, tar.TypeLink:
		h.Linkname = e.link
	}
	return h
}

// fileMode is the mode Extract gives e.
func (e entry) fileMode() fs.FileMode {
	m := fs.FileMode(e.mode & modePerm)
	if e.mode&modeSticky != 0 {
		m |= fs.ModeSticky
	}
	return m
}

// ancestors lists the directories above p, outermost first.
func ancestors(p string) []string {
	var dirs []string
	for i := range len(p) {
		if p[i] == '/' {
			dirs = append(dirs, p[:i])
		}
	}
	return dirs
}
