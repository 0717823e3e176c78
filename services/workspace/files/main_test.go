package files_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
	"github.com/conch-sh/conch/services/internal/store"
	"github.com/conch-sh/conch/services/internal/store/fsstore"
	"github.com/conch-sh/conch/services/internal/store/miniotest"
	"github.com/conch-sh/conch/services/internal/store/s3store"
	"github.com/conch-sh/conch/services/workspace/files"
)

// minio is shared by the package's tests; each test uses its own bucket.
var minio *miniotest.Server

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "conch-minio-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	s, stop, err := miniotest.Launch(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	minio = s
	code := m.Run()
	stop()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// stores returns one fresh store of each implementation.
func stores(t testing.TB) map[string]store.Store {
	t.Helper()
	fs, err := fsstore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s3, err := s3store.New(t.Context(), s3store.Options{Endpoint: minio.Endpoint, AccessKey: minio.AccessKey, SecretKey: minio.SecretKey, Bucket: miniotest.Bucket()})
	if err != nil {
		t.Fatal(err)
	}
	return map[string]store.Store{"fs": fs, "s3": s3}
}

// forEachStore runs fn against a service over each store.
func forEachStore(t *testing.T, cfg files.Config, fn func(t *testing.T, s *files.Service)) {
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			cli := etcdxtest.StartForTest(t)
			s, err := files.New(st, cli, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.Close)
			fn(t, s)
		})
	}
}
