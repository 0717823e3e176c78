package mcpserver

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	"github.com/conch-sh/conch/services/internal/display"
	"github.com/conch-sh/conch/services/router/toolhost"
)

func TestCheckArguments(t *testing.T) {
	t.Parallel()
	schema, err := toolhost.CompileSchema(json.RawMessage(shellSchema))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, args string
		want       string // "" for valid
	}{
		{"valid", `{"command":"ls"}`, ""},
		{"all fields", `{"command":"ls","timeout_seconds":300,"max_output_length":1,"workdir":"/tmp"}`, ""},
		{"missing command", `{}`, "command: required"},
		{"command not a string", `{"command":5}`, "command: "},
		{"timeout zero", `{"command":"ls","timeout_seconds":0}`, "timeout_seconds: "},
		{"timeout too long", `{"command":"ls","timeout_seconds":301}`, "timeout_seconds: "},
		{"timeout fraction", `{"command":"ls","timeout_seconds":1.5}`, "timeout_seconds: "},
		{"output zero", `{"command":"ls","max_output_length":0}`, "max_output_length: "},
		{"empty workdir", `{"command":"ls","workdir":""}`, "workdir: "},
		{"unknown field", `{"command":"ls","cmd":"x"}`, "cmd: not an argument of this tool"},
		{"not an object", `["ls"]`, "arguments must be a JSON object"},
		{"not JSON", `{`, "arguments are not JSON"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := checkArguments(schema, json.RawMessage(tt.args))
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("checkArguments(%s) = %v, want nil", tt.args, err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("checkArguments(%s) = %v, want an error with %q", tt.args, err, tt.want)
			}
		})
	}
}

func TestWorkspacePath(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in, want string
		bad      bool
	}{
		{in: "/notes/a.txt", want: "/notes/a.txt"},
		{in: "notes/a.txt", want: "/notes/a.txt"},
		{in: "/home/workspace/notes/a.txt", want: "/notes/a.txt"},
		{in: "/home/workspace", want: "/"},
		{in: "/home/workspaces/a", want: "/home/workspaces/a"},
		{in: "/a//b/./c", want: "/a/b/c"},
		{in: "/", want: "/"},
		{in: "", bad: true},
		{in: "../etc/passwd", bad: true},
		{in: "/a/../../b", bad: true},
		{in: "/home/workspace/../x", bad: true},
		{in: "a\x00b", bad: true},
	} {
		got, err := workspacePath(tt.in)
		if tt.bad {
			if err == nil || !strings.HasPrefix(err.Error(), "path: ") {
				t.Errorf("workspacePath(%q) = %q, %v; want an error naming path", tt.in, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("workspacePath(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestElicitedDecision(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		res  mcp.ElicitResult
		want approvalv1.ApprovalDecision
		ok   bool
	}{
		{"allow once", mcp.ElicitResult{Action: "accept", Content: map[string]any{"decision": "allow-once"}}, approvalv1.ApprovalDecision_APPROVAL_DECISION_ALLOW_ONCE, true},
		{"allow always", mcp.ElicitResult{Action: "accept", Content: map[string]any{"decision": "allow-always"}}, approvalv1.ApprovalDecision_APPROVAL_DECISION_ALLOW_ALWAYS, true},
		{"deny", mcp.ElicitResult{Action: "accept", Content: map[string]any{"decision": "deny"}}, approvalv1.ApprovalDecision_APPROVAL_DECISION_DENY, true},
		{"declined", mcp.ElicitResult{Action: "decline"}, approvalv1.ApprovalDecision_APPROVAL_DECISION_DENY, true},
		{"dismissed", mcp.ElicitResult{Action: "cancel"}, approvalv1.ApprovalDecision_APPROVAL_DECISION_UNSPECIFIED, false},
		{"unknown word", mcp.ElicitResult{Action: "accept", Content: map[string]any{"decision": "yes"}}, approvalv1.ApprovalDecision_APPROVAL_DECISION_UNSPECIFIED, false},
	} {
		got, ok := elicitedDecision(&tt.res)
		if got != tt.want || ok != tt.ok {
			t.Errorf("%s: elicitedDecision = %v, %v; want %v, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}

func TestApprovalTextEscapes(t *testing.T) {
	t.Parallel()
	got := approvalText(&approvalv1.Approval{Id: "ap1", Command: "echo a\nrm -rf / \u202e", Cwd: "/home/workspace", Host: approvalv1.Host_HOST_SANDBOX})
	for _, want := range []string{`Command: echo a\nrm -rf / \u202e`, "CWD: /home/workspace", "Host: sandbox", "approval ap1"} {
		if !strings.Contains(got, want) {
			t.Errorf("approvalText = %q, want it to contain %q", got, want)
		}
	}
}

// An elicitation shows the approval's preview, with what it is.
func TestApprovalTextShowsThePreview(t *testing.T) {
	t.Parallel()
	got := approvalText(&approvalv1.Approval{Id: "ap1", Command: "rm x", Host: approvalv1.Host_HOST_SANDBOX, Preview: &approvalv1.Preview{
		Changes: []*approvalv1.PreviewChange{{Path: "/home/workspace/x", Change: approvalv1.PreviewChangeKind_PREVIEW_CHANGE_KIND_DELETED, SizeBytes: 4}},
	}})
	for _, want := range []string{"Preview (" + display.PreviewCaveat + "):", "deleted /home/workspace/x (4 bytes)"} {
		if !strings.Contains(got, want) {
			t.Errorf("approvalText = %q, want it to contain %q", got, want)
		}
	}
}

func TestShellResultText(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, json, want string
	}{
		{"exit", `{"stdout":"hi\n","stderr":"","outcome":{"type":"exit","exit_code":0}}`, "hi\n[exit code 0]"},
		{"stderr", `{"stdout":"a","stderr":"oops\n","outcome":{"type":"exit","exit_code":2}}`, "a\n[stderr]\noops\n[exit code 2]"},
		{"timeout", `{"stdout":"","stderr":"","outcome":{"type":"timeout"}}`, "[timed out]"},
		{"error", `{"outcome":{"type":"error"},"error":"denied"}`, "[error] denied"},
	} {
		var r shellResult
		if err := json.Unmarshal([]byte(tt.json), &r); err != nil {
			t.Fatal(err)
		}
		if got := r.text(); got != tt.want {
			t.Errorf("%s: text = %q, want %q", tt.name, got, tt.want)
		}
	}
}
