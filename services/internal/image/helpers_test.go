package image_test

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/conch-sh/conch/services/internal/image"
)

var (
	// testTime is every test entry's mtime, with nanoseconds a root drops.
	testTime = time.Unix(1_700_000_000, 123)
	roomy    = image.Limits{MaxBytes: 1 << 30, MaxFiles: 10_000}
)

// file is one entry of a test tar. typ defaults to a regular file and mode
// to 0644 (0755 for a directory).
type file struct {
	name string
	typ  byte
	mode int64
	body string
	link string
}

func dir(name string, mode int64) file  { return file{name: name, typ: tar.TypeDir, mode: mode} }
func symlink(name, target string) file  { return file{name: name, typ: tar.TypeSymlink, link: target} }
func hardlink(name, target string) file { return file{name: name, typ: tar.TypeLink, link: target} }

// tarOf writes files as a tar the way build tools do, owners and all.
func tarOf(t testing.TB, files ...file) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		hdr := &tar.Header{
			Name: f.name, Typeflag: f.typ, Mode: f.mode, Linkname: f.link, ModTime: testTime,
			Uid: 1000, Gid: 1000, Uname: "dev", Gname: "dev",
		}
		if hdr.Typeflag == 0 {
			hdr.Typeflag = tar.TypeReg
		}
		if hdr.Mode == 0 {
			hdr.Mode = 0o644
			if hdr.Typeflag == tar.TypeDir {
				hdr.Mode = 0o755
			}
		}
		if hdr.Typeflag == tar.TypeReg {
			hdr.Size = int64(len(f.body))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatalf("write %q: %v", f.name, err)
		}
		if _, err := io.WriteString(tw, f.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func layerOf(t testing.TB, files ...file) v1.Layer {
	t.Helper()
	b := tarOf(t, files...)
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// imageOf stacks layers, lowest first, into an image for this platform.
func imageOf(t testing.TB, layers ...[]file) v1.Image {
	t.Helper()
	var ls []v1.Layer
	for _, files := range layers {
		ls = append(ls, layerOf(t, files...))
	}
	img, err := mutate.AppendLayers(empty.Image, ls...)
	if err != nil {
		t.Fatal(err)
	}
	return withPlatform(t, img, "linux", runtime.GOARCH)
}

func withPlatform(t testing.TB, img v1.Image, goos, goarch string) v1.Image {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = goos, goarch
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// dockerArchive writes imgs as docker save would.
func dockerArchive(t testing.TB, imgs ...v1.Image) string {
	t.Helper()
	refs := map[name.Reference]v1.Image{}
	for i, img := range imgs {
		ref, err := name.ParseReference(fmt.Sprintf("example.test/app:%d", i))
		if err != nil {
			t.Fatal(err)
		}
		refs[ref] = img
	}
	p := filepath.Join(t.TempDir(), "docker.tar")
	if err := tarball.MultiRefWriteToFile(p, refs); err != nil {
		t.Fatal(err)
	}
	return p
}

// ociArchive writes idx as an OCI image layout and packs it as a tar.
func ociArchive(t testing.TB, idx v1.ImageIndex) string {
	t.Helper()
	dir := t.TempDir()
	if _, err := layout.Write(dir, idx); err != nil {
		t.Fatal(err)
	}
	return tarDir(t, dir)
}

// indexOf makes an index of imgs; platforms, when given, label them.
func indexOf(imgs []v1.Image, platforms ...*v1.Platform) v1.ImageIndex {
	var adds []mutate.IndexAddendum
	for i, img := range imgs {
		add := mutate.IndexAddendum{Add: img}
		if i < len(platforms) {
			add.Descriptor = v1.Descriptor{Platform: platforms[i]}
		}
		adds = append(adds, add)
	}
	return mutate.AppendManifests(empty.Index, adds...)
}

func tarDir(t testing.TB, dir string) string {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		hdr, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		hdr.Name = filepath.ToSlash(rel)
		if d.IsDir() {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if d.Type().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			_, err = tw.Write(b)
			return err
		}
		return nil
	})
	if err == nil {
		err = tw.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, buf.Bytes())
}

func writeFile(t testing.TB, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "archive.tar")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// got is one entry of a root tar as a test compares it.
type got struct {
	Type byte
	Mode int64
	Body string
	Link string
}

// readRoot reads a root tar, checking what every root tar must be:
// normalized headers, each path once, each directory before its contents.
func readRoot(t testing.TB, b []byte) map[string]got {
	t.Helper()
	entries := map[string]got{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return entries
		}
		if err != nil {
			t.Fatal(err)
		}
		p := strings.TrimSuffix(hdr.Name, "/")
		if _, dup := entries[p]; dup {
			t.Errorf("%s appears twice", p)
		}
		if parent := path.Dir(p); parent != "." && entries[parent].Type != tar.TypeDir {
			t.Errorf("%s comes before its directory %s", p, parent)
		}
		if hdr.Uid != 0 || hdr.Gid != 0 || hdr.Uname != "" || hdr.Gname != "" {
			t.Errorf("%s: owner %d:%d %q:%q, want 0:0 and no names", p, hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname)
		}
		if len(hdr.PAXRecords) > 0 || hdr.ModTime.Nanosecond() != 0 {
			t.Errorf("%s: pax records %v, mtime %v", p, hdr.PAXRecords, hdr.ModTime)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		entries[p] = got{Type: hdr.Typeflag, Mode: hdr.Mode, Body: string(body), Link: hdr.Linkname}
	}
}

// endlessLayer is a layer whose one file claims 100 GiB, made as it is
// read, so a test sees how far Flatten reads past a limit. read counts the
// content bytes handed out.
type endlessLayer struct{ read *atomic.Int64 }

const endlessSize = 100 << 30

func (l endlessLayer) Digest() (v1.Hash, error) {
	return v1.NewHash("sha256:" + strings.Repeat("a", 64))
}

func (l endlessLayer) DiffID() (v1.Hash, error) {
	return v1.NewHash("sha256:" + strings.Repeat("b", 64))
}

func (l endlessLayer) Compressed() (io.ReadCloser, error) { return l.Uncompressed() }

func (l endlessLayer) Uncompressed() (io.ReadCloser, error) {
	var hdr bytes.Buffer
	tw := tar.NewWriter(&hdr)
	if err := tw.WriteHeader(&tar.Header{Name: "big", Typeflag: tar.TypeReg, Mode: 0o644, Size: endlessSize}); err != nil {
		return nil, err
	}
	return io.NopCloser(io.MultiReader(&hdr, io.LimitReader(zeros{l.read}, endlessSize))), nil
}

func (l endlessLayer) Size() (int64, error)                { return endlessSize, nil }
func (l endlessLayer) MediaType() (types.MediaType, error) { return types.DockerLayer, nil }

type zeros struct{ read *atomic.Int64 }

func (z zeros) Read(p []byte) (int, error) {
	clear(p)
	z.read.Add(int64(len(p)))
	return len(p), nil
}
