package skillfs

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCheckPath(t *testing.T) {
	for _, tt := range []struct {
		in, want string
		ok       bool
	}{
		{"a/b.md", "a/b.md", true},
		{`a\b`, "a/b", true},
		{"", "", false},
		{"/a", "", false},
		{"C:/a", "", false},
		{"a/../b", "", false},
		{"a//b", "", false},
		{"a/./b", "", false},
		{"a/\x01", "", false},
		{"a/\xff", "", false},
	} {
		got, err := CheckPath(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("CheckPath(%q) = %q, %v", tt.in, got, err)
		}
	}
}

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	sk := []Skill{{Name: "a", Files: []File{{Path: "SKILL.md", Mode: 0o644, Content: []byte("x")}, {Path: "bin/run", Mode: 0o755, Content: []byte("y")}}}}
	if err := Check("skills", sk); err != nil {
		t.Fatal(err)
	}
	if err := Write(dir, sk); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, "a/bin/run"))
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("run: %v %v", fi, err)
	}
	// A link where a directory goes is not followed.
	out := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(out, filepath.Join(dir, "b", "bin")); err != nil {
		t.Fatal(err)
	}
	if err := mkdirs(filepath.Join(dir, "b"), filepath.Join(dir, "b", "bin")); err == nil {
		t.Fatal("mkdirs went through a link")
	}
}
