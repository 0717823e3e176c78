package load

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/conch-sh/conch/services/executor/sandbox/seccomp"
	"github.com/conch-sh/conch/services/internal/store/miniotest"
)

func TestCommandsOf(t *testing.T) {
	for _, k := range mix {
		cmds := commandsOf(k, 42)
		if len(cmds) != k.commands {
			t.Errorf("%s: %q, want %d commands", k.name, cmds, k.commands)
		}
		for _, c := range cmds {
			if strings.Contains(c, "`") || strings.Contains(c, "%") {
				t.Errorf("%s: command %q", k.name, c)
			}
		}
	}
}

// TestFloor runs the floor briefly, in real sandboxes on a real MinIO: it
// does every kind's work, keeps the persistent workspaces' files, and
// fails rather than skip work it could not do.
func TestFloor(t *testing.T) {
	m := miniotest.Start(t)
	mc, err := minio.New(m.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(m.AccessKey, m.SecretKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	bucket := miniotest.Bucket()
	if err := mc.MakeBucket(t.Context(), bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	prog, err := seccomp.Program()
	if err != nil {
		t.Fatal(err)
	}
	opts := FloorOptions{Concurrency: 2, Duration: 2 * time.Second, Bwrap: "bwrap", Seccomp: prog, Store: mc, Bucket: bucket, UIDBase: 299000}
	r, err := Floor(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if r.Completions == 0 || r.Commands < 2*r.Completions || r.PerSecond <= 0 {
		t.Fatalf("floor: %+v", r)
	}
	// A persistent workspace's file is read, appended to and kept.
	k := mix[2]
	if !k.user {
		t.Fatal("the mix's third kind is not the persistent one")
	}
	for _, n := range []int{8, 16} {
		if _, err := floorOne(t.Context(), opts, opts.UIDBase, k, n); err != nil {
			t.Fatal(err)
		}
	}
	obj, err := mc.GetObject(t.Context(), bucket, "floor/load-user-0/log.txt", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	b, err := io.ReadAll(obj)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(b), "8\n16\n") {
		t.Fatalf("the workspace's file holds %q", b)
	}
	// Work that fails fails the floor.
	bad := opts
	bad.Seccomp = []byte("not a filter")
	if _, err := Floor(context.Background(), bad); err == nil {
		t.Fatal("a floor whose sandboxes cannot start succeeded")
	}
}
