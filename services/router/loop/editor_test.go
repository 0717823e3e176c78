package loop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	"github.com/conch-sh/conch/services/router/upstream"
)

// shellExecutor runs each command with dash in dir: the editor's commands
// meet a real shell's quoting, as they do in a sandbox.
type shellExecutor struct {
	executorv1.ExecutorServiceClient
	dir  string
	cmds []string
}

func (e *shellExecutor) Exec(ctx context.Context, in *executorv1.ExecRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[executorv1.ExecResponse], error) {
	e.cmds = append(e.cmds, in.GetCommand())
	cmd := exec.CommandContext(ctx, "dash", "-c", in.GetCommand())
	cmd.Dir = e.dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	code := 0
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			return nil, err
		}
		code = exit.ExitCode()
	}
	return &lineStream{msgs: []*executorv1.ExecResponse{
		{Event: &executorv1.ExecResponse_Output{Output: &executorv1.Output{Stream: executorv1.StreamName_STREAM_NAME_STDOUT, Data: stdout.Bytes()}}},
		{Event: &executorv1.ExecResponse_Finished{Finished: &executorv1.Finished{Outcome: &executorv1.Outcome{Type: executorv1.OutcomeType_OUTCOME_TYPE_EXIT, ExitCode: proto.Int32(int32(code))}}}},
	}}, nil
}

type lineStream struct {
	grpc.ClientStream
	msgs []*executorv1.ExecResponse
}

func (s *lineStream) Recv() (*executorv1.ExecResponse, error) {
	if len(s.msgs) == 0 {
		return nil, io.EOF
	}
	m := s.msgs[0]
	s.msgs = s.msgs[1:]
	return m, nil
}

type fixedSandbox string

func (s fixedSandbox) ID(context.Context) (string, error) { return string(s), nil }

// TestEditor runs the editor's operations, in turn, on files of a real
// shell: what it writes is exactly the text it was given, quotes, dollars
// and missing newlines included.
func TestEditor(t *testing.T) {
	if _, err := exec.LookPath("dash"); err != nil {
		t.Skip("dash not installed")
	}
	dir := t.TempDir()
	ex := &shellExecutor{dir: dir}
	cfg := Config{Executor: ex, Sandbox: fixedSandbox("sb"), Shell: &Shell{TimeoutSeconds: 10, MaxOutputLength: 4096}, Editor: true}
	tricky := "it's $HOME `id` \\n\n%s %d\nlast line without newline"
	for _, tc := range []struct {
		name, args, want string
		file             string // the file's content after the call; "" to skip
	}{
		{"create", `{"command":"create","path":"a.txt","file_text":` + quote(tricky) + `}`,
			`{"type":"create","is_file_update":false}`, tricky},
		{"create again", `{"command":"create","path":"a.txt","file_text":"one\ntwo\nthree\n"}`,
			`{"type":"create","is_file_update":true}`, "one\ntwo\nthree\n"},
		{"view", `{"command":"view","path":"a.txt"}`,
			`{"type":"view","content":"one\ntwo\nthree","file_type":"text","start_line":1,"num_lines":3,"total_lines":3}`, ""},
		{"view a range", `{"command":"view","path":"a.txt","view_range":[2,-1]}`,
			`{"type":"view","content":"two\nthree","file_type":"text","start_line":2,"num_lines":2,"total_lines":3}`, ""},
		{"view out of range", `{"command":"view","path":"a.txt","view_range":[5,6]}`,
			`{"type":"error","error_code":"invalid_tool_input","error_message":"view_range must be [first, last] within the file's 3 lines (last -1: to the end)"}`, ""},
		{"replace", `{"command":"str_replace","path":"a.txt","old_str":"two\n","new_str":"2\n2b\n"}`,
			`{"type":"str_replace","old_start":2,"old_lines":1,"new_start":2,"new_lines":2,"lines":["2","2b"]}`, "one\n2\n2b\nthree\n"},
		{"replace twice found", `{"command":"str_replace","path":"a.txt","old_str":"2","new_str":"x"}`,
			`{"type":"error","error_code":"invalid_tool_input","error_message":"old_str occurs 2 times in a.txt; give more context so that it occurs once"}`, "one\n2\n2b\nthree\n"},
		{"replace not found", `{"command":"str_replace","path":"a.txt","old_str":"nine","new_str":"x"}`,
			`{"type":"error","error_code":"invalid_tool_input","error_message":"old_str does not occur in a.txt"}`, ""},
		{"missing file", `{"command":"view","path":"nope.txt"}`,
			`{"type":"error","error_code":"file_not_found","error_message":"cannot read nope.txt"}`, ""},
		{"odd path", `{"command":"create","path":"it's a $file","file_text":"x"}`,
			`{"type":"create","is_file_update":false}`, ""},
		{"unknown command", `{"command":"undo_edit","path":"a.txt"}`,
			`{"type":"error","error_code":"invalid_tool_input","error_message":"command must be view, create or str_replace, got \"undo_edit\""}`, ""},
		{"no path", `{"command":"view"}`, `{"type":"error","error_code":"invalid_tool_input","error_message":"path is required"}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := cfg.runEditor(t.Context(), 1, upstream.ToolCall{ID: "c", Name: EditorTool, Arguments: tc.args}, nil)
			if got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
			if tc.file != "" {
				b, err := os.ReadFile(filepath.Join(dir, "a.txt"))
				if err != nil || string(b) != tc.file {
					t.Errorf("file %q (%v), want %q", b, err, tc.file)
				}
			}
		})
	}
	if b, err := os.ReadFile(filepath.Join(dir, "it's a $file")); err != nil || string(b) != "x" {
		t.Errorf("odd path: %q, %v", b, err)
	}
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
