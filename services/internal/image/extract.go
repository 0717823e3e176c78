package image

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
)

// Extract unpacks a root tar, as Flatten writes it, into dir, which must
// exist and be empty. It judges every entry again by the package's rules,
// since a tar from the store is trusted no more than the image it came from,
// and asks besides what Flatten guarantees: each path once, and each one's
// parent directory earlier in the tar. Everything is written through an
// os.Root on dir and no entry's parent is ever a symlink, so nothing lands
// outside dir. Files belong to the caller, whatever uid the tar names, and
// keep their mode and mtime; a symlink keeps its target unresolved, and the
// time it was made, as os.Root cannot set a link's own times. On error dir
// holds part of the root and the caller removes it.
func Extract(ctx context.Context, r io.Reader, dir string, lim Limits) error {
	if err := lim.validate(); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("image: extract: %w", err)
	}
	defer root.Close()
	if err := checkEmpty(root); err != nil {
		return fmt.Errorf("image: extract into %s: %w", dir, err)
	}
	x := extractor{root: root, tally: tally{lim: lim}, kinds: map[string]byte{}}
	tr := tar.NewReader(r)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("image: read root: %w", err)
		}
		if err := x.add(hdr, tr); err != nil {
			return err
		}
	}
	return x.finishDirs()
}

func checkEmpty(root *os.Root) error {
	d, err := root.Open(".")
	if err != nil {
		return err
	}
	defer d.Close()
	names, err := d.Readdirnames(1)
	if len(names) > 0 {
		return errors.New("directory is not empty")
	}
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

type extractor struct {
	root  *os.Root
	tally tally
	kinds map[string]byte // as flattener.written
	// dirs get their mode and mtime last, innermost first, so a read-only
	// directory can still be filled and its children do not move its mtime.
	dirs []entry
}

func (x *extractor) add(hdr *tar.Header, content io.Reader) error {
	e, err := check(hdr)
	if err != nil || e.path == "" {
		return err
	}
	if _, ok := x.kinds[e.path]; ok {
		return refuse(e.path, "appears twice in the root")
	}
	if parent := path.Dir(e.path); parent != "." && x.kinds[parent] != tar.TypeDir {
		return refuse(e.path, "parent %s is not a directory earlier in the root", printable(parent))
	}
	if e.typ == tar.TypeLink && x.kinds[e.link] != tar.TypeReg {
		return refuse(e.path, "hardlink to %s, which is not a regular file earlier in the root", printable(e.link))
	}
	if err := x.tally.add(e); err != nil {
		return err
	}
	switch e.typ {
	case tar.TypeDir:
		err = x.root.Mkdir(e.path, 0o700)
		x.dirs = append(x.dirs, e)
	case tar.TypeReg:
		err = x.writeFile(e, content)
	case tar.TypeSymlink:
		err = x.root.Symlink(e.link, e.path)
	case tar.TypeLink:
		err = x.root.Link(e.link, e.path)
	}
	if err != nil {
		return fmt.Errorf("image: extract %s: %w", e.path, err)
	}
	t := e.typ
	if t == tar.TypeLink {
		t = tar.TypeReg
	}
	x.kinds[e.path] = t
	return nil
}

func (x *extractor) writeFile(e entry, content io.Reader) error {
	f, err := x.root.OpenFile(e.path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.CopyN(f, content, e.size)
	if err == nil {
		err = f.Chmod(e.fileMode())
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return x.root.Chtimes(e.path, e.mtime, e.mtime)
}

func (x *extractor) finishDirs() error {
	for i := len(x.dirs) - 1; i >= 0; i-- {
		d := x.dirs[i]
		if err := x.root.Chmod(d.path, d.fileMode()); err != nil {
			return fmt.Errorf("image: extract %s: %w", d.path, err)
		}
		if err := x.root.Chtimes(d.path, d.mtime, d.mtime); err != nil {
			return fmt.Errorf("image: extract %s: %w", d.path, err)
		}
	}
	return nil
}
