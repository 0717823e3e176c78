package executor

import (
	"errors"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	"github.com/conch-sh/conch/services/internal/contract"
	"github.com/conch-sh/conch/services/internal/placement"
	"github.com/conch-sh/conch/services/internal/toolresult"
)

func TestFinalOutput(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, out, errOut string
		limit             int
		wantOut, wantErr  string
	}{
		{"fits", "ab", "cd", 10, "ab", "cd"},
		{"stdout cut, stderr gets nothing", "abcdef", "xy", 4, "abcd\n" + toolresult.TruncatedMarker, toolresult.TruncatedMarker},
		{"stderr gets the rest", "ab", "wxyz", 4, "ab", "wx\n" + toolresult.TruncatedMarker},
		{"characters not bytes", "☃☃☃☃", "", 3, "☃☃☃\n" + toolresult.TruncatedMarker, ""},
		{"newline before marker kept", "a\nb\n", "", 2, "a\n" + toolresult.TruncatedMarker, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o, e := newCapture(c.limit), newCapture(c.limit)
			o.write([]byte(c.out))
			e.write([]byte(c.errOut))
			gotOut, gotErr, _, _ := finalOutput(o, e, c.limit, false, false)
			if gotOut != c.wantOut || gotErr != c.wantErr {
				t.Fatalf("got %q %q, want %q %q", gotOut, gotErr, c.wantOut, c.wantErr)
			}
		})
	}
}

func TestValidateEnv(t *testing.T) {
	t.Parallel()
	cases := []struct {
		env  map[string]string
		want string // substring of the error; empty: accepted
	}{
		{map[string]string{"FOO": "bar", "MY_VAR2": "x", "LANG": "C.UTF-8", "LC_ALL": "C"}, ""},
		{map[string]string{"my_var": "x"}, "my_var may not be set"},
		{map[string]string{"POSIXLY_CORRECT": "1"}, "POSIXLY_CORRECT may not be set"},
		{map[string]string{"GIT_SEQUENCE_EDITOR": "id"}, "GIT_SEQUENCE_EDITOR may not be set"},
		{map[string]string{"http_proxy": "x"}, "http_proxy may not be set"},
		{map[string]string{"PATH": "/tmp"}, "PATH may not be set"},
		{map[string]string{"path": "/tmp"}, "may not be set"},
		{map[string]string{"LD_PRELOAD": "/tmp/x.so"}, "LD_* variables"},
		{map[string]string{"LD_LIBRARY_PATH": "/tmp"}, "LD_*"},
		{map[string]string{"DYLD_INSERT_LIBRARIES": "x"}, "DYLD_*"},
		{map[string]string{"BASH_ENV": "/tmp/x"}, "BASH_ENV may not be set"},
		{map[string]string{"ENV": "/tmp/x"}, "ENV may not be set"},
		{map[string]string{"PS4": "$(id)"}, "PS4"},
		{map[string]string{"PYTHONSTARTUP": "x"}, "PYTHONSTARTUP"},
		{map[string]string{"PYTHONWARNINGS": "x"}, "PYTHON*"},
		{map[string]string{"PERL5OPT": "-Mx"}, "PERL5OPT"},
		{map[string]string{"NODE_OPTIONS": "--require x"}, "NODE_OPTIONS"},
		{map[string]string{"BASH_FUNC_ls%%": "() { id; }"}, "not a valid variable name"},
		{map[string]string{"GLIBC_TUNABLES": "x"}, "GLIBC_TUNABLES"},
		{map[string]string{"A=B": "x"}, "not a valid variable name"},
		{map[string]string{"1X": "x"}, "not a valid variable name"},
		{map[string]string{"": "x"}, "empty variable name"},
		{map[string]string{"X": "a\x00b"}, "NUL"},
	}
	for _, c := range cases {
		err := validateEnv(c.env)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v rejected: %v", c.env, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v: error %v, want one containing %q", c.env, err, c.want)
		}
	}
}

func createSandbox(t testing.TB, x *testExecutor, account string) string {
	t.Helper()
	resp, err := x.client.CreateSandbox(as(t, account), &executorv1.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = x.client.DestroySandbox(as(t, account), &executorv1.DestroySandboxRequest{Id: resp.GetId()})
	})
	return resp.GetId()
}

func wantCode(t *testing.T, err error, code codes.Code, msg string) {
	t.Helper()
	if status.Code(err) != code || !strings.Contains(status.Convert(err).Message(), msg) {
		t.Fatalf("error = %v, want %v containing %q", err, code, msg)
	}
}

func TestRunCommand(t *testing.T) {
	x := startExecutor(t)
	id := createSandbox(t, x, "acme")
	ctx := as(t, "acme")
	exitCode := func(c int32) *int32 { return &c }
	cases := []struct {
		name string
		req  *executorv1.RunCommandRequest
		want *executorv1.RunCommandResponse
	}{
		{"exit", &executorv1.RunCommandRequest{Command: "echo out; echo err >&2; exit 3"},
			&executorv1.RunCommandResponse{Stdout: "out\n", Stderr: "err\n", Outcome: &executorv1.Outcome{Type: executorv1.OutcomeType_OUTCOME_TYPE_EXIT, ExitCode: exitCode(3)}}},
		{"characters cap", &executorv1.RunCommandRequest{Command: "printf '☃☃☃☃☃'; echo e >&2", MaxOutputLength: 3},
			&executorv1.RunCommandResponse{Stdout: "☃☃☃\n" + toolresult.TruncatedMarker, Stderr: toolresult.TruncatedMarker, Outcome: &executorv1.Outcome{Type: executorv1.OutcomeType_OUTCOME_TYPE_EXIT, ExitCode: exitCode(0)}}},
		{"flood", &executorv1.RunCommandRequest{Command: "yes | head -c 100000000", MaxOutputLength: 4},
			&executorv1.RunCommandResponse{Stdout: "y\ny\n" + toolresult.TruncatedMarker, Outcome: &executorv1.Outcome{Type: executorv1.OutcomeType_OUTCOME_TYPE_EXIT, ExitCode: exitCode(0)}}},
		{"timeout keeps output", &executorv1.RunCommandRequest{Command: "echo before; sleep 100", TimeoutSeconds: 1},
			&executorv1.RunCommandResponse{Stdout: "before\n", Outcome: &executorv1.Outcome{Type: executorv1.OutcomeType_OUTCOME_TYPE_TIMEOUT}}},
		{"env", &executorv1.RunCommandRequest{Command: "echo $GREETING", Env: map[string]string{"GREETING": "hi"}},
			&executorv1.RunCommandResponse{Stdout: "hi\n", Outcome: &executorv1.Outcome{Type: executorv1.OutcomeType_OUTCOME_TYPE_EXIT, ExitCode: exitCode(0)}}},
		{"workdir", &executorv1.RunCommandRequest{Command: "pwd", Workdir: "/tmp"},
			&executorv1.RunCommandResponse{Stdout: "/tmp\n", Outcome: &executorv1.Outcome{Type: executorv1.OutcomeType_OUTCOME_TYPE_EXIT, ExitCode: exitCode(0)}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.req.SandboxId = id
			got, err := x.client.RunCommand(ctx, c.req)
			if err != nil {
				t.Fatal(err)
			}
			if got.GetStdout() != c.want.GetStdout() || got.GetStderr() != c.want.GetStderr() ||
				got.GetOutcome().GetType() != c.want.GetOutcome().GetType() || got.GetOutcome().ExitCode == nil != (c.want.GetOutcome().ExitCode == nil) ||
				got.GetOutcome().GetExitCode() != c.want.GetOutcome().GetExitCode() {
				t.Fatalf("got %v, want %v", got, c.want)
			}
		})
	}
	t.Run("too long command", func(t *testing.T) {
		got, err := x.client.RunCommand(ctx, &executorv1.RunCommandRequest{SandboxId: id, Command: strings.Repeat("x", MaxCommandBytes+1)})
		if err != nil {
			t.Fatal(err)
		}
		if got.GetOutcome().GetType() != executorv1.OutcomeType_OUTCOME_TYPE_ERROR || !strings.Contains(got.GetError(), "1 MiB") || got.GetOutcome().ExitCode != nil {
			t.Fatalf("got %v", got)
		}
	})
	bad := []struct {
		name string
		req  *executorv1.RunCommandRequest
		msg  string
	}{
		{"PATH", &executorv1.RunCommandRequest{Command: "true", Env: map[string]string{"PATH": "/tmp"}}, "PATH may not be set"},
		{"LD_PRELOAD", &executorv1.RunCommandRequest{Command: "true", Env: map[string]string{"LD_PRELOAD": "/x"}}, "LD_PRELOAD"},
		{"timeout", &executorv1.RunCommandRequest{Command: "true", TimeoutSeconds: 301}, "timeout_seconds"},
		{"negative timeout", &executorv1.RunCommandRequest{Command: "true", TimeoutSeconds: -1}, "timeout_seconds"},
		{"output", &executorv1.RunCommandRequest{Command: "true", MaxOutputLength: -1}, "max_output_length"},
		{"empty", &executorv1.RunCommandRequest{Command: "  "}, "command"},
		{"workdir NUL", &executorv1.RunCommandRequest{Command: "true", Workdir: "/tmp\x00"}, "workdir"},
	}
	for _, c := range bad {
		t.Run("rejects "+c.name, func(t *testing.T) {
			c.req.SandboxId = id
			_, err := x.client.RunCommand(ctx, c.req)
			wantCode(t, err, codes.InvalidArgument, c.msg)
		})
	}
	t.Run("cwd persists", func(t *testing.T) {
		if _, err := x.client.RunCommand(ctx, &executorv1.RunCommandRequest{SandboxId: id, Command: "mkdir -p /tmp/d && cd /tmp/d"}); err != nil {
			t.Fatal(err)
		}
		got, err := x.client.RunCommand(ctx, &executorv1.RunCommandRequest{SandboxId: id, Command: "pwd"})
		if err != nil || got.GetStdout() != "/tmp/d\n" {
			t.Fatalf("pwd = %v %v", got, err)
		}
		sb, err := x.client.GetSandbox(ctx, &executorv1.GetSandboxRequest{Id: id})
		if err != nil || sb.GetSandbox().GetCwd() != "/tmp/d" {
			t.Fatalf("sandbox cwd = %v %v", sb, err)
		}
	})
}

func TestSandboxesAreAccountScoped(t *testing.T) {
	x := startExecutor(t)
	id := createSandbox(t, x, "alice")
	other := as(t, "mallory")
	checks := map[string]func() error{
		"get": func() error {
			_, err := x.client.GetSandbox(other, &executorv1.GetSandboxRequest{Id: id})
			return err
		},
		"run": func() error {
			_, err := x.client.RunCommand(other, &executorv1.RunCommandRequest{SandboxId: id, Command: "true"})
			return err
		},
		"exec": func() error {
			s, err := x.client.Exec(other, &executorv1.ExecRequest{SandboxId: id, Command: "true"})
			if err != nil {
				return err
			}
			_, err = s.Recv()
			return err
		},
		"processes": func() error {
			_, err := x.client.ListProcesses(other, &executorv1.ListProcessesRequest{SandboxId: id})
			return err
		},
		"destroy": func() error {
			_, err := x.client.DestroySandbox(other, &executorv1.DestroySandboxRequest{Id: id})
			return err
		},
	}
	for name, call := range checks {
		t.Run(name, func(t *testing.T) { wantCode(t, call(), codes.NotFound, "not found") })
	}
	list, err := x.client.ListSandboxes(other, &executorv1.ListSandboxesRequest{})
	if err != nil || len(list.GetSandboxes()) != 0 {
		t.Fatalf("mallory lists %v %v", list, err)
	}
	list, err = x.client.ListSandboxes(as(t, "alice"), &executorv1.ListSandboxesRequest{})
	if err != nil || len(list.GetSandboxes()) != 1 || list.GetSandboxes()[0].GetId() != id {
		t.Fatalf("alice lists %v %v", list, err)
	}
	if _, err := x.client.GetSandbox(t.Context(), &executorv1.GetSandboxRequest{Id: id}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("unscoped call: %v", err)
	}
	// Still alive for its owner.
	if got, err := x.client.RunCommand(as(t, "alice"), &executorv1.RunCommandRequest{SandboxId: id, Command: "echo ok"}); err != nil || got.GetStdout() != "ok\n" {
		t.Fatalf("owner run: %v %v", got, err)
	}
}

func skills(b ...*executorv1.SkillBundle) *executorv1.CreateSandboxRequest {
	return &executorv1.CreateSandboxRequest{Skills: b}
}

// TestSkillsMount: a sandbox's skills are at /mnt/skills/<name>, their
// modes kept, and nothing in the sandbox can change them.
func TestSkillsMount(t *testing.T) {
	x := startExecutor(t)
	ctx := as(t, "acme")
	resp, err := x.client.CreateSandbox(ctx, skills(&executorv1.SkillBundle{Name: "pdf-tools", Id: "skill_1", Version: "2", Files: []*executorv1.SkillFile{
		{Path: "SKILL.md", Mode: 0o644, Content: []byte("---\nname: pdf-tools\n---\n")},
		{Path: "scripts/run.sh", Mode: 0o755, Content: []byte("#!/bin/sh\necho ran\n")},
	}}))
	if err != nil {
		t.Fatal(err)
	}
	// The sandbox says which skills it has, without their files.
	if sk := resp.GetSandbox().GetSkills(); len(sk) != 1 || sk[0].GetId() != "skill_1" || sk[0].GetVersion() != "2" || len(sk[0].GetFiles()) != 0 {
		t.Fatalf("sandbox skills %v", sk)
	}
	run := func(cmd string) *executorv1.RunCommandResponse {
		t.Helper()
		got, err := x.client.RunCommand(ctx, &executorv1.RunCommandRequest{SandboxId: resp.GetId(), Command: cmd})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := run("head -2 /mnt/skills/pdf-tools/SKILL.md && /mnt/skills/pdf-tools/scripts/run.sh && ls /mnt/skills"); got.GetStdout() != "---\nname: pdf-tools\nran\npdf-tools\n" {
		t.Fatalf("reading the skill: %v", got)
	}
	for _, cmd := range []string{
		"echo x > /mnt/skills/pdf-tools/SKILL.md",
		"touch /mnt/skills/pdf-tools/new",
		"rm /mnt/skills/pdf-tools/scripts/run.sh",
		"chmod 777 /mnt/skills/pdf-tools/SKILL.md",
		"mkdir /mnt/skills/other",
	} {
		if got := run(cmd); got.GetOutcome().GetExitCode() == 0 {
			t.Errorf("%q succeeded in the read-only skills: %v", cmd, got)
		}
	}
	if got := run("cat /mnt/skills/pdf-tools/SKILL.md | wc -c"); strings.TrimSpace(got.GetStdout()) != "24" {
		t.Fatalf("the skill changed: %v", got)
	}
}

func TestCreateSandboxValidation(t *testing.T) {
	x := startExecutor(t)
	ctx := as(t, "acme")
	cases := []struct {
		name string
		req  *executorv1.CreateSandboxRequest
		code codes.Code
		msg  string
	}{
		{"persistent without user", &executorv1.CreateSandboxRequest{Persistent: true}, codes.InvalidArgument, "requires user"},
		{"persistent without a workspace service", &executorv1.CreateSandboxRequest{Persistent: true, User: "alice"}, codes.FailedPrecondition, "workspace service"},
		{"bad user", &executorv1.CreateSandboxRequest{User: "../etc"}, codes.InvalidArgument, "user"},
		{"dot user", &executorv1.CreateSandboxRequest{User: ".."}, codes.InvalidArgument, "user"},
		{"allowlist without domains", &executorv1.CreateSandboxRequest{Network: &executorv1.Network{Mode: executorv1.NetworkMode_NETWORK_MODE_ALLOWLIST}}, codes.InvalidArgument, "network.allowed_domains: at least one"},
		{"bad domain", &executorv1.CreateSandboxRequest{Network: &executorv1.Network{Mode: executorv1.NetworkMode_NETWORK_MODE_ALLOWLIST, AllowedDomains: []string{"ok.example", "a b"}}}, codes.InvalidArgument, "network.allowed_domains[1]"},
		{"whole TLD", &executorv1.CreateSandboxRequest{Network: &executorv1.Network{Mode: executorv1.NetworkMode_NETWORK_MODE_ALLOWLIST, AllowedDomains: []string{"*.com"}}}, codes.InvalidArgument, "top-level domain"},
		{"bad port", &executorv1.CreateSandboxRequest{Network: &executorv1.Network{Mode: executorv1.NetworkMode_NETWORK_MODE_ALLOWLIST, AllowedDomains: []string{"example.com"}, Ports: []int32{70000}}}, codes.InvalidArgument, "network.ports[0]"},
		{"ask without an agent", &executorv1.CreateSandboxRequest{Network: &executorv1.Network{Mode: executorv1.NetworkMode_NETWORK_MODE_ALLOWLIST, AllowedDomains: []string{"example.com"}, Ask: executorv1.NetworkAsk_NETWORK_ASK_ON_MISS}}, codes.InvalidArgument, "network.ask"},
		{"ask without an approval service", &executorv1.CreateSandboxRequest{Agent: "g", Network: &executorv1.Network{Mode: executorv1.NetworkMode_NETWORK_MODE_ALLOWLIST, AllowedDomains: []string{"example.com"}, Ask: executorv1.NetworkAsk_NETWORK_ASK_ON_MISS}}, codes.FailedPrecondition, "network.ask"},
		{"too many connections", &executorv1.CreateSandboxRequest{Network: &executorv1.Network{Mode: executorv1.NetworkMode_NETWORK_MODE_ALLOWLIST, AllowedDomains: []string{"example.com"}, MaxConnections: 5000}}, codes.InvalidArgument, "network.max_connections"},
		{"domains without allowlist", &executorv1.CreateSandboxRequest{Network: &executorv1.Network{AllowedDomains: []string{"example.com"}}}, codes.InvalidArgument, "needs mode allowlist"},
		{"tiny memory", &executorv1.CreateSandboxRequest{Limits: &executorv1.Limits{MemoryBytes: 1000}}, codes.InvalidArgument, "limits.memory_bytes"},
		{"negative pids", &executorv1.CreateSandboxRequest{Limits: &executorv1.Limits{Pids: -1}}, codes.InvalidArgument, "limits.pids"},
		{"relative path_prepend", &executorv1.CreateSandboxRequest{PathPrepend: []string{"bin"}}, codes.InvalidArgument, "path_prepend"},
		{"negative idle", &executorv1.CreateSandboxRequest{IdleTimeoutSeconds: -1}, codes.InvalidArgument, "idle_timeout_seconds"},
		{"long name", &executorv1.CreateSandboxRequest{Name: strings.Repeat("n", MaxNameChars+1)}, codes.InvalidArgument, "name"},
		{"label key", &executorv1.CreateSandboxRequest{Labels: map[string]string{"a b": "x"}}, codes.InvalidArgument, `labels: key "a b" must be 1-63 characters`},
		{"label value", &executorv1.CreateSandboxRequest{Labels: map[string]string{"team": "a\nb"}}, codes.InvalidArgument, "labels[team]: must be UTF-8 without control characters"},
		{"skill name", skills(&executorv1.SkillBundle{Name: "../x", Files: []*executorv1.SkillFile{{Path: "SKILL.md", Mode: 0o644}}}), codes.InvalidArgument, "skills[0].name"},
		{"skill twice", skills(&executorv1.SkillBundle{Name: "a"}, &executorv1.SkillBundle{Name: "a"}), codes.InvalidArgument, "skills[1].name"},
		{"skill dotdot", skills(&executorv1.SkillBundle{Name: "a", Files: []*executorv1.SkillFile{{Path: "../../etc/passwd", Mode: 0o644}}}), codes.InvalidArgument, "skills[0].files[0].path"},
		{"skill absolute", skills(&executorv1.SkillBundle{Name: "a", Files: []*executorv1.SkillFile{{Path: "/etc/passwd", Mode: 0o644}}}), codes.InvalidArgument, "skills[0].files[0].path"},
		{"skill unclean", skills(&executorv1.SkillBundle{Name: "a", Files: []*executorv1.SkillFile{{Path: `a\b`, Mode: 0o644}}}), codes.InvalidArgument, "skills[0].files[0].path"},
		{"skill setuid", skills(&executorv1.SkillBundle{Name: "a", Files: []*executorv1.SkillFile{{Path: "x", Mode: 0o4755}}}), codes.InvalidArgument, "skills[0].files[0].mode"},
		{"skill file and dir", skills(&executorv1.SkillBundle{Name: "a", Files: []*executorv1.SkillFile{{Path: "x", Mode: 0o644}, {Path: "x/y", Mode: 0o644}}}), codes.InvalidArgument, "below a file"},
		{"skill too large", skills(&executorv1.SkillBundle{Name: "a", Files: []*executorv1.SkillFile{{Path: "x", Mode: 0o644, Content: make([]byte, contract.MaxSkillBytes+1)}}}), codes.InvalidArgument, "skills[0].files: at most"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := x.client.CreateSandbox(ctx, c.req)
			wantCode(t, err, c.code, c.msg)
		})
	}
	for _, id := range []string{"", "nope", "../../etc", strings.Repeat("a", 10000)} {
		_, err := x.client.RunCommand(ctx, &executorv1.RunCommandRequest{SandboxId: id, Command: "true"})
		wantCode(t, err, codes.NotFound, "not found")
	}
}

func TestOwnershipInEtcd(t *testing.T) {
	x := startExecutor(t)
	ctx := as(t, "acme")
	id := createSandbox(t, x, "acme")
	resp, err := x.svc.etcd.Get(t.Context(), placement.SandboxKey(id))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("ownership record: %v %v", resp, err)
	}
	kv := resp.Kvs[0]
	if kv.Lease == 0 || !strings.Contains(string(kv.Value), `"executor":"test-executor"`) || !strings.Contains(string(kv.Value), `"account":"acme"`) || !strings.Contains(string(kv.Value), `"addr":"127.0.0.1:`) {
		t.Fatalf("record %s lease %d", kv.Value, kv.Lease)
	}
	// A sandbox recorded by another executor is answered with where it is.
	if _, err := x.svc.etcd.Put(t.Context(), placement.SandboxKey("sb-elsewhere"), `{"account":"acme","executor":"other-executor"}`); err != nil {
		t.Fatal(err)
	}
	_, err = x.client.RunCommand(ctx, &executorv1.RunCommandRequest{SandboxId: "sb-elsewhere", Command: "true"})
	wantCode(t, err, codes.Unavailable, "other-executor")
	_, err = x.client.RunCommand(as(t, "mallory"), &executorv1.RunCommandRequest{SandboxId: "sb-elsewhere", Command: "true"})
	wantCode(t, err, codes.NotFound, "not found")

	if _, err := x.client.DestroySandbox(ctx, &executorv1.DestroySandboxRequest{Id: id}); err != nil {
		t.Fatal(err)
	}
	resp, err = x.svc.etcd.Get(t.Context(), placement.SandboxKey(id))
	if err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("record left after destroy: %v %v", resp, err)
	}
	// The executor's lease going away takes its records with it.
	id2 := createSandbox(t, x, "acme")
	if _, err := x.svc.etcd.Revoke(t.Context(), x.svc.lease); err != nil {
		t.Fatal(err)
	}
	resp, err = x.svc.etcd.Get(t.Context(), placement.SandboxKey(id2))
	if err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("record outlived the lease: %v %v", resp, err)
	}
	// and the live executor records them again under a new lease.
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err = x.svc.etcd.Get(t.Context(), placement.SandboxKey(id2), clientv3.WithCountOnly())
		if err == nil && resp.Count == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox not recorded again: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// execEvents collects the events of one Exec call.
type execEvents struct {
	started, backgrounded string
	stdout, stderr        strings.Builder
	finished              *executorv1.Finished
}

func collect(t *testing.T, s executorv1.ExecutorService_ExecClient) execEvents {
	t.Helper()
	var ev execEvents
	for {
		m, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return ev
		}
		if err != nil {
			t.Fatal(err)
		}
		switch e := m.GetEvent().(type) {
		case *executorv1.ExecResponse_Started:
			ev.started = e.Started
		case *executorv1.ExecResponse_Output:
			if e.Output.GetStream() == executorv1.StreamName_STREAM_NAME_STDERR {
				ev.stderr.Write(e.Output.GetData())
			} else {
				ev.stdout.Write(e.Output.GetData())
			}
		case *executorv1.ExecResponse_Backgrounded:
			ev.backgrounded = e.Backgrounded.GetProcessId()
		case *executorv1.ExecResponse_Finished:
			ev.finished = e.Finished
		}
	}
}

func TestExecStreamsAndBackgroundProcesses(t *testing.T) {
	x := startExecutor(t)
	ctx := as(t, "acme")
	id := createSandbox(t, x, "acme")

	s, err := x.client.Exec(ctx, &executorv1.ExecRequest{SandboxId: id, Command: "echo a; echo b >&2; exit 4"})
	if err != nil {
		t.Fatal(err)
	}
	ev := collect(t, s)
	if ev.started == "" || ev.stdout.String() != "a\n" || ev.stderr.String() != "b\n" || ev.finished.GetOutcome().GetExitCode() != 4 {
		t.Fatalf("events %+v", ev)
	}

	t.Run("still running notices and path_prepend", func(t *testing.T) {
		s, err := x.client.Exec(ctx, &executorv1.ExecRequest{SandboxId: id, Command: "echo $PATH; sleep 1",
			Settings: &approvalv1.ExecSettings{ApprovalRunningNoticeMs: 200, PathPrepend: []string{"/opt/bin"}}})
		if err != nil {
			t.Fatal(err)
		}
		notices := 0
		var out strings.Builder
		for {
			m, err := s.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.GetStillRunning() != nil {
				notices++
			}
			out.Write(m.GetOutput().GetData())
		}
		if notices == 0 || !strings.HasPrefix(out.String(), "/opt/bin:/usr/local/bin:") {
			t.Fatalf("%d notices, output %q", notices, out.String())
		}
	})

	t.Run("host node", func(t *testing.T) {
		s, err := x.client.Exec(ctx, &executorv1.ExecRequest{SandboxId: id, Command: "true", Host: approvalv1.Host_HOST_NODE, Node: "laptop"})
		if err == nil {
			_, err = s.Recv()
		}
		wantCode(t, err, codes.NotFound, "Node not found")
	})

	t.Run("host gateway turned off", func(t *testing.T) {
		full := &approvalv1.ExecSettings{Security: approvalv1.Security_SECURITY_FULL, Ask: approvalv1.Ask_ASK_OFF}
		s, err := x.client.Exec(ctx, &executorv1.ExecRequest{SandboxId: id, Command: "true", Host: approvalv1.Host_HOST_GATEWAY, Settings: full})
		if err == nil {
			_, err = s.Recv()
		}
		wantCode(t, err, codes.FailedPrecondition, "turned off")
	})

	watch, err := x.client.WatchSandboxEvents(ctx, &executorv1.WatchSandboxEventsRequest{SandboxId: id})
	if err != nil {
		t.Fatal(err)
	}
	// yieldMs moves a long command to the background with its output so far.
	s, err = x.client.Exec(ctx, &executorv1.ExecRequest{
		SandboxId: id, Command: "echo first; while read line; do echo got $line; done; echo bye", YieldMs: 300,
		Settings: &approvalv1.ExecSettings{NotifyOnExit: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	ev = collect(t, s)
	if ev.backgrounded == "" || ev.backgrounded != ev.started || ev.finished != nil || ev.stdout.String() != "first\n" {
		t.Fatalf("yield events %+v", ev)
	}
	pid := ev.backgrounded

	poll := func(wait int32) *executorv1.PollProcessResponse {
		t.Helper()
		p, err := x.client.PollProcess(ctx, &executorv1.PollProcessRequest{SandboxId: id, ProcessId: pid, WaitMs: wait})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	if p := poll(0); p.GetOutput() != "" || p.GetProcess().GetState() != executorv1.ProcessState_PROCESS_STATE_RUNNING {
		t.Fatalf("first poll %v", p)
	}
	if _, err := x.client.WriteProcess(ctx, &executorv1.WriteProcessRequest{SandboxId: id, ProcessId: pid, Data: []byte("one\n")}); err != nil {
		t.Fatal(err)
	}
	if p := poll(10000); p.GetOutput() != "got one\n" {
		t.Fatalf("poll after write %v", p)
	}
	if _, err := x.client.WriteProcess(ctx, &executorv1.WriteProcessRequest{SandboxId: id, ProcessId: pid, Data: []byte("two\n"), Eof: true}); err != nil {
		t.Fatal(err)
	}
	n, err := watch.Recv()
	if err != nil || n.GetProcess().GetId() != pid || !strings.Contains(n.GetMessage(), "exited with code 0") {
		t.Fatalf("notification %v %v", n, err)
	}
	if p := poll(0); p.GetOutput() != "got two\nbye\n" || p.GetProcess().GetState() != executorv1.ProcessState_PROCESS_STATE_EXITED || p.GetProcess().GetOutcome().GetExitCode() != 0 {
		t.Fatalf("final poll %v", p)
	}
	logResp, err := x.client.ReadProcessLog(ctx, &executorv1.ReadProcessLogRequest{SandboxId: id, ProcessId: pid, Offset: 1, Limit: 2})
	if err != nil || logResp.GetLog() != "got one\ngot two" || logResp.GetNextOffset() != 3 || logResp.GetTotalLines() != 4 {
		t.Fatalf("log %v %v", logResp, err)
	}
	_, err = x.client.WriteProcess(ctx, &executorv1.WriteProcessRequest{SandboxId: id, ProcessId: pid, Data: []byte("x")})
	wantCode(t, err, codes.FailedPrecondition, "exited")

	// background starts at once; kill ends it and its children.
	s, err = x.client.Exec(ctx, &executorv1.ExecRequest{SandboxId: id, Command: "sleep 1000 & sleep 1000", Background: true})
	if err != nil {
		t.Fatal(err)
	}
	ev = collect(t, s)
	if ev.backgrounded == "" {
		t.Fatalf("background events %+v", ev)
	}
	list, err := x.client.ListProcesses(ctx, &executorv1.ListProcessesRequest{SandboxId: id})
	if err != nil || len(list.GetProcesses()) != 4 {
		t.Fatalf("list %v %v", list, err)
	}
	k, err := x.client.KillProcess(ctx, &executorv1.KillProcessRequest{SandboxId: id, ProcessId: ev.backgrounded})
	if err != nil || k.GetProcess().GetState() != executorv1.ProcessState_PROCESS_STATE_EXITED {
		t.Fatalf("kill %v %v", k, err)
	}
	_, err = x.client.PollProcess(ctx, &executorv1.PollProcessRequest{SandboxId: id, ProcessId: "p-nope"})
	wantCode(t, err, codes.NotFound, "not found")
	_, err = x.client.PollProcess(as(t, "mallory"), &executorv1.PollProcessRequest{SandboxId: id, ProcessId: pid})
	wantCode(t, err, codes.NotFound, "not found")
}

func TestIdleSandboxEnds(t *testing.T) {
	x := startExecutor(t)
	ctx := as(t, "acme")
	resp, err := x.client.CreateSandbox(ctx, &executorv1.CreateSandboxRequest{IdleTimeoutSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetSandbox().GetIdleTimeoutSeconds() != 1 {
		t.Fatalf("sandbox %v", resp.GetSandbox())
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := x.client.GetSandbox(ctx, &executorv1.GetSandboxRequest{Id: resp.GetId()})
		if status.Code(err) == codes.NotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("idle sandbox still there: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The record goes right after the sandbox.
	for {
		got, err := x.svc.etcd.Get(t.Context(), placement.SandboxKey(resp.GetId()), clientv3.WithCountOnly())
		if err == nil && got.Count == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ownership record left: %v %v", got, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestDrainKeepsSandboxes checks that a draining executor goes on serving
// the sandboxes it holds but creates no more, with an error the router
// takes as "try another executor".
func TestDrainKeepsSandboxes(t *testing.T) {
	x := startExecutor(t)
	ctx := as(t, "acme")
	created, err := x.client.CreateSandbox(ctx, &executorv1.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	x.svc.Drain()
	run, err := x.client.RunCommand(ctx, &executorv1.RunCommandRequest{SandboxId: created.GetId(), Command: "echo still here"})
	if err != nil || run.GetStdout() != "still here\n" {
		t.Fatalf("command while draining: %v %v", run, err)
	}
	_, err = x.client.CreateSandbox(ctx, &executorv1.CreateSandboxRequest{})
	wantCode(t, err, codes.Unavailable, "shutting down")
}

func TestResolveCommand(t *testing.T) {
	x := startExecutor(t)
	ctx := as(t, "acme")
	res, err := x.client.ResolveCommand(ctx, &executorv1.ResolveCommandRequest{Command: "ls -l | grep x && cd /tmp && nosuch-program"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range res.GetSegments() {
		got = append(got, s.GetArgv()[0]+"="+s.GetResolvedPath())
	}
	if want := []string{"ls=/usr/bin/ls", "grep=/usr/bin/grep"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("segments = %q, want %q (builtins and what is not found left out)", got, want)
	}
	for _, tt := range []struct {
		name string
		req  *executorv1.ResolveCommandRequest
		msg  string
	}{
		{"empty command", &executorv1.ResolveCommandRequest{Command: " "}, "command"},
		{"relative cwd", &executorv1.ResolveCommandRequest{Command: "ls", Cwd: "tmp"}, "cwd"},
		{"cwd with NUL", &executorv1.ResolveCommandRequest{Command: "ls", Cwd: "/tmp\x00"}, "cwd"},
		{"relative path_prepend", &executorv1.ResolveCommandRequest{Command: "ls", PathPrepend: []string{"bin"}}, "path_prepend"},
		{"path_prepend with a colon", &executorv1.ResolveCommandRequest{Command: "ls", PathPrepend: []string{"/a:/b"}}, "path_prepend"},
		{"too long", &executorv1.ResolveCommandRequest{Command: strings.Repeat("x", MaxCommandBytes+1)}, "command"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := x.client.ResolveCommand(ctx, tt.req)
			wantCode(t, err, codes.InvalidArgument, tt.msg)
		})
	}
}

// TestListByLabelAndStatus: a list returns the sandboxes that carry every
// label asked for, in the state asked for, and only the caller's.
func TestListByLabelAndStatus(t *testing.T) {
	x := startExecutor(t)
	ctx := as(t, "acme")
	ids := map[string]string{}
	for name, labels := range map[string]map[string]string{
		"web":   {"team": "infra", "app": "web"},
		"db":    {"team": "infra", "app": "db"},
		"other": {"team": "data"},
	} {
		resp, err := x.client.CreateSandbox(ctx, &executorv1.CreateSandboxRequest{Name: name, Labels: labels})
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(resp.GetSandbox().GetLabels(), labels) {
			t.Errorf("%s created with labels %v, answered %v", name, labels, resp.GetSandbox().GetLabels())
		}
		ids[resp.GetId()] = name
	}
	if _, err := x.client.CreateSandbox(as(t, "mallory"), &executorv1.CreateSandboxRequest{Labels: map[string]string{"team": "infra"}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		req  *executorv1.ListSandboxesRequest
		want []string
	}{
		{&executorv1.ListSandboxesRequest{}, []string{"db", "other", "web"}},
		{&executorv1.ListSandboxesRequest{Label: []string{"team=infra"}}, []string{"db", "web"}},
		{&executorv1.ListSandboxesRequest{Label: []string{"team=infra", "app=web"}}, []string{"web"}},
		{&executorv1.ListSandboxesRequest{Label: []string{"app"}}, []string{"db", "web"}},
		{&executorv1.ListSandboxesRequest{Label: []string{"team=nobody"}}, nil},
		{&executorv1.ListSandboxesRequest{Status: executorv1.SandboxState_SANDBOX_STATE_READY, Label: []string{"team=data"}}, []string{"other"}},
		{&executorv1.ListSandboxesRequest{Status: executorv1.SandboxState_SANDBOX_STATE_GONE}, nil},
	} {
		resp, err := x.client.ListSandboxes(ctx, tc.req)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, sb := range resp.GetSandboxes() {
			got = append(got, ids[sb.GetId()])
		}
		slices.Sort(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("list %v = %q, want %q", tc.req, got, tc.want)
		}
	}
	_, err := x.client.ListSandboxes(ctx, &executorv1.ListSandboxesRequest{Label: []string{"bad key"}})
	wantCode(t, err, codes.InvalidArgument, `label: key "bad key" must be`)
}
