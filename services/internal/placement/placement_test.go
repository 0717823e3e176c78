package placement

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	"github.com/conch-sh/conch/services/internal/platform/discovery"
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

func TestCandidates(t *testing.T) {
	cli := etcdxtest.StartForTest(t)
	ctx := t.Context()
	for addr, max := range map[string]string{"127.0.0.1:7001": "2", "127.0.0.1:7002": "3", "127.0.0.1:7003": "not a number"} {
		reg, err := discovery.Register(ctx, cli, "executor", addr, discovery.RegisterOptions{Metadata: map[string]string{MetaMaxSandboxes: max}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = reg.Close(context.WithoutCancel(ctx)) })
	}
	put := func(id, addr string) {
		t.Helper()
		if _, err := cli.Put(ctx, SandboxKey(id), Record{Account: "a", Executor: "x", Addr: addr}.Encode()); err != nil {
			t.Fatal(err)
		}
	}
	put("sb-1", "127.0.0.1:7001")
	put("sb-2", "127.0.0.1:7001")
	put("sb-3", "127.0.0.1:7002")
	r := NewRouter(ctx, cli, nil, nil)
	// wait returns the candidates once the executors are listed and the
	// load counts want per executor (executors left out hold none).
	wait := func(want map[string]int) []string {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			count, ok := r.load.snapshot()
			maps.DeleteFunc(count, func(_ string, n int) bool { return n == 0 })
			_, listed := r.executors.Instances()
			if ok && listed && maps.Equal(want, count) {
				got, _, err := r.candidates()
				if err != nil {
					t.Fatal(err)
				}
				return got
			}
			if time.Now().After(deadline) {
				t.Fatalf("load never reached %v: %v", want, count)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// The executor that does not say its capacity counts as roomy; the
	// full one is left out.
	if got := wait(map[string]int{"127.0.0.1:7001": 2, "127.0.0.1:7002": 1}); !slices.Equal(got, []string{"127.0.0.1:7003", "127.0.0.1:7002"}) {
		t.Fatalf("candidates = %v", got)
	}
	if _, err := cli.Delete(ctx, SandboxKey("sb-1")); err != nil {
		t.Fatal(err)
	}
	if got := wait(map[string]int{"127.0.0.1:7001": 1, "127.0.0.1:7002": 1}); len(got) != 3 || got[0] != "127.0.0.1:7003" {
		t.Fatalf("after a delete: candidates = %v", got)
	}
	// Moved: the count follows the record.
	put("sb-3", "127.0.0.1:7001")
	if got := wait(map[string]int{"127.0.0.1:7001": 2}); !slices.Equal(got, []string{"127.0.0.1:7003", "127.0.0.1:7002"}) {
		t.Fatalf("after a move: candidates = %v", got)
	}
}

func TestAllExecutorsFull(t *testing.T) {
	cli := etcdxtest.StartForTest(t)
	ctx := t.Context()
	reg, err := discovery.Register(ctx, cli, "executor", "127.0.0.1:7001", discovery.RegisterOptions{Metadata: map[string]string{MetaMaxSandboxes: "1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close(context.WithoutCancel(ctx)) })
	if _, err := cli.Put(ctx, SandboxKey("sb-1"), Record{Addr: "127.0.0.1:7001"}.Encode()); err != nil {
		t.Fatal(err)
	}
	r := NewRouter(ctx, cli, nil, nil)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, _, err := r.candidates()
		if status.Code(err) == codes.ResourceExhausted {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("candidates with every executor full: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestUnreachableRewords(t *testing.T) {
	acme := tenant.With(context.Background(), tenant.Scope{Account: "acme"})
	unsent := unreachableForTest(t)
	tests := []struct {
		name string
		req  any
		err  error
		want string // the message; "" for err unchanged
	}{
		{"sandbox", &executorv1.RunCommandRequest{SandboxId: "sb-1"}, unsent, "the executor holding sandbox sb-1 is not reachable; it may be restarting"},
		{"node", &executorv1.ExecRequest{Host: approvalv1.Host_HOST_NODE, Node: "box"}, unsent, "the executor holding node box's connection is not reachable; it may be restarting"},
		{"other", &executorv1.CreateSandboxRequest{}, unsent, "its executor is not reachable; it may be restarting"},
		{"the executor's own answer", &executorv1.RunCommandRequest{SandboxId: "sb-1"}, status.Error(codes.Unavailable, "workspace is unavailable"), ""},
		{"not found", &executorv1.RunCommandRequest{SandboxId: "sb-1"}, status.Error(codes.NotFound, "Sandbox not found"), ""},
		{"success", &executorv1.RunCommandRequest{SandboxId: "sb-1"}, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := unreachable(acme, tt.req, tt.err, nil)
			if tt.want == "" {
				if got != tt.err {
					t.Fatalf("got %v, want %v unchanged", got, tt.err)
				}
				return
			}
			if status.Code(got) != codes.Unavailable || status.Convert(got).Message() != tt.want || len(status.Convert(got).Details()) != 0 {
				t.Fatalf("got %v, want Unavailable %q", got, tt.want)
			}
		})
	}
}

// TestCreateAnswersForTheCluster: a CreateSandbox moves past executors
// that turn out to be full or are going away; when every one tried was
// full the caller gets the cluster's answer, which names no executor, and
// any other error (a quota's, say) is the caller's at once.
func TestCreateAnswersForTheCluster(t *testing.T) {
	cli := etcdxtest.StartForTest(t)
	ctx := t.Context()
	addrs := []string{"127.0.0.1:7001", "127.0.0.1:7002"}
	for _, addr := range addrs {
		reg, err := discovery.Register(ctx, cli, "executor", addr, discovery.RegisterOptions{Metadata: map[string]string{MetaMaxSandboxes: "4"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = reg.Close(context.WithoutCancel(ctx)) })
	}
	r := NewRouter(ctx, cli, nil, nil)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if got, _, _ := r.candidates(); len(got) == len(addrs) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the executors never became candidates")
		}
	}
	quota := status.Error(codes.ResourceExhausted, "quota exceeded: 2 sandboxes")
	gone := status.Error(codes.Unavailable, "draining")
	tests := []struct {
		name    string
		answers map[string]error // by executor; nil is a sandbox made
		want    error            // nil: made; else the code and message wanted
		tries   int              // executors tried, when it failed
	}{
		{"first has room", map[string]error{}, nil, 0},
		{"one full, the other has room", map[string]error{addrs[0]: Full("a", 4)}, nil, 0},
		{"both full", map[string]error{addrs[0]: Full("a", 4), addrs[1]: Full("b", 4)},
			status.Error(codes.ResourceExhausted, "all 2 executors are at capacity; retry in a few seconds"), 2},
		{"one full, one going away", map[string]error{addrs[0]: Full("a", 4), addrs[1]: gone}, gone, 2},
		{"a quota is not a full executor", map[string]error{addrs[0]: quota, addrs[1]: quota}, quota, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tries := 0
			invoker := func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
				tries++
				return tt.answers[discovery.Pinned(ctx)]
			}
			err := r.create(ctx, "/conch.executor.v1.ExecutorService/CreateSandbox", nil, nil, nil, invoker, nil)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("create = %v, want a sandbox", err)
				}
				return
			}
			if status.Code(err) != status.Code(tt.want) || status.Convert(err).Message() != status.Convert(tt.want).Message() {
				t.Fatalf("create = %v, want %v", err, tt.want)
			}
			if tries != tt.tries {
				t.Fatalf("%d executors tried, want %d", tries, tt.tries)
			}
			if strings.Contains(err.Error(), "executor a") || strings.Contains(err.Error(), "executor b") {
				t.Fatalf("the answer names an executor: %v", err)
			}
		})
	}
}
