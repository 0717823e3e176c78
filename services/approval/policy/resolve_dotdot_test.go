package policy

import (
	"os"
	"path/filepath"
	"testing"
)

// TestLookPathDotDotAfterSymlink refuses a name whose ".." after a symlink
// runs another file than its lexical form names.
func TestLookPathDotDotAfterSymlink(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"tool", "sub/tool"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "sub/deeper"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "sub/deeper"), filepath.Join(dir, "lnk")); err != nil {
		t.Fatal(err)
	}
	r := PathResolver{}
	tests := []struct {
		name, want string
	}{
		{"./tool", filepath.Join(dir, "tool")},
		{"sub/../tool", filepath.Join(dir, "tool")},
		{"sub/tool", filepath.Join(dir, "sub/tool")},
		{"lnk/../tool", ""},    // the kernel runs sub/tool
		{"lnk/../../tool", ""}, // the kernel runs tool, the lexical form names ../tool
	}
	for _, tt := range tests {
		got, err := r.LookPath(tt.name, dir)
		if tt.want == "" {
			if err == nil {
				t.Errorf("LookPath(%q) = %q, want refused", tt.name, got)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("LookPath(%q) = %q, %v; want %q", tt.name, got, err, tt.want)
		}
	}
}
