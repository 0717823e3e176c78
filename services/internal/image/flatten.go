package image

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// Config is what a template takes from an image's config.
type Config struct {
	Env        []string
	WorkingDir string
	Entrypoint []string
	Cmd        []string
	User       string
}

// Root describes a root tar as Flatten wrote it.
type Root struct {
	Digest       string // "sha256:<hex>" of the tar's bytes
	Size         int64  // the tar's bytes
	ContentBytes int64  // content bytes of its regular files
	Files        int    // its entries
	Config       Config
}

// Flatten writes img's root filesystem to w as one normalized tar, by the
// rules in the package doc, and describes it. On error w holds a partial tar.
//
// The layers are read twice. mutate.Extract yields the uppermost layer
// first, so when a layer names a/b but not a, a's own entry from a lower
// layer only comes after a/b. A directory must be written before what is
// in it, and with its own mode, so a first pass learns every directory's
// entry and the second writes. A pulled image's layers are fetched twice
// too; a caller that minds can cache them (go-containerregistry's
// pkg/v1/cache).
func Flatten(ctx context.Context, img v1.Image, w io.Writer, lim Limits) (Root, error) {
	if err := lim.validate(); err != nil {
		return Root{}, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return Root{}, fmt.Errorf("image: read config: %w", err)
	}
	survey := newFlattener(io.Discard, lim, map[string]entry{})
	survey.learn = true
	if err := survey.walk(ctx, img); err != nil {
		return Root{}, err
	}
	digest, size := sha256.New(), &counter{}
	f := newFlattener(io.MultiWriter(w, digest, size), lim, survey.dirs)
	if err := f.walk(ctx, img); err != nil {
		return Root{}, err
	}
	if err := f.tw.Close(); err != nil {
		return Root{}, fmt.Errorf("image: write root: %w", err)
	}
	c := cf.Config
	return Root{
		Digest:       "sha256:" + hex.EncodeToString(digest.Sum(nil)),
		Size:         size.n,
		ContentBytes: f.tally.bytes,
		Files:        f.tally.files,
		Config: Config{
			Env:        slices.Clone(c.Env),
			WorkingDir: c.WorkingDir,
			Entrypoint: slices.Clone(c.Entrypoint),
			Cmd:        slices.Clone(c.Cmd),
			User:       c.User,
		},
	}, nil
}

// flattener writes the merged layers as a root tar, one entry at a time.
type flattener struct {
	tw    *tar.Writer
	tally tally
	// written holds every path written so far: tar.TypeDir for a directory,
	// tar.TypeReg for a regular file or a hardlink to one, else the type.
	written map[string]byte
	// dirs holds each directory's first entry in the merged stream, for a
	// directory that has to be written before the stream reaches it.
	dirs  map[string]entry
	learn bool // fill dirs as the stream goes
}

func newFlattener(w io.Writer, lim Limits, dirs map[string]entry) *flattener {
	return &flattener{tw: tar.NewWriter(w), tally: tally{lim: lim}, written: map[string]byte{}, dirs: dirs}
}

func (f *flattener) walk(ctx context.Context, img v1.Image) error {
	merged := mutate.Extract(img)
	defer merged.Close() // stops the merge when a refusal ends the walk early
	tr := tar.NewReader(merged)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			// mutate.Extract closes its tar, end marker and all, before it
			// hands its error to the pipe: a merge that failed part way
			// reads as a whole but shorter root. The error follows the end.
			_, err = io.Copy(io.Discard, merged)
			if err == nil {
				return nil
			}
		}
		if err != nil {
			return layerError(err)
		}
		if err := f.add(hdr, tr); err != nil {
			return err
		}
	}
}

func (f *flattener) add(hdr *tar.Header, content io.Reader) error {
	e, err := check(hdr)
	if err != nil || e.path == "" {
		return err
	}
	if f.learn && e.typ == tar.TypeDir {
		if _, ok := f.dirs[e.path]; !ok {
			f.dirs[e.path] = e
		}
	}
	// The first entry for a path comes from the uppermost layer and wins.
	// mutate.Extract keeps a path once already, but "/a" and "a" are two
	// paths to it and one here.
	if _, ok := f.written[e.path]; ok {
		return nil
	}
	parents := ancestors(e.path)
	for _, p := range parents {
		if t, ok := f.written[p]; ok && t != tar.TypeDir {
			return nil // an upper layer's file or symlink hides what is beneath it
		}
	}
	for _, p := range parents {
		if _, ok := f.written[p]; ok {
			continue
		}
		d, ok := f.dirs[p]
		if !ok {
			d = entry{path: p, typ: tar.TypeDir, mode: 0o755, mtime: time.Unix(0, 0)}
		}
		if err := f.write(d, nil); err != nil {
			return err
		}
	}
	if e.typ == tar.TypeLink && f.written[e.link] != tar.TypeReg {
		return refuse(e.path, "hardlink to %s, which is not a regular file earlier in the root", printable(e.link))
	}
	return f.write(e, content)
}

func (f *flattener) write(e entry, content io.Reader) error {
	if err := f.tally.add(e); err != nil {
		return err
	}
	if err := f.tw.WriteHeader(e.header()); err != nil {
		return fmt.Errorf("image: write root: %w", err)
	}
	if e.typ == tar.TypeReg {
		if _, err := io.CopyN(f.tw, content, e.size); err != nil {
			return fmt.Errorf("image: copy %s: %w", e.path, err)
		}
	}
	t := e.typ
	if t == tar.TypeLink {
		t = tar.TypeReg
	}
	f.written[e.path] = t
	return nil
}

// layerError says why the merge of the layers stopped. mutate.Extract
// stops at a layer path that climbs out of the root (a whiteout's too), and
// that is a refusal; its error has no type to match, so its text is the
// only sign, and the tests pin it.
func layerError(err error) error {
	const sign = "unsafe tar path "
	msg := err.Error()
	i := strings.Index(msg, sign)
	if i < 0 {
		return fmt.Errorf("image: read layers: %w", err)
	}
	p, qerr := strconv.QuotedPrefix(msg[i+len(sign):])
	if qerr == nil {
		p, qerr = strconv.Unquote(p)
	}
	if qerr != nil {
		p = ""
	}
	return refuse(p, leavesRoot)
}

type counter struct{ n int64 }

func (c *counter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return len(p), nil
}
