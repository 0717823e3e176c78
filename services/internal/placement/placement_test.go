package placement

import (
	"context"
	"testing"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
)

func TestTarget(t *testing.T) {
	acme := tenant.With(context.Background(), tenant.Scope{Account: "acme"})
	tests := []struct {
		name string
		ctx  context.Context
		req  any
		want string
	}{
		{"exec in a sandbox", acme, &executorv1.ExecRequest{SandboxId: "sb-1"}, "conch/executor/sandboxes/sb-1"},
		{"run command", acme, &executorv1.RunCommandRequest{SandboxId: "sb-2"}, "conch/executor/sandboxes/sb-2"},
		{"process poll", acme, &executorv1.PollProcessRequest{SandboxId: "sb-3", ProcessId: "p1"}, "conch/executor/sandboxes/sb-3"},
		{"get", acme, &executorv1.GetSandboxRequest{Id: "sb-4"}, "conch/executor/sandboxes/sb-4"},
		{"destroy", acme, &executorv1.DestroySandboxRequest{Id: "sb-5"}, "conch/executor/sandboxes/sb-5"},
		{"exec on a node", acme, &executorv1.ExecRequest{Host: approvalv1.Host_HOST_NODE, Node: "laptop"}, "conch/executor/nodes/acme/laptop"},
		{"node without account", context.Background(), &executorv1.ExecRequest{Host: approvalv1.Host_HOST_NODE, Node: "laptop"}, ""},
		{"node name with a slash", acme, &executorv1.ExecRequest{Host: approvalv1.Host_HOST_NODE, Node: "../other/laptop"}, ""},
		{"sandbox id with a slash", acme, &executorv1.RunCommandRequest{SandboxId: "sb-1/../x"}, ""},
		{"sandbox id with NUL", acme, &executorv1.RunCommandRequest{SandboxId: "sb\x00"}, ""},
		{"empty id", acme, &executorv1.GetSandboxRequest{}, ""},
		{"create", acme, &executorv1.CreateSandboxRequest{}, ""},
		{"list", acme, &executorv1.ListSandboxesRequest{}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := target(tt.ctx, tt.req); got != tt.want {
				t.Errorf("target = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestLookup(t *testing.T) {
	cli := etcdxtest.StartForTest(t)
	rec := Record{Account: "acme", Executor: "x1", Addr: "127.0.0.1:7100", User: "u"}
	if _, err := cli.Put(t.Context(), SandboxKey("sb-1"), rec.Encode()); err != nil {
		t.Fatal(err)
	}
	got, ok, err := Lookup(t.Context(), cli, SandboxKey("sb-1"))
	if err != nil || !ok || got.Addr != rec.Addr || got.Account != "acme" || got.Executor != "x1" {
		t.Fatalf("Lookup = %+v %v %v", got, ok, err)
	}
	if _, ok, err := Lookup(t.Context(), cli, SandboxKey("sb-missing")); ok || err != nil {
		t.Fatalf("missing record: %v %v", ok, err)
	}
	if _, err := cli.Put(t.Context(), SandboxKey("sb-bad"), "{"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Lookup(t.Context(), cli, SandboxKey("sb-bad")); err == nil {
		t.Fatal("a corrupt record decoded")
	}
}
