package image_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/conch-sh/conch/services/internal/image"
)

// appImage is three layers that exercise merging: whiteouts of a file and
// a directory, an opaque directory, a directory whose mode only a lower
// layer gives, and names with a leading "/" and "./".
func appImage(t testing.TB) v1.Image {
	t.Helper()
	img := imageOf(t,
		[]file{
			dir("./", 0o755),
			dir("etc/", 0o755),
			{name: "etc/passwd", body: "root:x:0:0::/root:/bin/sh\n"},
			{name: "etc/hostname", body: "base\n"},
			dir("tmp/", 0o1777),
			dir("var/", 0o755),
			dir("var/mail/", 0o2775),
			dir("srv/", 0o750),
			dir("bin/", 0o755),
			{name: "bin/tool", mode: 0o755, body: "#!/bin/sh\necho tool\n"},
			hardlink("bin/tool2", "bin/tool"),
			symlink("bin/sh", "/bin/busybox"),
			symlink("lib", "usr/lib"),
			symlink("escape", "../../etc"), // dropped by mutate.Extract
			dir("gone/", 0o755),
			{name: "gone/a", body: "a"},
			dir("opq/", 0o755),
			{name: "opq/old", body: "old"},
			{name: "keep.txt", body: "keep"},
		},
		[]file{
			{name: ".wh.gone"},
			{name: ".wh.keep.txt"},
			dir("opq/", 0o700),
			{name: "opq/.wh..wh..opq"},
			{name: "opq/new", body: "new"},
			{name: "srv/www/index.html", body: "<h1>hi</h1>"},
			{name: "etc/hostname", body: "app\n"},
		},
		[]file{
			{name: "/abs.txt", body: "abs"},
			{name: "./dot.txt", body: "dot"},
		},
	)
	img, err := mutate.Config(img, v1.Config{
		Env:        []string{"PATH=/usr/bin:/bin", "MODE=prod"},
		WorkingDir: "/srv",
		Entrypoint: []string{"/bin/tool"},
		Cmd:        []string{"serve"},
		User:       "1000:1000",
	})
	if err != nil {
		t.Fatal(err)
	}
	return img
}

var appRoot = map[string]got{
	"abs.txt":            {Type: tar.TypeReg, Mode: 0o644, Body: "abs"},
	"dot.txt":            {Type: tar.TypeReg, Mode: 0o644, Body: "dot"},
	"etc":                {Type: tar.TypeDir, Mode: 0o755},
	"etc/passwd":         {Type: tar.TypeReg, Mode: 0o644, Body: "root:x:0:0::/root:/bin/sh\n"},
	"etc/hostname":       {Type: tar.TypeReg, Mode: 0o644, Body: "app\n"},
	"tmp":                {Type: tar.TypeDir, Mode: 0o1777},
	"var":                {Type: tar.TypeDir, Mode: 0o755},
	"var/mail":           {Type: tar.TypeDir, Mode: 0o775},
	"srv":                {Type: tar.TypeDir, Mode: 0o750},
	"srv/www":            {Type: tar.TypeDir, Mode: 0o755},
	"srv/www/index.html": {Type: tar.TypeReg, Mode: 0o644, Body: "<h1>hi</h1>"},
	"bin":                {Type: tar.TypeDir, Mode: 0o755},
	"bin/tool":           {Type: tar.TypeReg, Mode: 0o755, Body: "#!/bin/sh\necho tool\n"},
	"bin/tool2":          {Type: tar.TypeLink, Mode: 0o644, Link: "bin/tool"},
	"bin/sh":             {Type: tar.TypeSymlink, Mode: 0o644, Link: "/bin/busybox"},
	"lib":                {Type: tar.TypeSymlink, Mode: 0o644, Link: "usr/lib"},
	"opq":                {Type: tar.TypeDir, Mode: 0o700},
	"opq/new":            {Type: tar.TypeReg, Mode: 0o644, Body: "new"},
}

func flatten(t testing.TB, img v1.Image, lim image.Limits) (image.Root, []byte, error) {
	t.Helper()
	var buf bytes.Buffer
	root, err := image.Flatten(t.Context(), img, &buf, lim)
	return root, buf.Bytes(), err
}

func TestFlatten(t *testing.T) {
	t.Parallel()
	img := appImage(t)
	want, _, err := flatten(t, img, roomy)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		open func(t *testing.T) (v1.Image, func() error, error)
	}{
		{"docker archive", func(t *testing.T) (v1.Image, func() error, error) {
			return image.Open(t.Context(), dockerArchive(t, img), t.TempDir())
		}},
		{"OCI layout", func(t *testing.T) (v1.Image, func() error, error) {
			return image.Open(t.Context(), ociArchive(t, indexOf([]v1.Image{img})), t.TempDir())
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			opened, cleanup, err := tt.open(t)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := cleanup(); err != nil {
					t.Error(err)
				}
			}()
			root, b, err := flatten(t, opened, roomy)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(appRoot, readRoot(t, b)); diff != "" {
				t.Errorf("root (-want +got):\n%s", diff)
			}
			sum := sha256.Sum256(b)
			if root.Digest != "sha256:"+hex.EncodeToString(sum[:]) || root.Size != int64(len(b)) {
				t.Errorf("root says %s, %d bytes; the tar is sha256:%x, %d bytes", root.Digest, root.Size, sum, len(b))
			}
			// The same image makes the same root, whichever way it came.
			if diff := cmp.Diff(want, root); diff != "" {
				t.Errorf("root differs from the in-memory image's (-want +got):\n%s", diff)
			}
			wantCfg := image.Config{
				Env:        []string{"PATH=/usr/bin:/bin", "MODE=prod"},
				WorkingDir: "/srv",
				Entrypoint: []string{"/bin/tool"},
				Cmd:        []string{"serve"},
				User:       "1000:1000",
			}
			if diff := cmp.Diff(wantCfg, root.Config); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
			if root.Files != len(appRoot) {
				t.Errorf("Files = %d, want %d", root.Files, len(appRoot))
			}
		})
	}
}

func TestFlattenIsDeterministic(t *testing.T) {
	t.Parallel()
	img := appImage(t)
	first, b1, err := flatten(t, img, roomy)
	if err != nil {
		t.Fatal(err)
	}
	second, b2, err := flatten(t, img, roomy)
	if err != nil {
		t.Fatal(err)
	}
	if first.Digest != second.Digest || !bytes.Equal(b1, b2) {
		t.Errorf("digests %s and %s for one image", first.Digest, second.Digest)
	}
}

func TestOpenChoosesThePlatform(t *testing.T) {
	t.Parallel()
	other := "arm64"
	if runtime.GOARCH == other {
		other = "amd64"
	}
	here := imageOf(t, []file{{name: "arch", body: runtime.GOARCH}})
	there := withPlatform(t, imageOf(t, []file{{name: "arch", body: other}}), "linux", other)
	attestation := withPlatform(t, imageOf(t, []file{{name: "sbom.json", body: "{}"}}), "unknown", "unknown")
	platform := func(goos, goarch string) *v1.Platform { return &v1.Platform{OS: goos, Architecture: goarch} }
	multi := indexOf([]v1.Image{there, here, attestation},
		platform("linux", other), platform("linux", runtime.GOARCH), platform("unknown", "unknown"))

	tests := []struct {
		name string
		idx  v1.ImageIndex
	}{
		{"index of platforms", multi},
		// docker's OCI export: index.json names one index, which names the images.
		{"nested index", mutate.AppendManifests(empty.Index, mutate.IndexAddendum{Add: multi})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			img, cleanup, err := image.Open(t.Context(), ociArchive(t, tt.idx), t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer cleanup()
			_, b, err := flatten(t, img, roomy)
			if err != nil {
				t.Fatal(err)
			}
			if got := readRoot(t, b)["arch"].Body; got != runtime.GOARCH {
				t.Errorf("opened the image for %s, want %s", got, runtime.GOARCH)
			}
		})
	}
}

func TestOpenRefuses(t *testing.T) {
	t.Parallel()
	img := imageOf(t, []file{{name: "a", body: "a"}})
	other := imageOf(t, []file{{name: "b", body: "b"}})
	foreign := withPlatform(t, img, "linux", "s390x")
	if runtime.GOARCH == "s390x" {
		foreign = withPlatform(t, img, "linux", "amd64")
	}
	gzipped := func(t *testing.T) string {
		raw, err := os.ReadFile(dockerArchive(t, img))
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Write(raw)
		zw.Close()
		return writeFile(t, buf.Bytes())
	}
	blob := func(body string) (string, string) {
		sum := sha256.Sum256([]byte(body))
		return "blobs/sha256/" + hex.EncodeToString(sum[:]), body
	}
	layoutHead := []file{{name: "oci-layout", body: `{"imageLayoutVersion":"1.0.0"}`}}
	name, body := blob("{}")

	tests := []struct {
		name    string
		archive func(t *testing.T) string
		want    string
	}{
		{"garbage", func(t *testing.T) string {
			return writeFile(t, bytes.Repeat([]byte("not a tar archive at all "), 100))
		}, "not a readable tar archive"},
		{"gzip-compressed", gzipped, "not a readable tar archive"},
		{"tar of something else", func(t *testing.T) string {
			return writeFile(t, tarOf(t, file{name: "README", body: "hi"}))
		}, "neither manifest.json"},
		{"two images in a docker archive", func(t *testing.T) string {
			return dockerArchive(t, img, other)
		}, "archive holds 2 images; a template is made from exactly one"},
		{"two images in an OCI layout", func(t *testing.T) string {
			return ociArchive(t, indexOf([]v1.Image{img, other}))
		}, "archive holds 2 images, 0 of them for linux/"},
		{"docker archive for another platform", func(t *testing.T) string {
			return dockerArchive(t, foreign)
		}, "image is for linux/"},
		{"OCI layout for another platform", func(t *testing.T) string {
			return ociArchive(t, indexOf([]v1.Image{foreign}))
		}, "image is for linux/"},
		{"corrupt manifest.json", func(t *testing.T) string {
			return writeFile(t, tarOf(t, file{name: "manifest.json", body: "[{"}))
		}, "manifest.json: unreadable"},
		{"huge manifest.json", func(t *testing.T) string {
			return writeFile(t, tarOf(t, file{name: "manifest.json", body: strings.Repeat(" ", 5<<20)}))
		}, "manifest.json: larger than 4 MiB"},
		{"docker archive without its config", func(t *testing.T) string {
			return writeFile(t, tarOf(t, file{name: "manifest.json", body: `[{"Config":"c.json","Layers":[]}]`}))
		}, "c.json: missing from the archive"},
		{"index.json a symlink", func(t *testing.T) string {
			return writeFile(t, tarOf(t, append(layoutHead, symlink("index.json", "/etc/passwd"))...))
		}, "index.json: must be a regular file"},
		{"index.json missing", func(t *testing.T) string {
			return writeFile(t, tarOf(t, layoutHead...))
		}, "index.json: missing from the archive"},
		{"blob twice", func(t *testing.T) string {
			return writeFile(t, tarOf(t, append(layoutHead, file{name: name, body: body}, file{name: "./" + name, body: body})...))
		}, name + ": appears twice in the archive"},
		{"blob not matching its digest", func(t *testing.T) string {
			return writeFile(t, tarOf(t, append(layoutHead, file{name: name, body: "[]"})...))
		}, name + ": content does not match its digest"},
		{"OCI layout without a layer", func(t *testing.T) string {
			dir := t.TempDir()
			if _, err := layout.Write(dir, indexOf([]v1.Image{img})); err != nil {
				t.Fatal(err)
			}
			layers, err := img.Layers()
			if err != nil {
				t.Fatal(err)
			}
			d, err := layers[0].Digest()
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(filepath.Join(dir, "blobs", d.Algorithm, d.Hex)); err != nil {
				t.Fatal(err)
			}
			return tarDir(t, dir)
		}, "layer missing from the archive"},
		{"index naming a missing manifest", func(t *testing.T) string {
			index := `{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:` +
				strings.Repeat("0", 64) + `","size":2}]}`
			return writeFile(t, tarOf(t, append(layoutHead, file{name: "index.json", body: index})...))
		}, "missing from the archive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tmp := t.TempDir()
			_, _, err := image.Open(t.Context(), tt.archive(t), tmp)
			if !errors.Is(err, image.ErrRefused) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Open = %v, want a refusal saying %q", err, tt.want)
			}
			if left, _ := os.ReadDir(tmp); len(left) > 0 {
				t.Errorf("Open left %v in its temp dir", left)
			}
		})
	}
}

func TestFlattenRefuses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		layers [][]file
		lim    image.Limits
		want   string // the refusal's whole message
	}{
		{"parent path", [][]file{{{name: "../x"}}},
			roomy, "template: ../x: path leaves the root"},
		{"parent path after cleaning", [][]file{{{name: "a/../../x"}}},
			roomy, "template: ../x: path leaves the root"},
		{"whiteout outside the root", [][]file{{{name: "a"}}, {{name: "../.wh.a"}}},
			roomy, "template: ../.wh.a: path leaves the root"},
		{"character device", [][]file{{{name: "dev/null", typ: tar.TypeChar}}},
			roomy, "template: dev/null: character device (a template root holds only files, directories and links)"},
		{"block device", [][]file{{{name: "dev/sda", typ: tar.TypeBlock}}},
			roomy, "template: dev/sda: block device (a template root holds only files, directories and links)"},
		{"fifo", [][]file{{{name: "run/pipe", typ: tar.TypeFifo}}},
			roomy, "template: run/pipe: fifo (a template root holds only files, directories and links)"},
		{"setuid file", [][]file{{{name: "usr/bin/su", mode: 0o4755}}},
			roomy, "template: usr/bin/su: setuid or setgid bit (conch sandboxes never run setuid programs; remove it: chmod ug-s)"},
		{"setgid file", [][]file{{{name: "usr/bin/wall", mode: 0o2755}}},
			roomy, "template: usr/bin/wall: setuid or setgid bit (conch sandboxes never run setuid programs; remove it: chmod ug-s)"},
		{"hardlink to a later file", [][]file{{hardlink("a", "b"), {name: "b"}}},
			roomy, "template: a: hardlink to b, which is not a regular file earlier in the root"},
		{"hardlink to a missing file", [][]file{{hardlink("a", "nowhere")}},
			roomy, "template: a: hardlink to nowhere, which is not a regular file earlier in the root"},
		{"hardlink to a directory", [][]file{{dir("d/", 0o755), hardlink("a", "d")}},
			roomy, "template: a: hardlink to d, which is not a regular file earlier in the root"},
		{"hardlink outside the root", [][]file{{hardlink("a/b/c/h", "../x")}},
			roomy, "template: a/b/c/h: hardlink target ../x: path leaves the root"},
		{"non-UTF-8 name", [][]file{{{name: "bad\xffname"}}},
			roomy, `template: "bad\xffname": path is not valid UTF-8`},
		{"long name", [][]file{{{name: strings.Repeat("n", 256)}}},
			roomy, "a name in the path is longer than 255 bytes"},
		{"long path", [][]file{{{name: strings.Repeat("d/", 2100) + "f"}}},
			roomy, "path is longer than 4096 bytes"},
		{"long symlink target", [][]file{{symlink("l", strings.Repeat("t", 4097))}},
			roomy, "template: l: symlink target is longer than 4096 bytes"},
		{"too many bytes", [][]file{{{name: "a", body: "0123456789"}}, {{name: "b", body: "0123456789"}}},
			image.Limits{MaxBytes: 15, MaxFiles: 100}, "template: image root is larger than the limit of 15 bytes"},
		{"too many entries", [][]file{{{name: "a"}, {name: "b"}, {name: "c/d"}}},
			image.Limits{MaxBytes: 100, MaxFiles: 3}, "template: image root has more than the limit of 3 entries"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := flatten(t, imageOf(t, tt.layers...), tt.lim)
			if !errors.Is(err, image.ErrRefused) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Flatten = %v, want a refusal saying %q", err, tt.want)
			}
		})
	}
}

func TestFlattenStopsAtTheLimit(t *testing.T) {
	t.Parallel()
	var read atomic.Int64
	img, err := mutate.AppendLayers(empty.Image, endlessLayer{&read})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = flatten(t, img, image.Limits{MaxBytes: 2 << 30, MaxFiles: 10})
	if want := "template: image root is larger than the limit of 2 GiB"; err == nil || err.Error() != want {
		t.Fatalf("Flatten = %v, want %q", err, want)
	}
	if n := read.Load(); n > 1<<20 {
		t.Errorf("Flatten read %d bytes of a layer it refused at the header", n)
	}
}

// A layer that breaks part way must fail Flatten, not make a shorter root.
func TestFlattenFailsOnABrokenLayer(t *testing.T) {
	t.Parallel()
	// The break falls in b's header, after the whole of a: the merge has
	// written a complete entry when it stops.
	whole := tarOf(t, file{name: "a", body: "a"}, file{name: "b", body: "b"})
	broken := whole[:2*512+100]
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(broken)), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := flatten(t, img, roomy); err == nil || !strings.Contains(err.Error(), "unexpected EOF") {
		t.Fatalf("Flatten = %v, want the layer's unexpected EOF", err)
	}
}
