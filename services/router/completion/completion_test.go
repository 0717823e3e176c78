package completion

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
	"github.com/conch-sh/conch/services/internal/outbound"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/router/toolhost"
	"github.com/conch-sh/conch/services/router/upstream"
)

// fakeExecutor stands in for the executor service in the core's unit
// tests (the e2e suite runs the real one): it records the sandboxes made
// and destroyed and the commands run, and answers each command with its
// text on stdout.
type fakeExecutor struct {
	executorv1.ExecutorServiceClient
	// onExec, when set, runs at each command.
	onExec func()

	mu        sync.Mutex
	created   int
	destroyed []string
	ran       map[string][]string // sandbox id → commands
	existing  map[string]bool
}

func (f *fakeExecutor) CreateSandbox(context.Context, *executorv1.CreateSandboxRequest, ...grpc.CallOption) (*executorv1.CreateSandboxResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.created++
	return &executorv1.CreateSandboxResponse{Id: "sb-made"}, nil
}

func (f *fakeExecutor) DestroySandbox(_ context.Context, in *executorv1.DestroySandboxRequest, _ ...grpc.CallOption) (*executorv1.DestroySandboxResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.destroyed = append(f.destroyed, in.GetId())
	return &executorv1.DestroySandboxResponse{}, nil
}

func (f *fakeExecutor) GetSandbox(_ context.Context, in *executorv1.GetSandboxRequest, _ ...grpc.CallOption) (*executorv1.GetSandboxResponse, error) {
	if !f.existing[in.GetId()] {
		return nil, errs.New(errs.NotFound, "sandbox %s not found", in.GetId())
	}
	return &executorv1.GetSandboxResponse{Sandbox: &executorv1.Sandbox{Id: in.GetId(), State: executorv1.SandboxState_SANDBOX_STATE_READY}}, nil
}

func (f *fakeExecutor) Exec(_ context.Context, in *executorv1.ExecRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[executorv1.ExecResponse], error) {
	f.mu.Lock()
	f.ran[in.GetSandboxId()] = append(f.ran[in.GetSandboxId()], in.GetCommand())
	f.mu.Unlock()
	if f.onExec != nil {
		f.onExec()
	}
	return &execStream{msgs: []*executorv1.ExecResponse{
		{Event: &executorv1.ExecResponse_Output{Output: &executorv1.Output{Stream: executorv1.StreamName_STREAM_NAME_STDOUT, Data: []byte("ran: " + in.GetCommand())}}},
		{Event: &executorv1.ExecResponse_Finished{Finished: &executorv1.Finished{Outcome: &executorv1.Outcome{Type: executorv1.OutcomeType_OUTCOME_TYPE_EXIT, ExitCode: proto.Int32(0)}}}},
	}}, nil
}

type execStream struct {
	grpc.ClientStream
	msgs []*executorv1.ExecResponse
}

func (s *execStream) Recv() (*executorv1.ExecResponse, error) {
	if len(s.msgs) == 0 {
		return nil, io.EOF
	}
	m := s.msgs[0]
	s.msgs = s.msgs[1:]
	return m, nil
}

type gatewayMap map[string]*routerv1.Gateway

func (m gatewayMap) Get(_ context.Context, _, name string) (*routerv1.Gateway, error) {
	if g, ok := m[name]; ok {
		return g, nil
	}
	return nil, errs.New(errs.NotFound, "gateway %s not found", name)
}

func (m gatewayMap) List(context.Context, string) ([]*routerv1.Gateway, error) { return nil, nil }

func newService(t *testing.T, exec *fakeExecutor, maxConcurrent int) *Service {
	t.Helper()
	cli := etcdxtest.StartForTest(t)
	s, err := New(Options{
		Gateways: gatewayMap{"scripted": {Name: "scripted", Upstream: &routerv1.Upstream{Provider: routerv1.Provider_PROVIDER_SCRIPTED}}},
		Executor: exec, Etcd: cli, Grants: toolhost.NewGrants(cli), MaxConcurrent: maxConcurrent,
		HTTPClient: outbound.Must(outbound.Options{}).Client(0),
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The core picks the sandbox a shell runs in, runs the loop and cleans up
// what it made, whatever API asked.
func TestRun(t *testing.T) {
	t.Parallel()
	run := func(text string) []upstream.Message { return []upstream.Message{{Role: "user", Content: text}} }
	tests := []struct {
		name         string
		scope        tenant.Scope
		req          Request
		wantErr      string
		wantStatus   int
		wantFinish   string
		wantSandbox  string
		wantCreated  int
		wantDestroy  []string
		wantRanIn    string
		wantContains string
	}{
		{name: "the completion's own sandbox, made and destroyed", req: Request{Messages: run("run: ls"), Shell: &ShellTool{}},
			wantFinish: "stop", wantSandbox: "sb-made", wantCreated: 1, wantDestroy: []string{"sb-made"}, wantRanIn: "sb-made", wantContains: "ran: ls"},
		{name: "a named container, kept", req: Request{Messages: run("run: ls"), Shell: &ShellTool{}, Container: "sb-kept"},
			wantFinish: "stop", wantSandbox: "sb-kept", wantRanIn: "sb-kept", wantContains: "ran: ls"},
		{name: "an unknown container is 404 before any model call", req: Request{Messages: run("run: ls"), Shell: &ShellTool{}, Container: "sb-other", ContainerField: "tools[0].environment.container_id"},
			wantErr: `No running container found with id "sb-other"`, wantStatus: http.StatusNotFound},
		{name: "a local shell is the client's call", req: Request{Messages: run("run: ls"), Shell: &ShellTool{}, ShellLocal: true},
			wantFinish: "tool_calls"},
		{name: "no shell, no sandbox", req: Request{Messages: run("hello")}, wantFinish: "stop", wantContains: "scripted model"},
		{name: "/exec without a session answers itself", req: Request{Messages: run("/exec security=deny")}, wantFinish: "stop", wantContains: "needs a session"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			exec := &fakeExecutor{ran: map[string][]string{}, existing: map[string]bool{"sb-kept": true}}
			s := newService(t, exec, 0)
			g, err := s.Gateway(t.Context(), "acct", "scripted")
			if err != nil {
				t.Fatal(err)
			}
			scope := tc.scope
			scope.Account = "acct"
			res, err := s.Run(t.Context(), scope, g, &tc.req, nil)
			if tc.wantErr != "" {
				var fe *FieldError
				if !errors.As(err, &fe) || fe.Status != tc.wantStatus || !strings.Contains(fe.Error(), tc.wantErr) || fe.Field != tc.req.ContainerField {
					t.Fatalf("err = %v, want %d %q", err, tc.wantStatus, tc.wantErr)
				}
				if exec.created != 0 || len(exec.ran) != 0 {
					t.Fatalf("a refused completion made %d sandboxes and ran %v", exec.created, exec.ran)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.FinishReason != tc.wantFinish || res.Sandbox != tc.wantSandbox || !strings.Contains(res.Content, tc.wantContains) {
				t.Fatalf("result %+v (sandbox %q)", res.Result, res.Sandbox)
			}
			if tc.req.ShellLocal && (len(res.ToolCalls) != 1 || res.ToolCalls[0].Name != "shell") {
				t.Fatalf("a local shell call was not left to the client: %+v", res.ToolCalls)
			}
			// The completion's own sandbox lives until the caller has
			// answered and ends it, then ends in the background, once.
			exec.mu.Lock()
			early := slices.Clone(exec.destroyed)
			exec.mu.Unlock()
			if len(early) != 0 {
				t.Fatalf("destroyed %v before the caller ended the completion", early)
			}
			res.End()
			res.End()
			waitFor(t, func() bool {
				exec.mu.Lock()
				defer exec.mu.Unlock()
				return len(exec.destroyed) == len(tc.wantDestroy)
			})
			exec.mu.Lock()
			defer exec.mu.Unlock()
			if exec.created != tc.wantCreated || strings.Join(exec.destroyed, ",") != strings.Join(tc.wantDestroy, ",") {
				t.Fatalf("created %d, destroyed %v; want %d, %v", exec.created, exec.destroyed, tc.wantCreated, tc.wantDestroy)
			}
			if tc.wantRanIn != "" && len(exec.ran[tc.wantRanIn]) != 1 {
				t.Fatalf("commands ran %v, want one in %s", exec.ran, tc.wantRanIn)
			}
		})
	}
}

// Finish sees every completion that succeeded, before the completion's
// own sandbox is torn down, and none that failed.
func TestRunFinish(t *testing.T) {
	t.Parallel()
	run := func(text string) []upstream.Message { return []upstream.Message{{Role: "user", Content: text}} }
	tests := []struct {
		name        string
		req         Request
		wantCalled  bool
		wantSandbox string
	}{
		{name: "with its own sandbox, still up", req: Request{Messages: run("run: ls"), Shell: &ShellTool{}}, wantCalled: true, wantSandbox: "sb-made"},
		{name: "without a sandbox", req: Request{Messages: run("hello")}, wantCalled: true},
		{name: "answered by the router", req: Request{Messages: run("/exec security=deny")}, wantCalled: true},
		{name: "failed", req: Request{Messages: run("run: ls"), Shell: &ShellTool{}, Container: "sb-other"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			exec := &fakeExecutor{ran: map[string][]string{}}
			s := newService(t, exec, 0)
			g, err := s.Gateway(t.Context(), "acct", "scripted")
			if err != nil {
				t.Fatal(err)
			}
			var called bool
			var sandbox string
			var destroyed int
			tc.req.Finish = func(_ context.Context, res *Result) {
				called, sandbox = true, res.Sandbox
				exec.mu.Lock()
				destroyed = len(exec.destroyed)
				exec.mu.Unlock()
			}
			res, err := s.Run(t.Context(), tenant.Scope{Account: "acct"}, g, &tc.req, nil)
			if (err == nil) != tc.wantCalled {
				t.Fatalf("Run = %v, want an error only when Finish is not called", err)
			}
			if called != tc.wantCalled || sandbox != tc.wantSandbox || destroyed != 0 {
				t.Fatalf("Finish called %v with sandbox %q after %d teardowns; want called %v with %q before any", called, sandbox, destroyed, tc.wantCalled, tc.wantSandbox)
			}
			if res != nil && res.Sandbox != sandbox {
				t.Fatalf("Run's result has sandbox %q, Finish saw %q", res.Sandbox, sandbox)
			}
		})
	}
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	for range 500 {
		if ok() {
			return
		}
		<-time.After(10 * time.Millisecond)
	}
	t.Fatal("condition not met in 5s")
}

// Beyond its limit the router refuses a completion at once.
func TestAdmit(t *testing.T) {
	t.Parallel()
	s := newService(t, &fakeExecutor{}, 1)
	release, err := s.Admit()
	if err != nil {
		t.Fatal(err)
	}
	var over ErrOverloaded
	if _, err := s.Admit(); !errors.As(err, &over) || over.Limit != 1 {
		t.Fatalf("second admit = %v, want overloaded", err)
	}
	release()
	if release, err = s.Admit(); err != nil {
		t.Fatalf("admit after release: %v", err)
	}
	release()
}

// A completion that fails after making its sandbox ends it itself: there
// is no result for a caller to end it with.
func TestRunThatFailsEndsItsSandbox(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	// The client goes away while the command runs: the model's next call
	// fails.
	exec := &fakeExecutor{ran: map[string][]string{}, onExec: cancel}
	s := newService(t, exec, 0)
	g, err := s.Gateway(t.Context(), "acct", "scripted")
	if err != nil {
		t.Fatal(err)
	}
	req := &Request{Messages: []upstream.Message{{Role: "user", Content: "run: ls"}}, Shell: &ShellTool{}}
	if res, err := s.Run(ctx, tenant.Scope{Account: "acct"}, g, req, nil); err == nil {
		t.Fatalf("Run = %+v, want the cancelled call's error", res)
	}
	waitFor(t, func() bool {
		exec.mu.Lock()
		defer exec.mu.Unlock()
		return slices.Equal(exec.destroyed, []string{"sb-made"})
	})
}
