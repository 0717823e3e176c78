package executor

import (
	"path/filepath"
	"strings"
	"testing"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	"github.com/conch-sh/conch/services/internal/conchtest"
)

func TestDiffFiles(t *testing.T) {
	f := func(kind string, size int64, mode, mtime string) fileState {
		return fileState{kind: kind, size: size, mode: mode, mtime: mtime}
	}
	before := map[string]fileState{
		"/home/workspace":     f("d", 60, "755", "1"),
		"/home/workspace/a":   f("f", 1, "644", "1"),
		"/home/workspace/b":   f("f", 2, "644", "1"),
		"/home/workspace/c":   f("f", 3, "644", "1"),
		"/home/workspace/dir": f("d", 40, "755", "1"),
		"/tmp/same":           f("f", 4, "644", "1"),
	}
	after := map[string]fileState{
		"/home/workspace":     f("d", 80, "755", "2"), // entries changed: not listed itself
		"/home/workspace/a":   f("f", 5, "644", "2"),  // written
		"/home/workspace/c":   f("f", 3, "755", "1"),  // chmod
		"/home/workspace/dir": f("d", 40, "700", "1"), // a directory's mode
		"/home/workspace/new": f("f", 7, "644", "2"),
		"/tmp/same":           f("f", 4, "644", "1"),
	}
	got, omitted := diffFiles(before, after, 10)
	var lines []string
	for _, c := range got {
		lines = append(lines, c.GetChange().String()+" "+c.GetPath())
	}
	want := []string{
		"PREVIEW_CHANGE_KIND_MODIFIED /home/workspace/a",
		"PREVIEW_CHANGE_KIND_DELETED /home/workspace/b",
		"PREVIEW_CHANGE_KIND_MODIFIED /home/workspace/c",
		"PREVIEW_CHANGE_KIND_MODIFIED /home/workspace/dir",
		"PREVIEW_CHANGE_KIND_CREATED /home/workspace/new",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") || omitted != 0 {
		t.Errorf("changes:\n%s\nomitted %d; want:\n%s", strings.Join(lines, "\n"), omitted, strings.Join(want, "\n"))
	}
	if got, omitted := diffFiles(before, after, 2); len(got) != 2 || omitted != 3 {
		t.Errorf("at most 2: %d listed, %d omitted; want 2 and 3", len(got), omitted)
	}
	// A path is valid UTF-8 and bounded.
	long := map[string]fileState{"/tmp/\xff" + strings.Repeat("é", 600): f("f", 1, "644", "1")}
	if got, _ := diffFiles(nil, long, 10); len(got) != 1 || len(got[0].GetPath()) > 512 || !strings.HasPrefix(got[0].GetPath(), "/tmp/\uFFFD") {
		t.Errorf("a long path that is not UTF-8 became %q", got[0].GetPath())
	}
}

func TestClip(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"abc", 5, "abc"},
		{"abcdef", 3, "abc"},
		{"aé", 2, "a"},
		{"a\xffb", 10, "a\uFFFDb"},
	} {
		if got := clip(tc.in, tc.n); got != tc.want {
			t.Errorf("clip(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

// A preview runs on a copy: the sandbox itself is untouched, the copy is
// gone afterwards, and a command past the preview's time is stopped.
// The copy is streamed through tar in memory, and a snapshot on btrfs
// storage.
func TestPreviewRunsOnACopy(t *testing.T) {
	t.Run("tmpfs", func(t *testing.T) { testPreviewRunsOnACopy(t, newRuntime(t)) })
	t.Run("btrfs", func(t *testing.T) {
		testPreviewRunsOnACopy(t, newRuntimeOn(t, filepath.Join(conchtest.Btrfs(t, 1<<30), "storage")))
	})
}

func testPreviewRunsOnACopy(t *testing.T, rt Runtime) {
	x := startExecutorOn(t, rt)
	ctx := as(t, "acme")
	id := createSandbox(t, x, "acme")
	if _, err := x.client.RunCommand(ctx, &executorv1.RunCommandRequest{SandboxId: id, Command: "echo old > /home/workspace/old; echo keep > /home/workspace/kept"}); err != nil {
		t.Fatal(err)
	}
	e, err := x.svc.lookup(ctx, "acme", id)
	if err != nil {
		t.Fatal(err)
	}
	settings := &approvalv1.ExecSettings{Preview: true, PreviewTimeoutSeconds: 2}
	p := x.svc.preview(ctx, "acme", e, &ExecParams{Command: "rm old; echo new > new; echo hi; sleep 0.1", Settings: settings}, "/home/workspace")
	if p.GetError() != "" || p.GetExitCode() != 0 || p.GetTimedOut() || p.GetStdout() != "hi\n" {
		t.Fatalf("preview %v", p)
	}
	var changes []string
	for _, c := range p.GetChanges() {
		changes = append(changes, c.GetChange().String()+" "+c.GetPath())
	}
	if want := "PREVIEW_CHANGE_KIND_CREATED /home/workspace/new,PREVIEW_CHANGE_KIND_DELETED /home/workspace/old"; strings.Join(changes, ",") != want {
		t.Errorf("changes %q, want %q", changes, want)
	}
	out, err := x.client.RunCommand(ctx, &executorv1.RunCommandRequest{SandboxId: id, Command: "ls /home/workspace"})
	if err != nil || out.GetStdout() != "kept\nold\n" {
		t.Errorf("the sandbox after its preview: %q %v, want it untouched", out.GetStdout(), err)
	}
	if n := len(x.svc.List("acme", "")); n != 1 {
		t.Errorf("%d sandboxes after the preview, want the copy gone", n)
	}

	p = x.svc.preview(ctx, "acme", e, &ExecParams{Command: "echo started; sleep 30", Settings: settings}, "/home/workspace")
	if !p.GetTimedOut() || p.GetStdout() != "started\n" {
		t.Errorf("a preview past its time: %v", p)
	}
}
