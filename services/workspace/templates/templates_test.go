package templates

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/conch-sh/conch/services/internal/image/imagetest"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/store/fsstore"
)

func newStore(t *testing.T, cfg Config) *Store {
	t.Helper()
	st, err := fsstore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxTemplates == 0 {
		cfg.MaxTemplates = 3
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = 256 << 20
	}
	if cfg.MaxFiles == 0 {
		cfg.MaxFiles = 10000
	}
	cfg.BuildDir = t.TempDir()
	s := New(st, cfg)
	t.Cleanup(s.Close)
	return s
}

func TestCreateChecksSettings(t *testing.T) {
	s := newStore(t, Config{})
	ctx := context.Background()
	for _, c := range []struct {
		name string
		rec  Record
		want string
	}{
		{"bad name", Record{Name: "Bad"}, "name:"},
		{"long name", Record{Name: strings.Repeat("a", 64)}, "name:"},
		{"env a request may not set", Record{Name: "a", Env: map[string]string{"LD_PRELOAD": "/x.so"}}, "env:"},
		{"relative workdir", Record{Name: "a", Workdir: "app"}, "workdir:"},
		{"workdir in /proc", Record{Name: "a", Workdir: "/proc/self"}, "workdir:"},
		{"unclean workdir", Record{Name: "a", Workdir: "/app/../etc"}, "workdir:"},
		{"NUL in a command", Record{Name: "a", StartCommand: "a\x00b"}, "start_command:"},
		{"registry not allowed", Record{Name: "a", Image: "registry.example.com/app:1"}, "image:"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := s.Create(ctx, "acme", c.rec)
			if errs.KindOf(err) != errs.InvalidArgument || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want InvalidArgument about %s", err, c.want)
			}
		})
	}
}

func TestTemplateLifecycle(t *testing.T) {
	s := newStore(t, Config{MaxTemplates: 2})
	ctx := context.Background()
	rec, err := s.Create(ctx, "acme", Record{Name: "plain", Workdir: "/home/workspace/app", Env: map[string]string{"MODE": "x"}})
	if err != nil || rec.Status != Ready || rec.Digest != "" {
		t.Fatalf("a template without an image: %+v %v", rec, err)
	}
	if _, err := s.Create(ctx, "acme", Record{Name: "plain"}); errs.KindOf(err) != errs.AlreadyExists {
		t.Errorf("a second template of one name: %v", err)
	}
	if _, err := s.Get(ctx, "other", "plain"); errs.KindOf(err) != errs.NotFound {
		t.Errorf("another account's template: %v", err)
	}
	img := imagetest.Minimal(t, imagetest.Options{Env: []string{"PATH=/usr/bin", "GREETING=hi", "PYTHONPATH=/x"}, Workdir: "/srv"})
	f, err := os.Open(imagetest.Save(t, img))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rec, err = s.PutImage(ctx, "acme", "plain", f)
	if err != nil {
		t.Fatal(err)
	}
	// The user's workdir and env win over the image's; the image's
	// variables a request could not set are left out, and said.
	if rec.Status != Ready || rec.Workdir != "/home/workspace/app" || rec.Env["MODE"] != "x" || rec.Env["GREETING"] != "hi" || rec.Env["PYTHONPATH"] != "" {
		t.Errorf("after the push: %+v", rec)
	}
	if len(rec.Warnings) != 1 || !strings.Contains(rec.Warnings[0], "PYTHONPATH") {
		t.Errorf("warnings: %q", rec.Warnings)
	}
	rc, size, err := s.OpenRoot(ctx, "acme", "plain", rec.Digest)
	if err != nil || size != rec.Size {
		t.Fatalf("root: %d %v", size, err)
	}
	rc.Close()
	if _, _, err := s.OpenRoot(ctx, "acme", "plain", "sha256:"+strings.Repeat("0", 64)); errs.KindOf(err) != errs.FailedPrecondition {
		t.Errorf("a root of another digest: %v", err)
	}
	if _, err := s.Create(ctx, "acme", Record{Name: "second"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, "acme", Record{Name: "third"}); errs.KindOf(err) != errs.ResourceExhausted || !strings.Contains(err.Error(), "(2 of 2)") {
		t.Errorf("beyond --max-templates: %v", err)
	}
	list, err := s.List(ctx, "acme")
	if err != nil || len(list) != 2 || list[0].Name != "plain" || list[1].Name != "second" {
		t.Errorf("list: %+v %v", list, err)
	}
	if ok, err := s.Delete(ctx, "acme", "plain"); !ok || err != nil {
		t.Fatalf("delete: %v %v", ok, err)
	}
	if _, _, err := s.OpenRoot(ctx, "acme", "plain", rec.Digest); errs.KindOf(err) != errs.NotFound {
		t.Errorf("a deleted template's root: %v", err)
	}
	for info, err := range s.st.List(ctx, prefix("acme")+"plain/", true) {
		t.Errorf("left after delete: %v %v", info.Key, err)
	}
}

func TestPutImageRefusals(t *testing.T) {
	s := newStore(t, Config{MaxBytes: 1 << 20})
	ctx := context.Background()
	if _, err := s.Create(ctx, "acme", Record{Name: "t"}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, body, want string
		kind             errs.Kind
	}{
		{"not an archive", "garbage", "", errs.InvalidArgument},
		{"larger than the limit", strings.Repeat("x", 1<<20+1), "larger than the limit of 1 MiB", errs.ResourceExhausted},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := s.PutImage(ctx, "acme", "t", strings.NewReader(c.body))
			if errs.KindOf(err) != c.kind || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v (%v), want %v about %q", err, errs.KindOf(err), c.kind, c.want)
			}
		})
	}
	// The oversized upload changed nothing; the garbage one failed the
	// template, which says why.
	rec, err := s.Get(ctx, "acme", "t")
	if err != nil || rec.Status != Failed || rec.Error == "" {
		t.Errorf("after the refusals: %+v %v", rec, err)
	}
}

func TestPullFromAllowedRegistry(t *testing.T) {
	reg := httptest.NewServer(registry.New())
	t.Cleanup(reg.Close)
	host := strings.TrimPrefix(reg.URL, "http://")
	ref, err := name.ParseReference(host+"/team/mini:1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, imagetest.Minimal(t, imagetest.Options{Workdir: "/srv"})); err != nil {
		t.Fatal(err)
	}
	s := newStore(t, Config{Registries: []string{host}, Insecure: []string{host}, Transport: http.DefaultTransport})
	ctx := context.Background()
	if _, err := s.Create(ctx, "acme", Record{Name: "pulled", Image: host + "/team/mini:1"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		rec, err := s.Get(ctx, "acme", "pulled")
		if err != nil {
			t.Fatal(err)
		}
		if rec.Status == Ready && rec.Digest != "" && rec.Workdir == "/srv" {
			break
		}
		if rec.Status == Failed || time.Now().After(deadline) {
			t.Fatalf("the pull: %+v", rec)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A missing image fails the template with the registry's answer.
	if _, err := s.Create(ctx, "acme", Record{Name: "missing", Image: host + "/team/none:1"}); err != nil {
		t.Fatal(err)
	}
	for {
		rec, err := s.Get(ctx, "acme", "missing")
		if err != nil {
			t.Fatal(err)
		}
		if rec.Status == Failed {
			if rec.Error == "" {
				t.Error("a failed pull without its reason")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pull of a missing image: %+v", rec)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A template deleted while its image is built stays deleted, and its
// root is not kept.
func TestDeletedWhileBuilding(t *testing.T) {
	s := newStore(t, Config{})
	ctx := context.Background()
	if _, err := s.Create(ctx, "acme", Record{Name: "gone"}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(imagetest.Save(t, imagetest.Minimal(t, imagetest.Options{})))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// The delete lands while the archive is read.
	r := &deleteAfterRead{r: f, del: func() { _, _ = s.Delete(ctx, "acme", "gone") }}
	if _, err := s.PutImage(ctx, "acme", "gone", r); errs.KindOf(err) != errs.NotFound {
		t.Errorf("a build of a deleted template: %v", err)
	}
	if _, err := s.Get(ctx, "acme", "gone"); errs.KindOf(err) != errs.NotFound {
		t.Errorf("the deleted template is back: %v", err)
	}
	for info, err := range s.st.List(ctx, prefix("acme")+"gone/", true) {
		t.Errorf("left after the build: %v %v", info.Key, err)
	}
}

// deleteAfterRead calls del once r is read to its end.
type deleteAfterRead struct {
	r    io.Reader
	del  func()
	done bool
}

func (d *deleteAfterRead) Read(p []byte) (int, error) {
	n, err := d.r.Read(p)
	if err == io.EOF && !d.done {
		d.done = true
		d.del()
	}
	return n, err
}
