package executor

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	"github.com/conch-sh/conch/services/internal/ceiling"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/quotas"
)

// TestCeilings: every number a tenant sets on a sandbox or a command is
// held to the operator's ceiling, with a 400 naming the field and the
// ceiling; a sandbox that asks for no idle timeout gets the ceiling's
// unless the operator allows none.
func TestCeilings(t *testing.T) {
	c := ceiling.Defaults
	c.MemoryBytes, c.Pids, c.CPUMillicores = 1<<30, 512, 2000
	c.EphemeralWorkspaceBytes, c.WorkspaceFiles = 64<<20, 5000
	c.CommandTimeout, c.OutputLength, c.IdleTimeout = 10*time.Second, 1000, time.Hour
	x := startExecutor(t, WithCeilings(c))
	ctx := as(t, "acme")
	for _, tc := range []struct {
		name   string
		limits *executorv1.Limits
		idle   int32
		want   string
	}{
		{"memory of a TiB", &executorv1.Limits{MemoryBytes: 1 << 40}, 0, "limits.memory_bytes: 1099511627776 is above the ceiling of 1073741824"},
		{"a million pids", &executorv1.Limits{Pids: 1_000_000}, 0, "limits.pids: 1000000 is above the ceiling of 512"},
		{"all the CPUs", &executorv1.Limits{CpuMillicores: 64_000}, 0, "limits.cpu_millicores: 64000 is above the ceiling of 2000"},
		{"a large in-memory workspace", &executorv1.Limits{EphemeralWorkspaceBytes: 1 << 30}, 0, "limits.ephemeral_workspace_bytes: 1073741824 is above the ceiling of 67108864"},
		{"many files", &executorv1.Limits{WorkspaceFiles: 1 << 20}, 0, "limits.workspace_files: 1048576 is above the ceiling of 5000"},
		{"a day idle", nil, 86400, "idle_timeout_seconds: 86400 is above the ceiling of 3600"},
		{"tiny pids", &executorv1.Limits{Pids: 2}, 0, "limits.pids: must be 0 (the default) or at least 16, got 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := x.client.CreateSandbox(ctx, &executorv1.CreateSandboxRequest{Limits: tc.limits, IdleTimeoutSeconds: tc.idle})
			wantCode(t, err, codes.InvalidArgument, tc.want)
		})
	}

	// At the ceiling is allowed; no idle timeout is the ceiling's.
	resp, err := x.client.CreateSandbox(ctx, &executorv1.CreateSandboxRequest{Limits: &executorv1.Limits{MemoryBytes: 1 << 30, Pids: 512}})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetSandbox().GetIdleTimeoutSeconds(); got != 3600 {
		t.Errorf("idle_timeout_seconds 0 became %d, want the ceiling, 3600", got)
	}
	id := resp.GetId()
	for _, tc := range []struct {
		name    string
		timeout int32
		output  int32
		want    string
	}{
		{"a long command", 60, 0, "timeout_seconds: 60 is above the ceiling of 10"},
		{"a long output", 0, 5000, "max_output_length: 5000 is above the ceiling of 1000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := x.client.RunCommand(ctx, &executorv1.RunCommandRequest{SandboxId: id, Command: "true", TimeoutSeconds: tc.timeout, MaxOutputLength: tc.output})
			wantCode(t, err, codes.InvalidArgument, tc.want)
			stream, err := x.client.Exec(ctx, &executorv1.ExecRequest{SandboxId: id, Command: "true", TimeoutSeconds: tc.timeout, MaxOutputLength: tc.output})
			if err == nil {
				_, err = stream.Recv()
			}
			wantCode(t, err, codes.InvalidArgument, tc.want)
		})
	}
	// The default output bound is within the ceiling.
	out, err := x.client.RunCommand(ctx, &executorv1.RunCommandRequest{SandboxId: id, Command: "head -c 3000 /dev/zero | tr '\\0' a"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.GetStdout(), strings.Repeat("a", 1001)) {
		t.Errorf("default output of %d characters, want at most the ceiling of 1000", len(out.GetStdout()))
	}
}

// TestNeverIdleWhereAllowed: an operator may let sandboxes without an
// idle timeout live until destroyed.
func TestNeverIdleWhereAllowed(t *testing.T) {
	c := ceiling.Defaults
	c.NeverIdle = true
	x := startExecutor(t, WithCeilings(c))
	resp, err := x.client.CreateSandbox(as(t, "acme"), &executorv1.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetSandbox().GetIdleTimeoutSeconds(); got != 0 {
		t.Errorf("idle_timeout_seconds %d, want 0 (never)", got)
	}
}

// TestSandboxLifetime: a sandbox busy all the time still ends at its
// lifetime: the operator's ceiling unless it asked for less, and never
// more.
func TestSandboxLifetime(t *testing.T) {
	c := ceiling.Defaults
	c.SandboxLifetime = time.Hour
	x := startExecutor(t, WithCeilings(c))
	ctx := as(t, "acme")
	_, err := x.client.CreateSandbox(ctx, &executorv1.CreateSandboxRequest{TtlSeconds: 3601})
	wantCode(t, err, codes.InvalidArgument, "ttl_seconds: 3601 is above the ceiling of 3600")
	_, err = x.client.CreateSandbox(ctx, &executorv1.CreateSandboxRequest{TtlSeconds: -1})
	wantCode(t, err, codes.InvalidArgument, "ttl_seconds: must not be negative")

	ceil, err := x.client.CreateSandbox(ctx, &executorv1.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	sb := ceil.GetSandbox()
	if sb.GetTtlSeconds() != 3600 || !sb.GetExpiresAt().AsTime().Equal(sb.GetCreatedAt().AsTime().Add(time.Hour)) {
		t.Errorf("ttl_seconds 0 gave ttl %d, expires_at %v (created %v); want the ceiling's hour", sb.GetTtlSeconds(), sb.GetExpiresAt().AsTime(), sb.GetCreatedAt().AsTime())
	}

	resp, err := x.client.CreateSandbox(ctx, &executorv1.CreateSandboxRequest{IdleTimeoutSeconds: 3600, TtlSeconds: 2})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		// Busy: a command every 200ms keeps it from being idle.
		_, err := x.client.RunCommand(ctx, &executorv1.RunCommandRequest{SandboxId: resp.GetId(), Command: "true"})
		if status.Code(err) == codes.NotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a sandbox past its lifetime still runs commands: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := x.client.GetSandbox(ctx, &executorv1.GetSandboxRequest{Id: ceil.GetId()}); err != nil {
		t.Errorf("the sandbox of an hour ended with the one of 2 s: %v", err)
	}
}

// TestNoLifetimeWhereUnbounded: with no lifetime ceiling, a sandbox that
// asks for none has none, and any lifetime may be asked for.
func TestNoLifetimeWhereUnbounded(t *testing.T) {
	c := ceiling.Defaults
	c.SandboxLifetime = 0
	x := startExecutor(t, WithCeilings(c))
	for _, ttl := range []int32{0, 1 << 30} {
		resp, err := x.client.CreateSandbox(as(t, "acme"), &executorv1.CreateSandboxRequest{TtlSeconds: ttl})
		if err != nil {
			t.Fatal(err)
		}
		if sb := resp.GetSandbox(); sb.GetTtlSeconds() != ttl || (ttl == 0) != (sb.GetExpiresAt() == nil) {
			t.Errorf("ttl_seconds %d gave ttl %d, expires_at %v", ttl, sb.GetTtlSeconds(), sb.GetExpiresAt())
		}
	}
}

// TestFairShare: past three quarters of its capacity, an executor keeps
// the rest for accounts holding less than their share; and sandboxes
// count against their account's quota across its creates.
func TestFairShare(t *testing.T) {
	x := startExecutor(t, WithMaxSandboxes(4), WithQuotas(quotas.Defaults))
	create := func(account string) error {
		_, err := x.client.CreateSandbox(as(t, account), &executorv1.CreateSandboxRequest{})
		return err
	}
	for _, a := range []string{"big", "big", "small"} {
		if err := create(a); err != nil {
			t.Fatal(err)
		}
	}
	// Three of four taken: "big" holds its share (4 / 2 accounts).
	wantCode(t, create("big"), codes.ResourceExhausted, "fair share (2 of 4 sandboxes)")
	if err := create("small"); err != nil {
		t.Fatalf("the account below its share: %v", err)
	}
}

// TestSandboxQuota: an account's sandboxes count against its quota, and
// a destroyed one makes room.
func TestSandboxQuota(t *testing.T) {
	q := quotas.Defaults
	q.Sandboxes = 1
	x := startExecutor(t, WithQuotas(q))
	ctx := as(t, "acme")
	first, err := x.client.CreateSandbox(ctx, &executorv1.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = x.client.CreateSandbox(ctx, &executorv1.CreateSandboxRequest{})
	wantCode(t, err, codes.ResourceExhausted, "quota sandboxes exceeded (1 of 1)")
	if _, err := x.client.DestroySandbox(ctx, &executorv1.DestroySandboxRequest{Id: first.GetId()}); err != nil {
		t.Fatal(err)
	}
	if _, err := x.client.CreateSandbox(ctx, &executorv1.CreateSandboxRequest{}); err != nil {
		t.Fatalf("after a destroy: %v", err)
	}
}

// TestAdmission: with its one work slot held by a command, the executor
// turns a new sandbox away once it waited its while (ResourceExhausted,
// marked so that the router tries elsewhere) rather than slowing what it
// holds; a command of a sandbox it holds waits instead; once the slot is
// free, creates go through again.
func TestAdmission(t *testing.T) {
	x := startExecutor(t, WithAdmission(1, 100*time.Millisecond))
	ctx := as(t, "acme")
	id := createSandbox(t, x, "acme")
	run := func(cmd string) execEvents {
		s, err := x.client.Exec(ctx, &executorv1.ExecRequest{SandboxId: id, Command: cmd})
		if err != nil {
			t.Fatal(err)
		}
		return collect(t, s)
	}
	// Within workHold: the command keeps its slot to its end.
	long := make(chan execEvents, 1)
	go func() { long <- run("sleep 0.8") }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		release, err := x.svc.admit.Admit(t.Context(), "probe", 0)
		if err != nil {
			break
		}
		release()
		if time.Now().After(deadline) {
			t.Fatal("the command never took the slot")
		}
		time.Sleep(5 * time.Millisecond)
	}
	_, err := x.client.CreateSandbox(as(t, "other"), &executorv1.CreateSandboxRequest{})
	wantCode(t, err, codes.ResourceExhausted, "is busy: no work slot came free in 100ms")
	if !errs.HasReason(err, codes.ResourceExhausted, "EXECUTOR_FULL") {
		t.Errorf("the refusal is not marked for the router to try elsewhere: %v", err)
	}
	// A command waits for the slot.
	if ev := run("echo after"); ev.stdout.String() != "after\n" {
		t.Fatalf("a command behind the slot: %+v", ev)
	}
	if ev := <-long; ev.finished.GetOutcome().GetExitCode() != 0 {
		t.Fatalf("the long command: %+v", ev)
	}
	if _, err := x.client.CreateSandbox(as(t, "other"), &executorv1.CreateSandboxRequest{}); err != nil {
		t.Fatalf("a create once the slot is free: %v", err)
	}
}
