package image_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/conch-sh/conch/services/internal/image"
)

func TestExtract(t *testing.T) {
	t.Parallel()
	_, b, err := flatten(t, appImage(t), roomy)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := image.Extract(t.Context(), bytes.NewReader(b), dir, roomy); err != nil {
		t.Fatal(err)
	}

	type onDisk struct {
		Mode fs.FileMode
		Body string
		Link string
	}
	want := map[string]onDisk{}
	for p, e := range appRoot {
		d := onDisk{Mode: fs.FileMode(e.Mode & 0o777), Body: e.Body}
		switch e.Type {
		case tar.TypeDir:
			d.Mode |= fs.ModeDir
			if e.Mode&0o1000 != 0 {
				d.Mode |= fs.ModeSticky
			}
		case tar.TypeSymlink:
			d.Mode, d.Link = fs.ModeSymlink|0o777, e.Link
		case tar.TypeLink:
			target := appRoot[e.Link]
			d = onDisk{Mode: fs.FileMode(target.Mode & 0o777), Body: target.Body}
		}
		want[p] = d
	}
	gotDisk := map[string]onDisk{}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		e := onDisk{Mode: fi.Mode()}
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			e.Body = string(b)
		case fi.Mode()&fs.ModeSymlink != 0:
			if e.Link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		if fi.Mode()&fs.ModeSymlink == 0 && !fi.ModTime().Equal(testTime.Truncate(1e9)) && fi.ModTime().Unix() != 0 {
			t.Errorf("%s: mtime %v, want %v", rel, fi.ModTime(), testTime.Truncate(1e9))
		}
		gotDisk[rel] = e
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, gotDisk); diff != "" {
		t.Errorf("extracted root (-want +got):\n%s", diff)
	}
	a, errA := os.Stat(filepath.Join(dir, "bin/tool"))
	b2, errB := os.Stat(filepath.Join(dir, "bin/tool2"))
	if errA != nil || errB != nil || !os.SameFile(a, b2) {
		t.Errorf("bin/tool2 is not a hardlink of bin/tool (%v, %v)", errA, errB)
	}
}

func TestExtractRefuses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		files []file
		lim   image.Limits
		want  string
	}{
		{"file through a symlink", []file{symlink("evil", "/etc"), {name: "evil/passwd", body: "pwned"}},
			roomy, "template: evil/passwd: parent evil is not a directory earlier in the root"},
		{"file through a relative symlink", []file{symlink("up", ".."), {name: "up/outside", body: "pwned"}},
			roomy, "template: up/outside: parent up is not a directory earlier in the root"},
		{"parent path", []file{{name: "../outside", body: "pwned"}},
			roomy, "template: ../outside: path leaves the root"},
		{"parent path after cleaning", []file{dir("a/", 0o755), {name: "a/../../outside", body: "pwned"}},
			roomy, "template: a/../../outside: path leaves the root"},
		{"file over a symlink", []file{symlink("x", "/etc/passwd"), {name: "x", body: "pwned"}},
			roomy, "template: x: appears twice in the root"},
		{"missing parent", []file{{name: "a/b"}},
			roomy, "template: a/b: parent a is not a directory earlier in the root"},
		{"hardlink outside the root", []file{hardlink("h", "/etc/passwd")},
			roomy, "template: h: hardlink to etc/passwd, which is not a regular file earlier in the root"},
		{"hardlink through a parent path", []file{hardlink("h", "../outside")},
			roomy, "template: h: hardlink target ../outside: path leaves the root"},
		{"hardlink to a symlink", []file{symlink("s", "/etc/passwd"), hardlink("h", "s")},
			roomy, "template: h: hardlink to s, which is not a regular file earlier in the root"},
		{"device", []file{{name: "null", typ: tar.TypeChar}},
			roomy, "template: null: character device"},
		{"setuid", []file{{name: "su", mode: 0o4755}},
			roomy, "template: su: setuid or setgid bit"},
		{"whiteout", []file{{name: ".wh.x"}},
			roomy, "template: .wh.x: whiteout left after the layers were merged"},
		{"too many entries", []file{{name: "a"}, {name: "b"}},
			image.Limits{MaxBytes: 100, MaxFiles: 1}, "template: image root has more than the limit of 1 entries"},
		{"too many bytes", []file{{name: "a", body: strings.Repeat("x", 2048)}},
			image.Limits{MaxBytes: 1 << 10, MaxFiles: 100}, "template: image root is larger than the limit of 1 KiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			base := t.TempDir()
			dir := filepath.Join(base, "root")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			err := image.Extract(t.Context(), bytes.NewReader(tarOf(t, tt.files...)), dir, tt.lim)
			if !errors.Is(err, image.ErrRefused) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Extract = %v, want a refusal saying %q", err, tt.want)
			}
			checkConfined(t, base)
		})
	}
}

func TestExtractWantsAnEmptyDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	err := image.Extract(t.Context(), bytes.NewReader(tarOf(t, file{name: "a"})), dir, roomy)
	if err == nil || errors.Is(err, image.ErrRefused) {
		t.Fatalf("Extract into a non-empty dir = %v, want an error that is not a refusal", err)
	}
}

// checkConfined fails unless base holds only root/, as Extract was given,
// and nothing in root is setuid or setgid.
func checkConfined(t testing.TB, base string) {
	t.Helper()
	entries, err := os.ReadDir(base)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "root" && e.Name() != "outside" {
			t.Errorf("Extract wrote %s outside its dir", e.Name())
		}
	}
	if b, err := os.ReadFile(filepath.Join(base, "outside")); err == nil && string(b) != "untouched" {
		t.Errorf("Extract wrote %q into a file outside its dir", b)
	}
	err = filepath.WalkDir(filepath.Join(base, "root"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
			t.Errorf("%s is %v", p, fi.Mode())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func FuzzExtract(f *testing.F) {
	// Seeds stay a few blocks long: the fuzzer minimizes every new input
	// it finds, and a long one takes it most of a short run.
	_, root, err := flatten(f, imageOf(f, []file{
		dir("bin/", 0o755), {name: "bin/tool", mode: 0o755, body: "tool"}, hardlink("bin/t", "bin/tool"), symlink("sh", "bin/tool"),
	}), roomy)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(root)
	for _, files := range [][]file{
		{symlink("evil", "/etc"), {name: "evil/passwd", body: "pwned"}},
		{symlink("up", ".."), {name: "up/outside", body: "pwned"}},
		{symlink("outside", "../outside"), {name: "outside", body: "pwned"}},
		{hardlink("h", "../outside")},
		{dir("a/", 0o555), {name: "a/b", body: "b"}, dir("a/c/", 0o000), {name: "a/d", mode: 0o4755}},
		{{name: "../outside", body: "pwned"}, {name: "/x/../../outside", body: "pwned"}},
	} {
		f.Add(tarOf(f, files...))
	}
	lim := image.Limits{MaxBytes: 1 << 20, MaxFiles: 1000}
	f.Fuzz(func(t *testing.T, b []byte) {
		base := t.TempDir()
		dir := filepath.Join(base, "root")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(base, "outside"), []byte("untouched"), 0o644); err != nil {
			t.Fatal(err)
		}
		_ = image.Extract(t.Context(), bytes.NewReader(b), dir, lim)
		checkConfined(t, base)
	})
}
