// Package imagetest builds small, real container images for tests: a
// root with the host's shell and a few programs, their shared libraries,
// and whatever files a test adds, saved as `docker save` does.
package imagetest

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Programs are the host programs a minimal image holds: enough for a
// shell, the tests' commands and the snapshots' tar.
var Programs = []string{"sh", "cat", "ls", "id", "env", "echo", "sleep", "touch", "test", "true", "false", "mkdir", "rm", "tar", "pwd", "stat", "head", "sha256sum", "cut", "ln", "readlink"}

// File is a file a test adds to an image.
type File struct {
	Path string // relative, as in the image
	Body string
	Mode int64  // 0: 0644
	Link string // a symlink's target, instead of Body
	Dir  bool
}

// Options shape an image.
type Options struct {
	// Files go in a layer above the system's.
	Files []File
	// Env and Workdir are the image config's.
	Env     []string
	Workdir string
}

// Minimal returns an image of the host's Programs and opts' files.
func Minimal(t testing.TB, opts Options) v1.Image {
	t.Helper()
	sys := SystemLayer(t)
	img, err := mutate.AppendLayers(empty.Image, sys)
	if err != nil {
		t.Fatal(err)
	}
	if len(opts.Files) > 0 {
		img, err = mutate.AppendLayers(img, Layer(t, opts.Files))
		if err != nil {
			t.Fatal(err)
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config.Env, cf.Config.WorkingDir = opts.Env, opts.Workdir
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	return img
}

// Save writes img as a `docker save` archive in a temporary file and
// returns its path.
func Save(t testing.TB, img v1.Image) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "image.tar")
	tag, err := name.NewTag("conch.test/minimal:1")
	if err != nil {
		t.Fatal(err)
	}
	if err := tarball.WriteToFile(p, tag, img); err != nil {
		t.Fatal(err)
	}
	return p
}

// Layer is a layer of files.
func Layer(t testing.TB, files []File) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.Path, Mode: f.Mode, Typeflag: tar.TypeReg, Size: int64(len(f.Body))}
		switch {
		case f.Link != "":
			h.Typeflag, h.Linkname, h.Size = tar.TypeSymlink, f.Link, 0
		case f.Dir:
			h.Typeflag, h.Size = tar.TypeDir, 0
		}
		if h.Mode == 0 {
			h.Mode = 0o644
			if f.Dir {
				h.Mode = 0o755
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := io.WriteString(tw, f.Body); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// SystemLayer is a layer of the host's Programs in /usr/bin (with /bin a
// link to it) and the shared libraries they load, at the paths the host
// has them.
func SystemLayer(t testing.TB) v1.Layer {
	t.Helper()
	files := map[string]string{} // image path → host path
	for _, p := range Programs {
		host, err := exec.LookPath(p)
		if err != nil {
			t.Skipf("imagetest: %s not on this host", p)
		}
		real, err := filepath.EvalSymlinks(host)
		if err != nil {
			t.Fatal(err)
		}
		files["usr/bin/"+p] = real
		out, err := exec.Command("ldd", real).Output()
		if err != nil {
			continue // static
		}
		for _, line := range strings.Split(string(out), "\n") {
			for _, f := range strings.Fields(line) {
				if strings.HasPrefix(f, "/") {
					lib, err := filepath.EvalSymlinks(f)
					if err != nil {
						continue
					}
					files[strings.TrimPrefix(f, "/")] = lib
				}
			}
		}
	}
	var list []File
	dirs := map[string]bool{}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		// A library path through the host's /lib link is the image's
		// /usr/lib, as on a merged-/usr system.
		p2 := p
		for _, l := range []string{"lib", "lib64"} {
			if rest, ok := strings.CutPrefix(p, l+"/"); ok {
				p2 = "usr/" + l + "/" + rest
			}
		}
		for d := filepath.Dir(p2); d != "." && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
		}
		b, err := os.ReadFile(files[p])
		if err != nil {
			t.Fatal(err)
		}
		list = append(list, File{Path: p2, Body: string(b), Mode: 0o755})
	}
	var dl []string
	for d := range dirs {
		dl = append(dl, d)
	}
	sort.Strings(dl)
	var out []File
	for _, d := range dl {
		out = append(out, File{Path: d, Dir: true})
	}
	out = append(out, list...)
	out = append(out,
		File{Path: "bin", Link: "usr/bin"}, File{Path: "lib", Link: "usr/lib"}, File{Path: "lib64", Link: "usr/lib64"},
		File{Path: "etc", Dir: true}, File{Path: "etc/os-release", Body: "ID=conch-test\n"},
	)
	return Layer(t, out)
}
