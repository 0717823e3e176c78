package executor

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	workspacev1 "github.com/conch-sh/conch/gen/go/conch/workspace/v1"
	"github.com/conch-sh/conch/services/executor/templatecache"
	"github.com/conch-sh/conch/services/executor/wsclient"
	"github.com/conch-sh/conch/services/internal/image"
	"github.com/conch-sh/conch/services/internal/image/imagetest"
	"github.com/conch-sh/conch/services/internal/quotas"
	"github.com/conch-sh/conch/services/workspace/templates"
	"github.com/conch-sh/conch/services/workspace/workspacetest"
)

// templateExecutor serves a real workspace service with templates and an
// executor whose sandboxes start from them.
func templateExecutor(t *testing.T) (*testExecutor, workspacev1.TemplateServiceClient, *templatecache.Cache) {
	t.Helper()
	ws, tc := workspacetest.StartTemplates(t, templates.Config{})
	// Sandboxes' uids bind roots from the cache: every parent must be
	// searchable.
	dir := filepath.Join(t.TempDir(), "templates")
	for d := filepath.Dir(dir); d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	src := wsclient.NewTemplates(tc)
	cache, err := templatecache.New(dir, "test", 1<<30, image.Limits{MaxBytes: 1 << 30, MaxFiles: 1 << 20}, src, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cache.Close() })
	x := startExecutor(t, WithSnapshots(wsclient.NewSnapshots(ws)), WithTemplates(src, cache), WithQuotas(quotas.Defaults), WithReadyTimeout(3*time.Second))
	return x, tc, cache
}

// pushImage gives account's template name the image archive at path.
func pushImage(t *testing.T, ctx context.Context, tc workspacev1.TemplateServiceClient, name, path string) (*workspacev1.Template, error) {
	t.Helper()
	stream, err := tc.PutTemplateImage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&workspacev1.PutTemplateImageRequest{Message: &workspacev1.PutTemplateImageRequest_Name{Name: name}}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		n, rerr := f.Read(buf)
		if n > 0 {
			if err := stream.Send(&workspacev1.PutTemplateImageRequest{Message: &workspacev1.PutTemplateImageRequest_Data{Data: buf[:n]}}); err != nil {
				break // the answer says why
			}
		}
		if rerr == io.EOF {
			break
		}
	}
	resp, err := stream.CloseAndRecv()
	return resp.GetTemplate(), err
}

func TestSandboxFromTemplate(t *testing.T) {
	x, tc, cache := templateExecutor(t)
	ctx := as(t, "acme")
	img := imagetest.Minimal(t, imagetest.Options{
		Files: []imagetest.File{
			{Path: "opt", Dir: true}, {Path: "opt/marker", Body: "from the image\n"},
			{Path: "app", Dir: true}, {Path: "app/seed.txt", Body: "seed\n"},
			{Path: "opt/tool/bin", Dir: true}, {Path: "opt/tool/bin/hello", Body: "#!/bin/sh\necho hello from the tool\n", Mode: 0o755},
		},
		Env:     []string{"GREETING=hi", "LD_PRELOAD=/opt/evil.so", "PATH=/opt/tool/bin:/usr/bin:/bin"},
		Workdir: "/app",
	})
	if _, err := tc.CreateTemplate(ctx, &workspacev1.CreateTemplateRequest{
		Name: "mini", StartCommand: "echo started > /tmp/started", ReadyCommand: "test -f /tmp/started",
		Env: map[string]string{"MODE": "test"},
	}); err != nil {
		t.Fatal(err)
	}
	tpl, err := pushImage(t, ctx, tc, "mini", imagetest.Save(t, img))
	if err != nil {
		t.Fatal(err)
	}
	if tpl.GetStatus() != workspacev1.TemplateStatus_TEMPLATE_STATUS_READY || !strings.HasPrefix(tpl.GetDigest(), "sha256:") || tpl.GetWorkdir() != "/app" {
		t.Fatalf("template after its push: %v", tpl)
	}
	if w := strings.Join(tpl.GetWarnings(), "\n"); !strings.Contains(w, "LD_PRELOAD") {
		t.Errorf("warnings do not name the image's LD_PRELOAD: %q", w)
	}

	resp, err := x.client.CreateSandbox(ctx, &executorv1.CreateSandboxRequest{Template: "mini"})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetId()
	run := func(id, cmd string) (string, int32) {
		t.Helper()
		r, err := x.client.RunCommand(ctx, &executorv1.RunCommandRequest{SandboxId: id, Command: cmd, MaxOutputLength: 100000})
		if err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
		return r.GetStdout() + r.GetStderr(), r.GetOutcome().GetExitCode()
	}
	for _, c := range []struct{ cmd, want string }{
		{"pwd", "/app\n"},
		{"cat /opt/marker", "from the image\n"},
		{"cat /etc/os-release", "ID=conch-test\n"},
		{"cat /tmp/started", "started\n"},
		{"echo $GREETING $MODE ${LD_PRELOAD:-unset}", "hi test unset\n"},
		{"hello", "hello from the tool\n"},
		{"id -u", "1000\n"},
		// The host's programs are not there: only the image's.
		{"test -e /usr/bin/bwrap && echo host || echo image", "image\n"},
		// The workdir is writable over the image's files.
		{"echo more >> seed.txt && cat seed.txt", "seed\nmore\n"},
	} {
		if got, code := run(id, c.cmd); got != c.want || code != 0 {
			t.Errorf("%s: got %q (exit %d), want %q", c.cmd, got, code, c.want)
		}
	}
	// The rest of the image is read-only.
	for _, cmd := range []string{"touch /opt/new", "rm /opt/marker", "touch /usr/bin/new"} {
		if out, code := run(id, cmd); code == 0 {
			t.Errorf("%s succeeded: %q", cmd, out)
		}
	}

	// A snapshot keeps the workdir, and its copies start from its
	// template.
	snap, err := x.client.SnapshotSandbox(ctx, &executorv1.SnapshotSandboxRequest{SandboxId: id})
	if err != nil {
		t.Fatal(err)
	}
	if snap.GetSnapshot().GetTemplate() != "mini" {
		t.Errorf("snapshot's template = %q", snap.GetSnapshot().GetTemplate())
	}
	copy, err := x.client.CreateSandbox(ctx, &executorv1.CreateSandboxRequest{Snapshot: snap.GetSnapshot().GetId()})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := run(copy.GetId(), "cat seed.txt /opt/marker"); got != "seed\nmore\nfrom the image\n" {
		t.Errorf("the snapshot's copy has %q", got)
	}
	if copy.GetSandbox().GetTemplate() != "mini" {
		t.Errorf("copy's template = %q", copy.GetSandbox().GetTemplate())
	}
	// Each sandbox has its own layer: the copy's change is not the
	// source's.
	run(copy.GetId(), "echo copy > seed.txt")
	if got, _ := run(id, "cat seed.txt"); got != "seed\nmore\n" {
		t.Errorf("the source sees %q after its copy wrote", got)
	}
	if cache.Used() == 0 {
		t.Error("the cache holds no root")
	}
	for _, s := range []string{id, copy.GetId()} {
		if _, err := x.client.DestroySandbox(ctx, &executorv1.DestroySandboxRequest{Id: s}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestTemplateRefusals(t *testing.T) {
	x, tc, _ := templateExecutor(t)
	ctx := as(t, "acme")
	for _, name := range []string{"never", "slow"} {
		if _, err := tc.CreateTemplate(ctx, &workspacev1.CreateTemplateRequest{Name: name, ReadyCommand: "false"}); err != nil {
			t.Fatal(err)
		}
	}
	// Another account's template is not found.
	if _, err := x.client.CreateSandbox(as(t, "other"), &executorv1.CreateSandboxRequest{Template: "never"}); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("another account's template: %v", err)
	}
	// A setuid file refuses the image, and the template says why.
	img := imagetest.Minimal(t, imagetest.Options{Files: []imagetest.File{{Path: "usr/bin/su", Body: "x", Mode: 0o4755}}})
	if _, err := pushImage(t, ctx, tc, "never", imagetest.Save(t, img)); err == nil || !strings.Contains(err.Error(), "setuid") {
		t.Errorf("a setuid image: %v", err)
	}
	got, err := tc.GetTemplate(ctx, &workspacev1.GetTemplateRequest{Name: "never"})
	if err != nil || got.GetTemplate().GetStatus() != workspacev1.TemplateStatus_TEMPLATE_STATUS_FAILED || !strings.Contains(got.GetTemplate().GetError(), "setuid") {
		t.Errorf("the refused template: %v %v", got, err)
	}
	if _, err := x.client.CreateSandbox(ctx, &executorv1.CreateSandboxRequest{Template: "never"}); err == nil || !strings.Contains(err.Error(), "failed to build") {
		t.Errorf("a sandbox of a failed template: %v", err)
	}
	// A ready command that never succeeds fails the create, and leaves
	// no sandbox.
	if _, err := x.client.CreateSandbox(ctx, &executorv1.CreateSandboxRequest{Template: "slow"}); err == nil || !strings.Contains(err.Error(), "ready command") {
		t.Errorf("a ready command that fails: %v", err)
	}
	list, err := x.client.ListSandboxes(ctx, &executorv1.ListSandboxesRequest{})
	if err != nil || len(list.GetSandboxes()) != 0 {
		t.Errorf("sandboxes left: %v %v", list, err)
	}
}
