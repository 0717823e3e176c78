package loop

import (
	"context"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"

	"github.com/conch-sh/conch/services/router/upstream"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// fakeParker holds parked calls by id.
type fakeParker map[string]struct {
	call   upstream.ToolCall
	result string
	ran    bool
}

func (fakeParker) Park(upstream.ToolCall, <-chan string) {}

func (p fakeParker) Resume(_ context.Context, call upstream.ToolCall, _ time.Duration) (string, bool, bool, error) {
	v, ok := p[call.ID]
	if !ok || v.call.Name != call.Name || v.call.Arguments != call.Arguments {
		return "", false, false, nil
	}
	return v.result, v.ran, true, nil
}

// TestResume: a conversation ending on server calls without results is
// answered from what was parked, a call parked but pending pauses again,
// and a call never parked (or given back changed) runs now, judged as any.
func TestResume(t *testing.T) {
	if _, err := exec.LookPath("dash"); err != nil {
		t.Skip("dash not installed")
	}
	echo := upstream.ToolCall{ID: "c1", Name: "shell", Arguments: `{"command":"echo parked"}`}
	parked := fakeParker{
		"c1": {call: echo, result: `{"stdout":"parked\n"}`, ran: true},
		"c2": {call: upstream.ToolCall{ID: "c2", Name: "shell", Arguments: `{"command":"sleep 9"}`}},
	}
	for _, tc := range []struct {
		name    string
		calls   []upstream.ToolCall
		answers []string // tool results already in the conversation, by call id
		paused  bool
		results []string // the results resume added, in order
		ran     []string // the commands the executor ran
	}{
		{name: "no calls"},
		{name: "parked and ran", calls: []upstream.ToolCall{echo}, results: []string{`{"stdout":"parked\n"}`}},
		{name: "answered already", calls: []upstream.ToolCall{echo}, answers: []string{"c1"}},
		{name: "parked and pending", calls: []upstream.ToolCall{echo, {ID: "c2", Name: "shell", Arguments: `{"command":"sleep 9"}`}}, paused: true,
			results: []string{`{"stdout":"parked\n"}`}},
		{name: "never parked", calls: []upstream.ToolCall{{ID: "c3", Name: "shell", Arguments: `{"command":"echo now"}`}},
			results: []string{`{"outcome":{"exit_code":0,"type":"exit"},"stderr":"","stdout":"now\n"}`}, ran: []string{"echo now"}},
		{name: "given back changed", calls: []upstream.ToolCall{{ID: "c1", Name: "shell", Arguments: `{"command":"echo changed"}`}},
			results: []string{`{"outcome":{"exit_code":0,"type":"exit"},"stderr":"","stdout":"changed\n"}`}, ran: []string{"echo changed"}},
		{name: "a client's call", calls: []upstream.ToolCall{{ID: "c4", Name: "weather", Arguments: `{}`}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ex := &shellExecutor{dir: t.TempDir()}
			cfg := Config{Executor: ex, Sandbox: fixedSandbox("sb"), Shell: &Shell{TimeoutSeconds: 10, MaxOutputLength: 4096}, Parker: parked}
			msgs := []upstream.Message{{Role: "user", Content: "go"}}
			if len(tc.calls) > 0 {
				msgs = append(msgs, upstream.Message{Role: "assistant", ToolCalls: tc.calls})
			}
			for _, id := range tc.answers {
				msgs = append(msgs, upstream.Message{Role: "tool", ToolCallID: id, Content: "given"})
			}
			req := &upstream.Request{Messages: msgs}
			paused, err := cfg.resume(t.Context(), &Result{}, req, nil)
			if err != nil {
				t.Fatal(err)
			}
			var results []string
			for _, m := range req.Messages[len(msgs):] {
				results = append(results, m.Content)
			}
			if paused != tc.paused || strings.Join(results, "|") != strings.Join(tc.results, "|") || strings.Join(ex.cmds, "|") != strings.Join(tc.ran, "|") {
				t.Errorf("paused %v, results %q, ran %q; want %v, %q, %q", paused, results, ex.cmds, tc.paused, tc.results, tc.ran)
			}
		})
	}
}

// approvalExecutor's command waits for an approval until release is
// closed, then prints ok.
type approvalExecutor struct {
	executorv1.ExecutorServiceClient
	release chan struct{}
}

func (e *approvalExecutor) Exec(ctx context.Context, _ *executorv1.ExecRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[executorv1.ExecResponse], error) {
	return &waitingStream{ctx: ctx, release: e.release}, nil
}

type waitingStream struct {
	grpc.ClientStream
	ctx     context.Context
	release chan struct{}
	n       int
}

func (s *waitingStream) Recv() (*executorv1.ExecResponse, error) {
	s.n++
	switch s.n {
	case 1:
		return &executorv1.ExecResponse{Event: &executorv1.ExecResponse_ApprovalPending{ApprovalPending: &executorv1.ApprovalPending{}}}, nil
	case 2:
		select {
		case <-s.release:
		case <-s.ctx.Done():
			return nil, s.ctx.Err()
		}
		return &executorv1.ExecResponse{Event: &executorv1.ExecResponse_Output{Output: &executorv1.Output{Stream: executorv1.StreamName_STREAM_NAME_STDOUT, Data: []byte("ok")}}}, nil
	case 3:
		return &executorv1.ExecResponse{Event: &executorv1.ExecResponse_Finished{Finished: &executorv1.Finished{Outcome: &executorv1.Outcome{Type: executorv1.OutcomeType_OUTCOME_TYPE_EXIT, ExitCode: proto.Int32(0)}}}}, nil
	}
	return nil, io.EOF
}

// parking records the call parked and hands over its result channel.
type parking struct {
	fakeParker
	parked chan (<-chan string)
}

func (p parking) Park(_ upstream.ToolCall, done <-chan string) { p.parked <- done }

// TestPauseParksTheCommand: a command waiting for an approval longer than
// Pause is parked, the request's context ending does not end it, and its
// result reaches the parker once it ran.
func TestPauseParksTheCommand(t *testing.T) {
	ex := &approvalExecutor{release: make(chan struct{})}
	p := parking{parked: make(chan (<-chan string), 1)}
	cfg := Config{Executor: ex, Sandbox: fixedSandbox("sb"), Shell: &Shell{TimeoutSeconds: 10, MaxOutputLength: 4096}, Pause: 10 * time.Millisecond, Parker: p}
	ctx, cancel := context.WithCancel(t.Context())
	res := &Result{}
	call := upstream.ToolCall{ID: "c1", Name: "shell", Arguments: `{"command":"uname"}`}
	if !cfg.pausable(call, nil) {
		t.Fatal("a shell call without a stream is not pausable")
	}
	result, paused := cfg.runPausable(ctx, res, call)
	cancel() // the request ends with its pause_turn answer
	if !paused || result != "" || res.ShellCommands != 1 {
		t.Fatalf("paused %v, result %q, commands %d", paused, result, res.ShellCommands)
	}
	done := <-p.parked
	close(ex.release)
	select {
	case r := <-done:
		if !strings.Contains(r, `"stdout":"ok"`) {
			t.Errorf("parked result %s", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the parked command never ended")
	}
}
