package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// etcFiles are the host /etc entries programs need; nothing else of /etc
// (never shadow, ssh keys, or service configuration) is visible.
var etcFiles = []string{
	"ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime", "timezone",
	"nsswitch.conf", "protocols", "services", "mime.types", "os-release", "debian_version",
	"ssl", "ca-certificates", "ca-certificates.conf", "terminfo", "inputrc", "magic", "mailcap",
	"python3", "perl", "gai.conf", "host.conf", "environment.d",
}

// identity is the sandbox's own /etc/passwd, group, hosts and hostname,
// the same in every sandbox.
var identity = map[string]string{
	"passwd":   "root:x:0:0:root:/root:/usr/sbin/nologin\nuser:x:1000:1000:sandbox user:/home/workspace:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
	"group":    "root:x:0:\nuser:x:1000:\nnogroup:x:65534:\n",
	"hosts":    "127.0.0.1\tlocalhost sandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n",
	"hostname": "sandbox\n",
}

// maxEtcBytes bounds a copy of /etc, which lives in the state dir's
// memory.
const maxEtcBytes = 64 << 20

// etcRefresh is how often the root filesystem's /etc is checked for
// changes.
const etcRefresh = 30 * time.Second

// etcCopy is the sandboxes' /etc: a copy of the chosen entries of the root
// filesystem's /etc and the identity files, which each sandbox binds in
// one mount. Bubblewrap pays for every bind it makes (it reads the whole
// mount table for each), and thirty binds, one per entry, were a third of a
// sandbox's start. The copy is remade when the root filesystem's entries
// change; a sandbox keeps the copy it started with.
type etcCopy struct {
	root  string // the root filesystem
	state string // where copies are made

	mu  sync.Mutex
	dir string // the current copy
	sum string // fingerprint of the entries it was made from
	gen int
}

// newEtcCopy makes the first copy.
func newEtcCopy(root, state string) (*etcCopy, error) {
	e := &etcCopy{root: root, state: state}
	if _, err := e.refresh(); err != nil {
		return nil, err
	}
	return e, nil
}

// current is the copy a new sandbox binds.
func (e *etcCopy) current() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.dir
}

// refresh makes a new copy if the entries changed since the last one, and
// reports whether it did. Earlier copies stay: sandboxes started with them
// still see them. Only newEtcCopy and then watch call it, one at a time;
// the lock is for current, which never waits for a copy being made.
func (e *etcCopy) refresh() (bool, error) {
	sum, err := etcFingerprint(e.root)
	if err != nil {
		return false, err
	}
	e.mu.Lock()
	same, gen := sum == e.sum, e.gen+1
	e.mu.Unlock()
	if same {
		return false, nil
	}
	dir := filepath.Join(e.state, "etc."+strconv.Itoa(gen))
	if err := copyEtc(e.root, dir); err != nil {
		_ = os.RemoveAll(dir)
		return false, err
	}
	e.mu.Lock()
	e.dir, e.sum, e.gen = dir, sum, gen
	e.mu.Unlock()
	return true, nil
}

// watch refreshes the copy every etcRefresh until stop closes.
func (e *etcCopy) watch(stop <-chan struct{}, onErr func(error)) {
	t := time.NewTicker(etcRefresh)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			if _, err := e.refresh(); err != nil {
				onErr(err)
			}
		}
	}
}

// copyEtc copies the entries of root/etc named in etcFiles into dir, with
// the identity files. An entry itself is followed if it is a symlink, as a
// bind mount of it would be; what a directory holds is copied as it is,
// symlinks as symlinks. Other kinds of files (fifos, sockets, devices) are
// left out.
func copyEtc(root, dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("sandbox: /etc copy: %w", err)
	}
	budget := int64(maxEtcBytes)
	for _, name := range etcFiles {
		src := filepath.Join(root, "etc", name)
		fi, err := os.Stat(src)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("sandbox: /etc copy: %w", err)
		}
		if err := copyEntry(src, filepath.Join(dir, name), fi, &budget); err != nil {
			return err
		}
	}
	for name, body := range identity {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			return fmt.Errorf("sandbox: /etc copy: %w", err)
		}
	}
	return nil
}

func copyEntry(src, dst string, fi fs.FileInfo, budget *int64) error {
	mode := fi.Mode()
	switch {
	case mode&fs.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return fmt.Errorf("sandbox: /etc copy: %w", err)
		}
		return os.Symlink(target, dst)
	case mode.IsDir():
		if err := os.Mkdir(dst, 0o700); err != nil {
			return fmt.Errorf("sandbox: /etc copy: %w", err)
		}
		entries, err := os.ReadDir(src)
		if err != nil {
			return fmt.Errorf("sandbox: /etc copy: %w", err)
		}
		for _, d := range entries {
			info, err := d.Info()
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return fmt.Errorf("sandbox: /etc copy: %w", err)
			}
			if err := copyEntry(filepath.Join(src, d.Name()), filepath.Join(dst, d.Name()), info, budget); err != nil {
				return err
			}
		}
		// The mode last, so that a directory closed to others is
		// filled first.
		return os.Chmod(dst, mode.Perm()|mode&fs.ModeSticky)
	case mode.IsRegular():
		if *budget -= fi.Size(); *budget < 0 {
			return fmt.Errorf("sandbox: /etc copy: the chosen entries of %s hold more than %d MiB", filepath.Dir(src), maxEtcBytes>>20)
		}
		in, err := os.Open(src)
		if err != nil {
			return fmt.Errorf("sandbox: /etc copy: %w", err)
		}
		defer in.Close()
		// No set-id bit: the state dir is nosuid anyway.
		out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode.Perm())
		if err != nil {
			return fmt.Errorf("sandbox: /etc copy: %w", err)
		}
		if _, err := io.Copy(out, io.LimitReader(in, fi.Size())); err != nil {
			out.Close()
			return fmt.Errorf("sandbox: /etc copy: %w", err)
		}
		if err := out.Close(); err != nil {
			return fmt.Errorf("sandbox: /etc copy: %w", err)
		}
		return os.Chmod(dst, mode.Perm()) // past the umask
	}
	return nil
}

// etcFingerprint sums what copyEtc would copy from root: each entry's
// path, kind, mode, size, modification and change times, and a symlink's
// target.
func etcFingerprint(root string) (string, error) {
	h := sha256.New()
	for _, name := range etcFiles {
		top := filepath.Join(root, "etc", name)
		fi, err := os.Stat(top)
		if errors.Is(err, fs.ErrNotExist) {
			fmt.Fprintf(h, "%s absent\n", name)
			continue
		}
		if err != nil {
			return "", fmt.Errorf("sandbox: /etc: %w", err)
		}
		sum := func(path string, fi fs.FileInfo) {
			fmt.Fprintf(h, "%s %v %d %d %d\n", path, fi.Mode(), fi.Size(), fi.ModTime().UnixNano(), changeTime(fi))
			if fi.Mode()&fs.ModeSymlink != 0 {
				t, _ := os.Readlink(path)
				fmt.Fprintf(h, "-> %s\n", t)
			}
		}
		sum(top, fi)
		if !fi.IsDir() {
			continue
		}
		// With a trailing slash, an entry that is a symlink to a
		// directory is walked, as copyEtc copies what it leads to.
		dir := top + string(filepath.Separator)
		err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || path == dir {
				return err
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			sum(path, info)
			return nil
		})
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("sandbox: /etc: %w", err)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// changeTime is a file's status change time, which a rewrite in place that
// keeps the size and modification time still moves.
func changeTime(fi fs.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ctim.Nano()
	}
	return 0
}
