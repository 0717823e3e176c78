package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/conch-sh/conch/services/executor/sandbox/wire"
	"golang.org/x/sys/unix"
)

// ImageRoot is a template's root, which a sandbox starts from instead of
// the runtime's: every top-level directory of it is seen read-only, its
// /etc is a copy with the sandbox's own identity files, and only
// Spec.Workdir is writable besides the workspace and /tmp.
type ImageRoot struct {
	// Dir is the unpacked root on the host. Its files are the
	// template's: nothing in it is followed on the host (a symlink in it
	// means what it means inside the sandbox).
	Dir string
}

// hiddenTop are the top-level directories of an image a sandbox never
// sees: those the sandbox mounts itself, and /home, which holds the
// workspace.
var hiddenTop = []string{"proc", "dev", "sys", "tmp", "run", "etc", "home"}

// OwnWorkdir reports whether a workdir needs a writable layer of its own:
// one outside the workspace and /tmp, which are writable already.
func OwnWorkdir(w string) bool {
	for _, d := range []string{wire.WorkspaceDir, "/tmp"} {
		if w == d || strings.HasPrefix(w, d+"/") {
			return false
		}
	}
	return w != ""
}

// imageEtcs are the /etc copies of image roots, one per root, made on
// first use: an image's /etc does not change.
type imageEtcs struct {
	mu    sync.Mutex
	state string
	dirs  map[string]string
	n     int
}

// get returns the /etc copy of the image root dir.
func (e *imageEtcs) get(dir string) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if d, ok := e.dirs[dir]; ok {
		return d, nil
	}
	if e.dirs == nil {
		e.dirs = map[string]string{}
	}
	e.n++
	d := filepath.Join(e.state, fmt.Sprintf("image-etc.%d", e.n))
	if err := copyImageEtc(dir, d); err != nil {
		_ = os.RemoveAll(d)
		return "", err
	}
	e.dirs[dir] = d
	return d, nil
}

// forget drops the copy of a root that is gone from the host.
func (e *imageEtcs) forget(dir string) {
	e.mu.Lock()
	d, ok := e.dirs[dir]
	delete(e.dirs, dir)
	e.mu.Unlock()
	if ok {
		_ = os.RemoveAll(d)
	}
}

// ForgetImage drops what the runtime keeps of an image root the caller
// removed; sandboxes running from it keep their /etc.
func (r *Runtime) ForgetImage(dir string) { r.imageEtc.forget(dir) }

// copyImageEtc copies an image's whole /etc, symlinks as symlinks (the
// host follows none), with the sandbox's identity files over it.
func copyImageEtc(root, dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("sandbox: image /etc copy: %w", err)
	}
	budget := int64(maxEtcBytes)
	src := filepath.Join(root, "etc")
	if fi, err := os.Lstat(src); err == nil && fi.IsDir() {
		entries, err := os.ReadDir(src)
		if err != nil {
			return fmt.Errorf("sandbox: image /etc copy: %w", err)
		}
		for _, d := range entries {
			if _, own := identity[d.Name()]; own {
				continue
			}
			info, err := d.Info() // lstat: a symlink stays one
			if err != nil {
				return fmt.Errorf("sandbox: image /etc copy: %w", err)
			}
			if err := copyEntry(filepath.Join(src, d.Name()), filepath.Join(dir, d.Name()), info, &budget); err != nil {
				return err
			}
		}
	}
	for name, body := range identity {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			return fmt.Errorf("sandbox: image /etc copy: %w", err)
		}
	}
	return nil
}

// imageMounts is the system part of the mount table of a sandbox on an
// image root: each of its top-level directories read-only (a top-level
// symlink as a symlink), and its /etc copy.
func imageMounts(img *ImageRoot, etc string) ([]mount, error) {
	entries, err := os.ReadDir(img.Dir)
	if err != nil {
		return nil, fmt.Errorf("sandbox: image root: %w", err)
	}
	var ms []mount
	for _, d := range entries {
		name := d.Name()
		if slices.Contains(hiddenTop, name) {
			continue
		}
		src := filepath.Join(img.Dir, name)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(src)
			if err != nil {
				return nil, fmt.Errorf("sandbox: image root: %w", err)
			}
			ms = append(ms, mount{op: "--symlink", src: target, dst: "/" + name})
		case d.IsDir():
			ms = append(ms, mount{op: "--ro-bind", src: src, dst: "/" + name})
		}
	}
	return append(ms, mount{op: "--ro-bind", src: etc, dst: "/etc"}), nil
}

// layerDir is where, in a sandbox's state, its workdir's writable layer
// is: a tmpfs (a subvolume on storage) holding the overlay's upper and
// work directories, and the overlay itself.
const (
	layerDir   = "layer"
	workdirDir = "workdir"
)

// makeLayer mounts the writable layer of s's workdir: a tmpfs (a
// subvolume on storage) of the workspace's size, and over the image's
// copy of the workdir (or an empty directory) an overlay whose changes go
// to it, its files the sandbox user's.
func (s *Sandbox) makeLayer(img *ImageRoot, workdir string, cleanups *[]func()) error {
	var layer string
	if s.vol != "" {
		// On storage, a subvolume (that makeVolumes' cleanup removes);
		// a copy's is a snapshot of its source's layer, whose files the
		// walk below makes its own.
		layer = filepath.Join(s.vol, layerDir)
		if err := volume(layer, fromPath(s.spec.From, func(f *Sandbox) string { return filepath.Join(f.vol, layerDir) }), 0, 0, s.spec.Limits.WorkspaceBytes); err != nil {
			return err
		}
		if err := os.Chmod(layer, 0o700); err != nil {
			return fmt.Errorf("sandbox: workdir layer: %w", err)
		}
	} else {
		layer = filepath.Join(s.dir, layerDir)
		if err := os.Mkdir(layer, 0o700); err != nil {
			return fmt.Errorf("sandbox: workdir layer: %w", err)
		}
		opts := fmt.Sprintf("size=%d,nr_inodes=%d,mode=0700", s.spec.Limits.WorkspaceBytes, s.spec.Limits.WorkspaceFiles)
		if err := unix.Mount("tmpfs", layer, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
			return fmt.Errorf("sandbox: mount workdir layer: %w", err)
		}
		*cleanups = append(*cleanups, func() { _ = unix.Unmount(layer, unix.MNT_DETACH) })
		s.hostMounts = append(s.hostMounts, layer)
	}
	for _, d := range []string{"upper", "work", "empty"} {
		if err := os.Mkdir(filepath.Join(layer, d), 0o755); err != nil && !(s.spec.From != nil && errors.Is(err, fs.ErrExist)) {
			return fmt.Errorf("sandbox: workdir layer: %w", err)
		}
	}
	lower, err := imageDir(img.Dir, workdir)
	if err != nil {
		return err
	}
	if lower == "" {
		lower = filepath.Join(layer, "empty")
	}
	merged := filepath.Join(s.dir, workdirDir)
	if err := os.Mkdir(merged, 0o700); err != nil {
		return fmt.Errorf("sandbox: workdir: %w", err)
	}
	// metacopy: giving the workdir's files to the sandbox's user below
	// copies up their metadata only, not their bytes. Both layers are the
	// host's (the upper is written only through the overlay, which no
	// sandbox can give trusted.* attributes), which is what metacopy
	// needs to be safe. A kernel without it copies the files whole.
	data := "lowerdir=" + lower + ",upperdir=" + filepath.Join(layer, "upper") + ",workdir=" + filepath.Join(layer, "work")
	err = unix.Mount("overlay", merged, "overlay", unix.MS_NOSUID|unix.MS_NODEV, data+",metacopy=on")
	if errors.Is(err, unix.EINVAL) {
		err = unix.Mount("overlay", merged, "overlay", unix.MS_NOSUID|unix.MS_NODEV, data)
	}
	if err != nil {
		return fmt.Errorf("sandbox: mount workdir overlay: %w", err)
	}
	*cleanups = append(*cleanups, func() { _ = unix.Unmount(merged, unix.MNT_DETACH) })
	s.hostMounts = append(s.hostMounts, merged)
	// The workdir and what the image put in it become the sandbox
	// user's, as a container's working directory is its user's. Links
	// are not followed.
	err = filepath.WalkDir(merged, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, s.uid, s.uid)
	})
	if err != nil {
		return fmt.Errorf("sandbox: workdir %s: %w", workdir, err)
	}
	return nil
}

// imageDir is the host path of the directory rel (absolute, clean) in the
// image root, or "" when the image has none there. No component of it
// may be a symlink: resolving one on the host could leave the root.
func imageDir(root, rel string) (string, error) {
	p := root
	for _, c := range strings.Split(strings.TrimPrefix(rel, "/"), "/") {
		p = filepath.Join(p, c)
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			return "", nil
		}
		if err != nil {
			return "", fmt.Errorf("sandbox: workdir: %w", err)
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return "", fmt.Errorf("sandbox: the template's workdir %s passes through a symlink of its image (%s); name the directory it points to", rel, strings.TrimPrefix(p, root))
		}
		if !fi.IsDir() {
			return "", fmt.Errorf("sandbox: the template's workdir %s is not a directory in its image", rel)
		}
	}
	return p, nil
}

// unmountHost undoes the host mounts of a sandbox's state, last first.
func (s *Sandbox) unmountHost() error {
	var errs []error
	for i := len(s.hostMounts) - 1; i >= 0; i-- {
		if err := unix.Unmount(s.hostMounts[i], unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("sandbox: unmount %s: %w", filepath.Base(s.hostMounts[i]), err))
		}
	}
	return errors.Join(errs...)
}
