package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/conch-sh/conch/services/internal/image"
	"github.com/conch-sh/conch/services/internal/image/imagetest"
)

// imageRoot unpacks an image of the host's programs and files into a
// directory the sandboxes' uids can reach, as an executor's template
// cache does.
func imageRoot(t testing.TB, files []imagetest.File) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "conch-image-root-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	tarPath := filepath.Join(dir, "root.tar")
	f, err := os.Create(tarPath)
	if err != nil {
		t.Fatal(err)
	}
	lim := image.Limits{MaxBytes: 1 << 30, MaxFiles: 100000}
	if _, err := image.Flatten(context.Background(), imagetest.Minimal(t, imagetest.Options{Files: files}), f, lim); err != nil {
		t.Fatal(err)
	}
	f.Close()
	root := filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(tarPath)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if err := image.Extract(context.Background(), in, root, lim); err != nil {
		t.Fatal(err)
	}
	return root
}

// What an image holds can point the host at its own files: symbolic
// links in its /etc, in its CA bundle's place and in the way of its
// workdir. The host follows none of them.
func TestImageRootFollowsNoLinkOnTheHost(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "host-secret")
	if err := os.WriteFile(secret, []byte("HOST SECRET\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	root := imageRoot(t, []imagetest.File{
		{Path: "etc/leak", Link: secret},
		{Path: "etc/ssl", Dir: true}, {Path: "etc/ssl/certs", Dir: true},
		{Path: "etc/ssl/certs/ca-certificates.crt", Link: secret},
		{Path: "srv", Link: "/tmp"},
	})
	r := ownRuntime(t, Config{PoolSize: -1})
	ctx := t.Context()
	sb, err := r.Create(ctx, Spec{ID: "image-links", Image: &ImageRoot{Dir: root}, Network: true, EgressCA: []byte("CONCH TEST CA\n")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Destroy(context.WithoutCancel(ctx)) })
	out := output(t, sb, "cat /etc/leak 2>&1; cat /run/conch/egress/ca-bundle.pem; readlink /etc/leak")
	if strings.Contains(out, "HOST SECRET") {
		t.Fatalf("a host file reached the sandbox: %q", out)
	}
	if !strings.Contains(out, "CONCH TEST CA") {
		t.Errorf("the egress CA is missing: %q", out)
	}
	// A workdir through a link of the image is refused, not resolved on
	// the host.
	if _, err := r.Create(ctx, Spec{ID: "image-link-workdir", Image: &ImageRoot{Dir: root}, Workdir: "/srv/app"}); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("a workdir through a link: %v", err)
	}
	// The host's programs are not there, the image's are.
	if got := output(t, sb, "test -e /usr/bin/bwrap && echo host || echo image; cat /etc/os-release"); got != "image\nID=conch-test\n" {
		t.Errorf("the sandbox sees %q", got)
	}
	// A workdir needs an image when it is outside the workspace and /tmp.
	if _, err := r.Create(ctx, Spec{ID: "no-image-workdir", Workdir: "/app"}); err == nil || !strings.Contains(err.Error(), "needs a template image") {
		t.Errorf("a workdir outside the workspace without an image: %v", err)
	}
}

// output runs cmd in sb and returns what it wrote, both streams.
func output(t *testing.T, sb *Sandbox, cmd string) string {
	t.Helper()
	res, _ := run(t, sb, Options{Command: cmd}, 30*time.Second)
	return res.stdout + res.stderr
}
