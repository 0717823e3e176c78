package dirlock

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestTakeInstance(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	a, stale, err := TakeInstance(root, "a", os.RemoveAll)
	if err != nil || stale != nil {
		t.Fatalf("take a: %v, %v", err, stale)
	}
	if err := os.WriteFile(filepath.Join(a.Dir, "f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := TakeInstance(root, "a", os.RemoveAll); err == nil {
		t.Fatal("a second taker of a held instance was not refused")
	}
	// A live instance is never swept.
	b, _, err := TakeInstance(root, "b", os.RemoveAll)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := os.Stat(filepath.Join(a.Dir, "f")); err != nil {
		t.Fatalf("a live instance's files went: %v", err)
	}
	for _, m := range []os.FileMode{mode(t, root), mode(t, a.Dir)} {
		if m != 0o711 {
			t.Errorf("mode %v, want 0711", m)
		}
	}
	// One that ended is swept by the next taker; what remove refuses is
	// reported and left for the one after.
	a.Close()
	refuse := errors.New("refused")
	c, stale, err := TakeInstance(root, "c", func(string) error { return refuse })
	if err != nil || !errors.Is(stale, refuse) {
		t.Fatalf("take c: %v, stale %v", err, stale)
	}
	defer c.Close()
	d, stale, err := TakeInstance(root, "d", os.RemoveAll)
	if err != nil || stale != nil {
		t.Fatalf("take d: %v, %v", err, stale)
	}
	defer d.Close()
	for _, p := range []string{a.Dir, a.Dir + ".lock"} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left after its owner ended: %v", p, err)
		}
	}
	for _, bad := range []string{"", "x/y", "..", ".hidden"} {
		if _, _, err := TakeInstance(root, bad, os.RemoveAll); err == nil {
			t.Errorf("instance name %q taken", bad)
		}
	}
}

func mode(t *testing.T, p string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}
