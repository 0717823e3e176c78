// Package fsstore is the local-directory implementation of store.Store, the
// default of conch dev.
//
// Key segments are escaped so that every name a key can hold is safe on
// disk and so that no name can collide with the store's own files: a segment that leads
// to more keys is the directory "d.<name>", a segment that ends a key is the
// file "f.<name>", and a directory marker is the file "!" inside its
// directory. A segment too long for its prefix to fit Linux's 255-byte
// NAME_MAX keeps its name as it is, in the directory "+d" (leading to more
// keys) or "+f" (ending a key) of its parent, so that every segment S3 can
// hold, up to 255 bytes, is stored. Each object file starts with a fixed-size header holding its
// metadata, so a rename makes content and metadata visible together. The
// store never creates, follows or serves symbolic links or special files.
//
// A Put returns once its object survives a crash: the file is synced
// before its rename, each directory created on its way is synced into
// its parent, and the directory it is renamed into is synced after. A
// sync that fails fails the Put; when it is that last one, the object is
// in place but may not survive a crash.
package fsstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/conch-sh/conch/services/internal/store"
)

const (
	headerSize = 4096
	magic      = "CONCHOBJ"
	markerName = "!"
	// nameMax is Linux's NAME_MAX, the longest key segment stored.
	nameMax = 255
	// longDirs and longFiles hold the segments too long for a "d." or
	// "f." prefix; neither can be the name of a prefixed segment.
	longDirs  = "+d"
	longFiles = "+f"
)

// segment returns the path elements of one key segment: a directory's
// (leading to more keys) or a file's.
func segment(seg string, dir bool) []string {
	prefix, long := "f.", longFiles
	if dir {
		prefix, long = "d.", longDirs
	}
	if len(prefix)+len(seg) > nameMax {
		return []string{long, seg}
	}
	return []string{prefix + seg}
}

// Store keeps objects in a directory.
type Store struct {
	root string // objects
	tmp  string // uploads in progress
	// syncDir makes a directory's entries durable.
	syncDir func(dir string) error
}

var _ store.Store = (*Store)(nil)

// New returns a store under dir, creating it.
func New(dir string) (*Store, error) {
	return newStore(dir, syncDir)
}

func newStore(dir string, sync func(string) error) (*Store, error) {
	if dir == "" {
		return nil, errors.New("fsstore: empty directory")
	}
	s := &Store{root: filepath.Join(dir, "objects"), tmp: filepath.Join(dir, "tmp"), syncDir: sync}
	for _, d := range []string{s.root, s.tmp} {
		if err := s.mkdirAll(d); err != nil {
			return nil, fmt.Errorf("fsstore: %w", err)
		}
	}
	// Uploads interrupted by a crash are never visible; drop them.
	entries, err := os.ReadDir(s.tmp)
	if err != nil {
		return nil, fmt.Errorf("fsstore: %w", err)
	}
	for _, e := range entries {
		_ = os.Remove(filepath.Join(s.tmp, e.Name()))
	}
	return s, nil
}

type header struct {
	Size   int64  `json:"size"`
	Mode   uint32 `json:"mode"`
	Mtime  int64  `json:"mtime"`
	SHA256 string `json:"sha256,omitempty"`
	Link   string `json:"link,omitempty"`
}

// path returns the file of key.
func (s *Store) path(key string) (string, error) {
	if err := store.CheckKey(key); err != nil {
		return "", err
	}
	dir, isDir := strings.CutSuffix(key, "/")
	segs := strings.Split(dir, "/")
	parts := make([]string, 0, len(segs)+2)
	parts = append(parts, s.root)
	for i, seg := range segs {
		if len(seg) > nameMax {
			return "", fmt.Errorf("fsstore: key %q: segment longer than %d bytes", key, nameMax)
		}
		parts = append(parts, segment(seg, isDir || i < len(segs)-1)...)
	}
	if isDir {
		parts = append(parts, markerName)
	}
	return filepath.Join(parts...), nil
}

// dirOf returns the directory holding the keys below prefix.
func (s *Store) dirOf(prefix string) string {
	p := s.root
	for seg := range strings.SplitSeq(strings.TrimSuffix(prefix, "/"), "/") {
		if seg != "" {
			p = filepath.Join(append([]string{p}, segment(seg, true)...)...)
		}
	}
	return p
}

// Put stores r under key via a temporary file and a rename.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, o store.PutOptions) (store.Info, error) {
	dst, err := s.path(key)
	if err != nil {
		return store.Info{}, err
	}
	if r == nil {
		r = bytes.NewReader(nil)
	}
	empty := o.LinkTarget != "" || strings.HasSuffix(key, "/")
	if empty {
		r = io.LimitReader(r, 1) // must be empty; checked below
	}
	tmp, n, sum, err := s.stage(ctx, key, r, o)
	if err != nil {
		return store.Info{}, err
	}
	if empty {
		if n != 0 {
			_ = os.Remove(tmp)
			return store.Info{}, fmt.Errorf("fsstore: put %s: links and directories have no content: %w", key, store.ErrContentMismatch)
		}
		sum = ""
	}
	return s.publish(key, dst, tmp, header{Size: n, Mode: o.Mode, Mtime: o.ModTime.UnixNano(), SHA256: sum, Link: o.LinkTarget})
}

// Stage writes r to a temporary file for key.
func (s *Store) Stage(ctx context.Context, key string, r io.Reader, o store.PutOptions) (store.Staged, error) {
	if _, err := s.path(key); err != nil {
		return store.Staged{}, err
	}
	if strings.HasSuffix(key, "/") || o.LinkTarget != "" {
		return store.Staged{}, fmt.Errorf("fsstore: stage %s: only files have content", key)
	}
	tmp, n, sum, err := s.stage(ctx, key, r, o)
	if err != nil {
		return store.Staged{}, err
	}
	return store.Staged{Key: key, ID: filepath.Base(tmp), Size: n, SHA256: sum}, nil
}

// Publish renames a staged file into place.
func (s *Store) Publish(_ context.Context, st store.Staged, o store.PutOptions) (store.Info, error) {
	dst, err := s.path(st.Key)
	if err != nil {
		return store.Info{}, err
	}
	tmp, err := s.tmpPath(st.ID)
	if err != nil {
		return store.Info{}, err
	}
	return s.publish(st.Key, dst, tmp, header{Size: st.Size, Mode: o.Mode, Mtime: o.ModTime.UnixNano(), SHA256: st.SHA256})
}

// Collect removes staged files older than olderThan; a published one has
// been renamed away.
func (s *Store) Collect(_ context.Context, olderThan time.Duration) (int, error) {
	entries, err := os.ReadDir(s.tmp)
	if err != nil {
		return 0, fmt.Errorf("fsstore: collect: %w", err)
	}
	cutoff, n := time.Now().Add(-olderThan), 0
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || !info.ModTime().Before(cutoff) {
			continue
		}
		if err := os.Remove(filepath.Join(s.tmp, e.Name())); err == nil {
			n++
		}
	}
	return n, nil
}

// Discard removes a staged file.
func (s *Store) Discard(_ context.Context, st store.Staged) error {
	tmp, err := s.tmpPath(st.ID)
	if err != nil {
		return nil
	}
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("fsstore: discard %s: %w", st.Key, err)
	}
	return nil
}

func (s *Store) tmpPath(id string) (string, error) {
	if !strings.HasPrefix(id, "put-") || filepath.Base(id) != id || strings.ContainsAny(id, "/\\\x00") {
		return "", fmt.Errorf("fsstore: %q is not a staged upload", id)
	}
	return filepath.Join(s.tmp, id), nil
}

// stage writes r after the header slot of a new temporary file and checks
// its size and hash against o.
func (s *Store) stage(ctx context.Context, key string, r io.Reader, o store.PutOptions) (tmp string, n int64, sum string, err error) {
	f, err := os.CreateTemp(s.tmp, "put-*")
	if err != nil {
		return "", 0, "", fmt.Errorf("fsstore: put %s: %w", key, err)
	}
	// The file's name is kept apart from the result tmp, which every
	// failing return clears: removing tmp would then remove nothing and
	// leave the whole upload behind.
	name := f.Name()
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("fsstore: put %s: %w", key, cerr)
		}
		if err != nil {
			_ = os.Remove(name)
		}
	}()
	if _, err := f.Seek(headerSize, io.SeekStart); err != nil {
		return "", 0, "", fmt.Errorf("fsstore: put %s: %w", key, err)
	}
	h := sha256.New()
	n, err = io.Copy(io.MultiWriter(f, h), &ctxReader{ctx: ctx, r: r})
	if err != nil {
		return "", 0, "", fmt.Errorf("fsstore: put %s: %w", key, err)
	}
	sum = hex.EncodeToString(h.Sum(nil))
	if o.Size >= 0 && o.Size != n {
		return "", 0, "", fmt.Errorf("fsstore: put %s: got %d bytes, want %d: %w", key, n, o.Size, store.ErrContentMismatch)
	}
	if o.SHA256 != "" && !strings.EqualFold(o.SHA256, sum) {
		return "", 0, "", fmt.Errorf("fsstore: put %s: SHA-256 %s, want %s: %w", key, sum, o.SHA256, store.ErrContentMismatch)
	}
	return name, n, sum, nil
}

// publish writes the header into a staged file, syncs it and renames it
// to dst.
func (s *Store) publish(key, dst, tmp string, hd header) (store.Info, error) {
	fail := func(err error) (store.Info, error) {
		_ = os.Remove(tmp)
		return store.Info{}, fmt.Errorf("fsstore: put %s: %w", key, err)
	}
	b, err := encodeHeader(hd)
	if err != nil {
		return fail(err)
	}
	f, err := os.OpenFile(tmp, os.O_WRONLY, 0)
	if err != nil {
		return store.Info{}, fmt.Errorf("fsstore: publish %s: %w", key, err)
	}
	if _, err := f.WriteAt(b, 0); err != nil {
		_ = f.Close()
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fail(err)
	}
	if err := f.Close(); err != nil {
		return fail(err)
	}
	// A concurrent Delete may remove an emptied parent between mkdirAll
	// and Rename; retry a few times.
	dir := filepath.Dir(dst)
	for attempt := 0; ; attempt++ {
		if err = s.mkdirAll(dir); err == nil {
			if err = os.Rename(tmp, dst); err == nil {
				break
			}
		}
		if attempt == 3 || !errors.Is(err, fs.ErrNotExist) {
			return fail(err)
		}
	}
	// Synced, the rename survives a crash. A directory gone already went
	// with the object, removed by a Delete that came after this Put.
	if err := s.syncDir(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return store.Info{}, fmt.Errorf("fsstore: put %s: %w", key, err)
	}
	return infoOf(key, hd), nil
}

func encodeHeader(h header) ([]byte, error) {
	j, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	if len(j) > headerSize-len(magic)-4 {
		return nil, errors.New("metadata too large (link target too long?)")
	}
	b := make([]byte, headerSize)
	copy(b, magic)
	binary.BigEndian.PutUint32(b[len(magic):], uint32(len(j)))
	copy(b[len(magic)+4:], j)
	return b, nil
}

func readHeader(f *os.File) (header, error) {
	b := make([]byte, headerSize)
	if _, err := io.ReadFull(f, b); err != nil {
		return header{}, fmt.Errorf("read header: %w", err)
	}
	if string(b[:len(magic)]) != magic {
		return header{}, errors.New("not an object file")
	}
	n := binary.BigEndian.Uint32(b[len(magic):])
	if int(n) > headerSize-len(magic)-4 {
		return header{}, errors.New("corrupt header")
	}
	var h header
	if err := json.Unmarshal(b[len(magic)+4:len(magic)+4+int(n)], &h); err != nil {
		return header{}, fmt.Errorf("corrupt header: %w", err)
	}
	return h, nil
}

// open opens an object file, refusing anything but a regular file: a FIFO
// or a link planted in the store is never opened for reading or followed.
func open(p string) (*os.File, header, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return nil, header{}, store.ErrNotFound
		}
		return nil, header{}, err
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, header{}, err
	}
	if !st.Mode().IsRegular() {
		_ = f.Close()
		return nil, header{}, fmt.Errorf("not a regular file (%v)", st.Mode().Type())
	}
	h, err := readHeader(f)
	if err != nil {
		_ = f.Close()
		return nil, header{}, err
	}
	return f, h, nil
}

type objectReader struct {
	f *os.File
	io.Reader
}

func (r *objectReader) Close() error { return r.f.Close() }

// Get opens key's content.
func (s *Store) Get(_ context.Context, key string) (io.ReadCloser, store.Info, error) {
	p, err := s.path(key)
	if err != nil {
		return nil, store.Info{}, err
	}
	f, h, err := open(p)
	if err != nil {
		return nil, store.Info{}, fmt.Errorf("fsstore: get %s: %w", key, err)
	}
	return &objectReader{f: f, Reader: io.LimitReader(f, h.Size)}, infoOf(key, h), nil
}

// Stat returns key's metadata.
func (s *Store) Stat(_ context.Context, key string) (store.Info, error) {
	p, err := s.path(key)
	if err != nil {
		return store.Info{}, err
	}
	f, h, err := open(p)
	if err != nil {
		return store.Info{}, fmt.Errorf("fsstore: stat %s: %w", key, err)
	}
	_ = f.Close()
	return infoOf(key, h), nil
}

// List lists the keys below prefix, sorted by key.
func (s *Store) List(ctx context.Context, prefix string, recursive bool) iter.Seq2[store.Info, error] {
	return func(yield func(store.Info, error) bool) {
		if err := store.CheckPrefix(prefix); err != nil {
			yield(store.Info{}, err)
			return
		}
		var infos []store.Info
		var walk func(dir, keyPrefix string) error
		file := func(p, key string) error {
			info, err := s.statFile(p, key)
			if err != nil {
				return err
			}
			infos = append(infos, info)
			return nil
		}
		sub := func(p, key string) error {
			if !recursive {
				infos = append(infos, store.Info{Key: key, Prefix: true})
				return nil
			}
			return walk(p, key)
		}
		walk = func(dir, keyPrefix string) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			entries, err := os.ReadDir(dir)
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
					return nil
				}
				return err
			}
			for _, e := range entries {
				name := e.Name()
				switch {
				case name == markerName:
					if keyPrefix != prefix {
						info, err := s.statFile(filepath.Join(dir, name), keyPrefix)
						if err != nil {
							return err
						}
						infos = append(infos, info)
					}
				case strings.HasPrefix(name, "f.") && e.Type().IsRegular():
					if err := file(filepath.Join(dir, name), keyPrefix+name[2:]); err != nil {
						return err
					}
				case strings.HasPrefix(name, "d.") && e.IsDir():
					if err := sub(filepath.Join(dir, name), keyPrefix+name[2:]+"/"); err != nil {
						return err
					}
				case (name == longFiles || name == longDirs) && e.IsDir():
					long, err := os.ReadDir(filepath.Join(dir, name))
					if err != nil {
						return err
					}
					for _, l := range long {
						p, seg := filepath.Join(dir, name, l.Name()), l.Name()
						switch {
						case len(seg)+2 <= nameMax:
							// Not a name this store puts here.
						case name == longFiles && l.Type().IsRegular():
							err = file(p, keyPrefix+seg)
						case name == longDirs && l.IsDir():
							err = sub(p, keyPrefix+seg+"/")
						}
						if err != nil {
							return err
						}
					}
				}
				// Anything else (a link, a FIFO, a stray file) is not an
				// object of this store and is skipped.
			}
			return nil
		}
		if err := walk(s.dirOf(prefix), prefix); err != nil {
			yield(store.Info{}, fmt.Errorf("fsstore: list %s: %w", prefix, err))
			return
		}
		slices.SortFunc(infos, func(a, b store.Info) int { return strings.Compare(a.Key, b.Key) })
		for _, info := range infos {
			if !yield(info, nil) {
				return
			}
		}
	}
}

func (s *Store) statFile(p, key string) (store.Info, error) {
	f, h, err := open(p)
	if err != nil {
		return store.Info{}, fmt.Errorf("%s: %w", key, err)
	}
	_ = f.Close()
	return infoOf(key, h), nil
}

// Delete deletes keys and then any directory they leave empty.
func (s *Store) Delete(ctx context.Context, keys []string) error {
	dirs := map[string]bool{}
	for _, k := range keys {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("fsstore: delete: %w", err)
		}
		p, err := s.path(k)
		if err != nil {
			return err
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
			return fmt.Errorf("fsstore: delete %s: %w", k, err)
		}
		dirs[filepath.Dir(p)] = true
	}
	// Remove emptied directories, deepest first, up to the root: in S3 a
	// prefix with no keys does not exist.
	sorted := make([]string, 0, len(dirs))
	for d := range dirs {
		for ; d != s.root && strings.HasPrefix(d, s.root); d = filepath.Dir(d) {
			sorted = append(sorted, d)
		}
	}
	slices.SortFunc(sorted, func(a, b string) int {
		if len(a) != len(b) {
			return len(b) - len(a)
		}
		return strings.Compare(a, b)
	})
	for _, d := range slices.Compact(sorted) {
		_ = os.Remove(d) // fails, as wanted, when not empty
	}
	return nil
}

func infoOf(key string, h header) store.Info {
	return store.Info{Key: key, Size: h.Size, Mode: h.Mode, ModTime: time.Unix(0, h.Mtime), SHA256: h.SHA256, LinkTarget: h.Link}
}

// mkdirAll creates dir and its missing parents, syncing each parent once
// a directory is created in it, so that a crash loses neither the new
// directories nor what is later renamed into them.
func (s *Store) mkdirAll(dir string) error {
	var missing []string
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err == nil {
			if !fi.IsDir() {
				return &fs.PathError{Op: "mkdir", Path: d, Err: syscall.ENOTDIR}
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		missing = append(missing, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	for _, d := range slices.Backward(missing) {
		// Created by a concurrent Put, it may not be synced yet: sync
		// its parent all the same.
		if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		if err := s.syncDir(filepath.Dir(d)); err != nil {
			return err
		}
	}
	return nil
}

// syncDir syncs a directory: its entries, created or renamed into it,
// survive a crash once it returns nil.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory: %w", err)
	}
	if err := d.Sync(); err != nil {
		_ = d.Close()
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	if err := d.Close(); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
