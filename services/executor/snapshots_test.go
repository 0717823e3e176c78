package executor

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	"github.com/conch-sh/conch/services/executor/wsclient"
	"github.com/conch-sh/conch/services/internal/conchtest"
	"github.com/conch-sh/conch/services/internal/quotas"
	"github.com/conch-sh/conch/services/workspace/workspacetest"
)

// startSnapshotStore serves a real workspace service on loopback and
// returns the executor's client of its snapshots.
func startSnapshotStore(t *testing.T) Snapshots {
	return wsclient.NewSnapshots(workspacetest.Start(t))
}

// The state a snapshot must keep: files with their modes and times,
// directories, symbolic and hard links, empty and sparse files, names
// with spaces and newlines, in the workspace and in /tmp.
const snapshotFixture = `set -e
cd /home/workspace
mkdir -p src/deep && printf 'hello\n' > src/deep/a.txt && chmod 640 src/deep/a.txt
touch -d '2001-02-03 04:05:06' src/deep/a.txt
printf '#!/bin/sh\necho run\n' > run.sh && chmod 755 run.sh
ln -s src/deep/a.txt link && ln src/deep/a.txt hard
: > empty && truncate -s 10M sparse && printf x >> sparse
printf 'odd' > 'a name
with a newline' && mkdir 'dir with spaces'
mkdir -p /tmp/cache && printf tmp > /tmp/cache/t && chmod 700 /tmp/cache
head -c 20000000 /dev/urandom > random
`

// snapshotState prints what snapshotFixture made, for comparison.
const snapshotState = `cd /home/workspace && find . /tmp/cache -printf '%p %y %m %s %l\n' | LC_ALL=C sort
stat -c '%Y %h' src/deep/a.txt; cat link run.sh /tmp/cache/t; ./run.sh; sha256sum random`

func TestSnapshotAndRestore(t *testing.T) {
	x := startExecutor(t, WithSnapshots(startSnapshotStore(t)), WithQuotas(quotas.Defaults))
	ctx := as(t, "acme")
	src := createSandbox(t, x, "acme")
	run := func(id, cmd string) string {
		t.Helper()
		resp, err := x.client.RunCommand(ctx, &executorv1.RunCommandRequest{SandboxId: id, Command: cmd, MaxOutputLength: 100000})
		if err != nil || resp.GetOutcome().GetExitCode() != 0 || resp.GetOutcome().ExitCode == nil {
			t.Fatalf("%s: %v %v", cmd, resp, err)
		}
		return resp.GetStdout()
	}
	run(src, snapshotFixture)
	want := run(src, snapshotState)

	snap, err := x.client.SnapshotSandbox(ctx, &executorv1.SnapshotSandboxRequest{SandboxId: src, Name: "fixture"})
	if err != nil {
		t.Fatal(err)
	}
	s := snap.GetSnapshot()
	if !strings.HasPrefix(s.GetId(), "snap-") || s.GetName() != "fixture" || s.GetSandboxId() != src || s.GetSizeBytes() < 20_000_000 || s.GetSizeBytes() > 21<<20 {
		t.Fatalf("snapshot %v: want an id, its name and source, 20 MB of random bytes and a sparse file not stored whole", s)
	}
	// The source runs on, and what it does next is not in the snapshot.
	run(src, "echo later > /home/workspace/later")

	restored, err := x.client.CreateSandbox(ctx, &executorv1.CreateSandboxRequest{Snapshot: s.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	if restored.GetSandbox().GetSnapshot() != s.GetId() {
		t.Errorf("restored sandbox says it started from %q", restored.GetSandbox().GetSnapshot())
	}
	if got := run(restored.GetId(), snapshotState); got != want {
		t.Errorf("restored state:\n%s\nwant:\n%s", got, want)
	}
	if got := run(restored.GetId(), "test -e /home/workspace/later && echo present || echo absent"); got != "absent\n" {
		t.Errorf("a file written after the snapshot is %s", got)
	}

	list, err := x.client.ListSnapshots(ctx, &executorv1.ListSnapshotsRequest{})
	if err != nil || len(list.GetSnapshots()) != 1 || list.GetSnapshots()[0].GetId() != s.GetId() {
		t.Fatalf("list: %v %v", list, err)
	}
	got, err := x.client.GetSnapshot(ctx, &executorv1.GetSnapshotRequest{Id: s.GetId()})
	if err != nil || got.GetSnapshot().GetSizeBytes() != s.GetSizeBytes() {
		t.Fatalf("get: %v %v", got, err)
	}
	used, _, err := quotas.Read(ctx, x.svc.etcd, quotas.Snapshots, "acme")
	if err != nil || used[quotas.Snapshots] != 1 || used[quotas.SnapshotBytes] != s.GetSizeBytes() {
		t.Errorf("quota usage %v %v, want one snapshot of %d bytes", used, err, s.GetSizeBytes())
	}

	// Another account sees none of it.
	other := as(t, "mallory")
	_, err = x.client.GetSnapshot(other, &executorv1.GetSnapshotRequest{Id: s.GetId()})
	wantCode(t, err, codes.NotFound, "not found")
	_, err = x.client.CreateSandbox(other, &executorv1.CreateSandboxRequest{Snapshot: s.GetId()})
	wantCode(t, err, codes.NotFound, "not found")
	_, err = x.client.DeleteSnapshot(other, &executorv1.DeleteSnapshotRequest{Id: s.GetId()})
	wantCode(t, err, codes.NotFound, "not found")
	_, err = x.client.SnapshotSandbox(other, &executorv1.SnapshotSandboxRequest{SandboxId: src})
	wantCode(t, err, codes.NotFound, "not found")
	if l, err := x.client.ListSnapshots(other, &executorv1.ListSnapshotsRequest{}); err != nil || len(l.GetSnapshots()) != 0 {
		t.Errorf("another account's list: %v %v", l, err)
	}

	for _, tc := range []struct {
		name string
		req  *executorv1.CreateSandboxRequest
		code codes.Code
		msg  string
	}{
		{"unknown", &executorv1.CreateSandboxRequest{Snapshot: "snap-00000000000000000000000000000000"}, codes.NotFound, "not found"},
		{"not an id", &executorv1.CreateSandboxRequest{Snapshot: "../../etc"}, codes.NotFound, "not found"},
		{"with persistent", &executorv1.CreateSandboxRequest{Snapshot: s.GetId(), Persistent: true, User: "alice"}, codes.InvalidArgument, "not both"},
	} {
		_, err := x.client.CreateSandbox(ctx, tc.req)
		wantCode(t, err, tc.code, tc.msg)
	}
	_, err = x.client.SnapshotSandbox(ctx, &executorv1.SnapshotSandboxRequest{SandboxId: src, Name: strings.Repeat("n", MaxNameChars+1)})
	wantCode(t, err, codes.InvalidArgument, "name")

	if _, err := x.client.DeleteSnapshot(ctx, &executorv1.DeleteSnapshotRequest{Id: s.GetId()}); err != nil {
		t.Fatal(err)
	}
	_, err = x.client.GetSnapshot(ctx, &executorv1.GetSnapshotRequest{Id: s.GetId()})
	wantCode(t, err, codes.NotFound, "not found")
	_, err = x.client.DeleteSnapshot(ctx, &executorv1.DeleteSnapshotRequest{Id: s.GetId()})
	wantCode(t, err, codes.NotFound, "not found")
	if used, _, _ := quotas.Read(ctx, x.svc.etcd, quotas.Snapshots, "acme"); used[quotas.Snapshots] != 0 || used[quotas.SnapshotBytes] != 0 {
		t.Errorf("quota usage after delete %v, want none", used)
	}
}

// TestSnapshotQuota: an account keeps at most its quota of snapshots and
// of their bytes; one over either is refused and nothing of it is kept.
func TestSnapshotQuota(t *testing.T) {
	q := quotas.Defaults
	q.Snapshots, q.SnapshotBytes = 1, 2<<20
	x := startExecutor(t, WithSnapshots(startSnapshotStore(t)), WithQuotas(q))
	ctx := as(t, "acme")
	id := createSandbox(t, x, "acme")
	if _, err := x.client.RunCommand(ctx, &executorv1.RunCommandRequest{SandboxId: id, Command: "head -c 3000000 /dev/urandom > /home/workspace/big"}); err != nil {
		t.Fatal(err)
	}
	_, err := x.client.SnapshotSandbox(ctx, &executorv1.SnapshotSandboxRequest{SandboxId: id})
	wantCode(t, err, codes.ResourceExhausted, "snapshot is larger than the 2097152 bytes the account's snapshot quota leaves")
	if l, err := x.client.ListSnapshots(ctx, &executorv1.ListSnapshotsRequest{}); err != nil || len(l.GetSnapshots()) != 0 {
		t.Fatalf("after a refused snapshot: %v %v", l, err)
	}
	if _, err := x.client.RunCommand(ctx, &executorv1.RunCommandRequest{SandboxId: id, Command: "rm /home/workspace/big"}); err != nil {
		t.Fatal(err)
	}
	if _, err := x.client.SnapshotSandbox(ctx, &executorv1.SnapshotSandboxRequest{SandboxId: id}); err != nil {
		t.Fatal(err)
	}
	_, err = x.client.SnapshotSandbox(ctx, &executorv1.SnapshotSandboxRequest{SandboxId: id})
	wantCode(t, err, codes.ResourceExhausted, "quota snapshots exceeded (1 of 1)")
}

// An executor without snapshot storage says so.
func TestSnapshotsNeedStorage(t *testing.T) {
	x := startExecutor(t)
	ctx := as(t, "acme")
	id := createSandbox(t, x, "acme")
	_, err := x.client.SnapshotSandbox(ctx, &executorv1.SnapshotSandboxRequest{SandboxId: id})
	wantCode(t, err, codes.FailedPrecondition, "snapshots need the workspace service")
	_, err = x.client.CreateSandbox(ctx, &executorv1.CreateSandboxRequest{Snapshot: "snap-00000000000000000000000000000000"})
	wantCode(t, err, codes.FailedPrecondition, "snapshots need the workspace service")
}

// A fork copies the same state whether sandboxes keep it in memory
// (streamed through tar) or on btrfs (snapshots).
func TestFork(t *testing.T) {
	t.Run("tmpfs", func(t *testing.T) { testFork(t, newRuntime(t)) })
	t.Run("btrfs", func(t *testing.T) {
		rt := newRuntimeOn(t, filepath.Join(conchtest.Btrfs(t, 2<<30), "storage"))
		if !rt.CopyOnWrite() {
			t.Fatal("a runtime on btrfs storage does not copy on write")
		}
		testFork(t, rt)
	})
}

func testFork(t *testing.T, rt Runtime) {
	x := startExecutorOn(t, rt, WithQuotas(quotas.Defaults))
	ctx := as(t, "acme")
	src, err := x.client.CreateSandbox(ctx, &executorv1.CreateSandboxRequest{Name: "src", Labels: map[string]string{"team": "infra"}, Limits: &executorv1.Limits{MemoryBytes: 256 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	run := func(id, cmd string) string {
		t.Helper()
		resp, err := x.client.RunCommand(ctx, &executorv1.RunCommandRequest{SandboxId: id, Command: cmd, MaxOutputLength: 100000})
		if err != nil || resp.GetOutcome().ExitCode == nil || resp.GetOutcome().GetExitCode() != 0 {
			t.Fatalf("%s: %v %v", cmd, resp, err)
		}
		return resp.GetStdout()
	}
	run(src.GetId(), snapshotFixture)
	want := run(src.GetId(), snapshotState)
	resp, err := x.client.ForkSandbox(ctx, &executorv1.ForkSandboxRequest{SandboxId: src.GetId(), Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetSandboxes()) != 2 {
		t.Fatalf("fork of 2 made %d", len(resp.GetSandboxes()))
	}
	for _, c := range resp.GetSandboxes() {
		if c.GetId() == src.GetId() || c.GetName() != "src" || c.GetLabels()["team"] != "infra" || c.GetLimits().GetMemoryBytes() != 256<<20 {
			t.Errorf("copy %v: want a new id with the source's name, labels and limits", c)
		}
		if got := run(c.GetId(), snapshotState); got != want {
			t.Errorf("copy %s state:\n%s\nwant:\n%s", c.GetId(), got, want)
		}
	}
	// Copies and source are apart from then on.
	a, b := resp.GetSandboxes()[0].GetId(), resp.GetSandboxes()[1].GetId()
	run(a, "echo mine > /home/workspace/only-a")
	if got := run(b, "ls /home/workspace/only-a 2>/dev/null || echo absent"); got != "absent\n" {
		t.Errorf("a copy sees another's file: %q", got)
	}
	if got := run(src.GetId(), "ls /home/workspace/only-a 2>/dev/null || echo absent"); got != "absent\n" {
		t.Errorf("the source sees a copy's file: %q", got)
	}
	used, _, err := quotas.Read(ctx, x.svc.etcd, quotas.Sandboxes, "acme")
	if err != nil || used[quotas.Sandboxes] != 3 || used[quotas.SandboxMemoryBytes] != 3*(256<<20) {
		t.Errorf("quota usage %v %v, want the source and two copies", used, err)
	}

	for _, tc := range []struct {
		name string
		ctx  context.Context
		req  *executorv1.ForkSandboxRequest
		code codes.Code
		msg  string
	}{
		{"too many", ctx, &executorv1.ForkSandboxRequest{SandboxId: src.GetId(), Count: MaxForks + 1}, codes.InvalidArgument, "count: must be 1 to 16, got 17"},
		{"negative", ctx, &executorv1.ForkSandboxRequest{SandboxId: src.GetId(), Count: -1}, codes.InvalidArgument, "count"},
		{"unknown", ctx, &executorv1.ForkSandboxRequest{SandboxId: "sb-nope", Count: 1}, codes.NotFound, "not found"},
		{"another account's", as(t, "mallory"), &executorv1.ForkSandboxRequest{SandboxId: src.GetId(), Count: 1}, codes.NotFound, "not found"},
	} {
		_, err := x.client.ForkSandbox(tc.ctx, tc.req)
		wantCode(t, err, tc.code, tc.msg)
	}
}

// A fork beyond the account's sandbox quota makes no copy at all.
func TestForkOverQuota(t *testing.T) {
	q := quotas.Defaults
	q.Sandboxes = 2
	x := startExecutor(t, WithQuotas(q))
	ctx := as(t, "acme")
	src := createSandbox(t, x, "acme")
	_, err := x.client.ForkSandbox(ctx, &executorv1.ForkSandboxRequest{SandboxId: src, Count: 2})
	wantCode(t, err, codes.ResourceExhausted, "quota sandboxes exceeded (2 of 2)")
	list, err := x.client.ListSandboxes(ctx, &executorv1.ListSandboxesRequest{})
	if err != nil || len(list.GetSandboxes()) != 1 {
		t.Errorf("after a refused fork: %v %v, want the source alone", list, err)
	}
}

func TestPauseAndResume(t *testing.T) {
	x := startExecutor(t, WithSnapshots(startSnapshotStore(t)), WithQuotas(quotas.Defaults))
	ctx := as(t, "acme")
	created, err := x.client.CreateSandbox(ctx, &executorv1.CreateSandboxRequest{Name: "p", Labels: map[string]string{"team": "infra"}, TtlSeconds: 3600})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetId()
	if _, err := x.client.RunCommand(ctx, &executorv1.RunCommandRequest{SandboxId: id, Command: "echo kept > /home/workspace/f; echo tmp > /tmp/t; cd /tmp"}); err != nil {
		t.Fatal(err)
	}
	paused, err := x.client.PauseSandbox(ctx, &executorv1.PauseSandboxRequest{SandboxId: id})
	if err != nil {
		t.Fatal(err)
	}
	if sb := paused.GetSandbox(); sb.GetState() != executorv1.SandboxState_SANDBOX_STATE_PAUSED || sb.GetName() != "p" || sb.GetLabels()["team"] != "infra" ||
		!sb.GetCreatedAt().AsTime().Equal(created.GetSandbox().GetCreatedAt().AsTime()) {
		t.Errorf("paused sandbox %v", sb)
	}
	if n := len(x.svc.List("acme", "")); n != 0 {
		t.Errorf("%d sandboxes running after the pause, want none", n)
	}
	used, _, _ := quotas.Read(ctx, x.svc.etcd, quotas.Sandboxes, "acme")
	if used[quotas.Sandboxes] != 0 {
		t.Errorf("a paused sandbox counts in the sandboxes quota: %v", used)
	}
	got, err := x.client.GetSandbox(ctx, &executorv1.GetSandboxRequest{Id: id})
	if err != nil || got.GetSandbox().GetState() != executorv1.SandboxState_SANDBOX_STATE_PAUSED {
		t.Errorf("GET of the paused sandbox: %v %v", got, err)
	}
	list, err := x.client.ListSandboxes(ctx, &executorv1.ListSandboxesRequest{Status: executorv1.SandboxState_SANDBOX_STATE_PAUSED, Label: []string{"team=infra"}})
	if err != nil || len(list.GetSandboxes()) != 1 || list.GetSandboxes()[0].GetId() != id {
		t.Errorf("list of paused: %v %v", list, err)
	}
	if l, _ := x.client.ListSandboxes(as(t, "mallory"), &executorv1.ListSandboxesRequest{}); len(l.GetSandboxes()) != 0 {
		t.Errorf("another account lists %v", l)
	}
	_, err = x.client.RunCommand(as(t, "mallory"), &executorv1.RunCommandRequest{SandboxId: id, Command: "true"})
	wantCode(t, err, codes.NotFound, "not found")

	// A command resumes it, with its id, files and settings; processes
	// and the shell's directory are not kept.
	out, err := x.client.RunCommand(ctx, &executorv1.RunCommandRequest{SandboxId: id, Command: "cat /home/workspace/f /tmp/t; pwd"})
	if err != nil || out.GetStdout() != "kept\ntmp\n/home/workspace\n" {
		t.Fatalf("a command to the paused sandbox: %q %v", out.GetStdout(), err)
	}
	got, err = x.client.GetSandbox(ctx, &executorv1.GetSandboxRequest{Id: id})
	if sb := got.GetSandbox(); err != nil || sb.GetState() != executorv1.SandboxState_SANDBOX_STATE_READY || sb.GetName() != "p" || sb.GetTtlSeconds() != 3600 ||
		!sb.GetExpiresAt().AsTime().Equal(created.GetSandbox().GetExpiresAt().AsTime()) {
		t.Errorf("resumed sandbox %v %v: want it ready, with its name and its first lifetime", sb, err)
	}
	if l, _ := x.client.ListSnapshots(ctx, &executorv1.ListSnapshotsRequest{}); len(l.GetSnapshots()) != 0 {
		t.Errorf("the pause's snapshot is left after the resume: %v", l)
	}

	// Paused again, a resume brings it back; paused a third time, a
	// delete removes it with its snapshot.
	if _, err := x.client.PauseSandbox(ctx, &executorv1.PauseSandboxRequest{SandboxId: id}); err != nil {
		t.Fatal(err)
	}
	if r, err := x.client.ResumeSandbox(ctx, &executorv1.ResumeSandboxRequest{SandboxId: id}); err != nil || r.GetSandbox().GetState() != executorv1.SandboxState_SANDBOX_STATE_READY {
		t.Fatalf("resume: %v %v", r, err)
	}
	if _, err := x.client.PauseSandbox(ctx, &executorv1.PauseSandboxRequest{SandboxId: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := x.client.DestroySandbox(ctx, &executorv1.DestroySandboxRequest{Id: id}); err != nil {
		t.Fatal(err)
	}
	_, err = x.client.GetSandbox(ctx, &executorv1.GetSandboxRequest{Id: id})
	wantCode(t, err, codes.NotFound, "not found")
	if l, _ := x.client.ListSnapshots(ctx, &executorv1.ListSnapshotsRequest{}); len(l.GetSnapshots()) != 0 {
		t.Errorf("a deleted paused sandbox left its snapshot: %v", l)
	}
	_, err = x.client.ResumeSandbox(ctx, &executorv1.ResumeSandboxRequest{SandboxId: id})
	wantCode(t, err, codes.NotFound, "not found")

	// What a pause cannot keep is refused.
	sk, err := x.client.CreateSandbox(ctx, skills(&executorv1.SkillBundle{Name: "a", Files: []*executorv1.SkillFile{{Path: "SKILL.md", Mode: 0o644, Content: []byte("x")}}}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = x.client.PauseSandbox(ctx, &executorv1.PauseSandboxRequest{SandboxId: sk.GetId()})
	wantCode(t, err, codes.InvalidArgument, "skills, which are not kept while paused")
}

// A sandbox that asked to pause when idle is paused at its idle timeout,
// and a paused sandbox past its lifetime is deleted with its snapshot.
func TestPauseWhenIdleAndLifetime(t *testing.T) {
	x := startExecutor(t, WithSnapshots(startSnapshotStore(t)))
	ctx := as(t, "acme")
	created, err := x.client.CreateSandbox(ctx, &executorv1.CreateSandboxRequest{IdleTimeoutSeconds: 1, PauseWhenIdle: true, TtlSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetId()
	if !created.GetSandbox().GetPauseWhenIdle() {
		t.Errorf("created %v, want pause_when_idle", created.GetSandbox())
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		got, err := x.client.GetSandbox(ctx, &executorv1.GetSandboxRequest{Id: id})
		if err != nil {
			t.Fatal(err)
		}
		if sb := got.GetSandbox(); sb.GetState() == executorv1.SandboxState_SANDBOX_STATE_PAUSED {
			if sb.GetTtlSeconds() != 600 || !sb.GetExpiresAt().AsTime().Equal(created.GetSandbox().GetExpiresAt().AsTime()) {
				t.Errorf("paused %v: want its lifetime kept", sb)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("an idle sandbox that asked to pause was not paused")
		}
	}
	x.svc.endPaused(ctx, time.Now())
	if _, err := x.client.GetSandbox(ctx, &executorv1.GetSandboxRequest{Id: id}); err != nil {
		t.Errorf("a paused sandbox within its lifetime was deleted: %v", err)
	}
	x.svc.endPaused(ctx, time.Now().Add(11*time.Minute))
	_, err = x.client.GetSandbox(ctx, &executorv1.GetSandboxRequest{Id: id})
	wantCode(t, err, codes.NotFound, "not found")
	if l, _ := x.client.ListSnapshots(ctx, &executorv1.ListSnapshotsRequest{}); len(l.GetSnapshots()) != 0 {
		t.Errorf("a paused sandbox past its lifetime left its snapshot: %v", l)
	}
}
