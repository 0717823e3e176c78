package fsstore_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/conch-sh/conch/services/internal/store"
	"github.com/conch-sh/conch/services/internal/store/fsstore"
	"github.com/conch-sh/conch/services/internal/store/storetest"
)

func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := fsstore.New(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestPlantedFiles checks that a FIFO or a symlink planted in the store's
// directory is never opened, followed or listed as an object.
func TestPlantedFiles(t *testing.T) {
	dir := t.TempDir()
	s, err := fsstore.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(t.Context(), "ws/ok", strings.NewReader("x"), store.PutOptions{Size: 1}); err != nil {
		t.Fatal(err)
	}
	objDir := filepath.Join(dir, "objects", "d.ws")
	if err := syscall.Mkfifo(filepath.Join(objDir, "f.fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(objDir, "f.link")); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"ws/fifo", "ws/link"} {
		if _, _, err := s.Get(t.Context(), key); err == nil {
			t.Errorf("get %s succeeded", key)
		}
	}
	var keys []string
	for info, err := range s.List(t.Context(), "ws/", true) {
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, info.Key)
	}
	if strings.Join(keys, ",") != "ws/ok" {
		t.Fatalf("listing = %v, want only ws/ok", keys)
	}
}
