package anthropic

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/router/completion"
	"github.com/conch-sh/conch/services/router/loop"
	"github.com/conch-sh/conch/services/router/upstream"
)

func TestBashContent(t *testing.T) {
	for _, tc := range []struct{ name, result, want string }{
		{"exit", `{"stdout":"a","stderr":"b","outcome":{"type":"exit","exit_code":3}}`,
			`{"content":[],"return_code":3,"stderr":"b","stdout":"a","type":"bash_code_execution_result"}`},
		{"timeout", `{"stdout":"a","stderr":"","outcome":{"type":"timeout"}}`,
			`{"error_code":"execution_time_exceeded","type":"bash_code_execution_tool_result_error"}`},
		{"refused", `{"stdout":"","stderr":"","error":"Command not allowed","outcome":{"type":"error"}}`,
			`{"content":[],"return_code":126,"stderr":"conch: Command not allowed","stdout":"","type":"bash_code_execution_result"}`},
		{"refused after stderr", `{"stdout":"","stderr":"x","error":"denied","outcome":{"type":"error"}}`,
			`{"content":[],"return_code":126,"stderr":"x\nconch: denied","stdout":"","type":"bash_code_execution_result"}`},
		{"not json", `boom`,
			`{"content":[],"return_code":126,"stderr":"conch: boom","stdout":"","type":"bash_code_execution_result"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := json.Marshal(bashContent(tc.result))
			if string(b) != tc.want {
				t.Errorf("got  %s\nwant %s", b, tc.want)
			}
		})
	}
}

// TestContentOrder: text, each server call and its result, and the
// client's calls last, as a stream announces them.
func TestContentOrder(t *testing.T) {
	shell := upstream.ToolCall{ID: "c1", Name: "shell", Arguments: `{"command":"ls"}`}
	hook := upstream.ToolCall{ID: "c2", Name: "lookup", Arguments: `{"q":1}`}
	client := upstream.ToolCall{ID: "c3", Name: "weather", Arguments: `{"city":"x"}`}
	res := &loop.Result{
		ToolCalls: []upstream.ToolCall{client},
		Turn: []upstream.Message{
			{Role: "assistant", Content: "Looking.", ToolCalls: []upstream.ToolCall{shell, hook}},
			{Role: "tool", ToolCallID: "c1", Content: `{"stdout":"f\n","stderr":"","outcome":{"type":"exit","exit_code":0}}`},
			{Role: "tool", ToolCallID: "c2", Content: "Error: no"},
			{Role: "assistant", ToolCalls: []upstream.ToolCall{client}},
		},
	}
	var types []string
	for _, b := range contentOf(res) {
		types = append(types, b["type"].(string))
	}
	want := []string{"text", "server_tool_use", bashResult, mcpUse, mcpResult, "tool_use"}
	if len(types) != len(want) {
		t.Fatalf("blocks %v, want %v", types, want)
	}
	for i := range want {
		if types[i] != want[i] {
			t.Fatalf("blocks %v, want %v", types, want)
		}
	}
	blocks := contentOf(res)
	if blocks[1]["name"] != bashTool || blocks[4]["is_error"] != true || stopReason("tool_calls") != "tool_use" {
		t.Errorf("blocks %v", blocks)
	}
}

func TestErrorTypes(t *testing.T) {
	for status, typ := range map[int]string{
		400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error",
		409: "invalid_request_error", 413: "request_too_large", 429: "rate_limit_error", 500: "api_error",
		502: "api_error", 504: "timeout_error", statusOverloaded: "overloaded_error",
	} {
		if got := typeOf(status); got != typ {
			t.Errorf("typeOf(%d) = %s, want %s", status, got, typ)
		}
	}
	if e := answerOf(answer(http.StatusServiceUnavailable)); e.Status != statusOverloaded || e.Type != "overloaded_error" {
		t.Errorf("503 answered as %+v, want Anthropic's 529 overloaded_error", e)
	}
}

func answer(status int) errs.Answer {
	return errs.Answer{Status: status, Message: "busy", RetryAfter: "1"}
}

// The container says which skills were mounted in it, null when none.
func TestContainerOf(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	if got := containerOf(&completion.Result{}, time.Minute, now); got != nil {
		t.Errorf("no sandbox: %v", got)
	}
	for _, tt := range []struct {
		skills []completion.MountedSkill
		want   string
	}{
		{nil, `{"expires_at":"2026-12-07T12:01:00Z","id":"sb-1","skills":null}`},
		{[]completion.MountedSkill{{ID: "skill_a", Version: "2", Name: "a"}},
			`{"expires_at":"2026-12-07T12:01:00Z","id":"sb-1","skills":[{"skill_id":"skill_a","type":"custom","version":"2"}]}`},
	} {
		b, _ := json.Marshal(containerOf(&completion.Result{Sandbox: "sb-1", Skills: tt.skills}, time.Minute, now))
		if string(b) != tt.want {
			t.Errorf("container %s, want %s", b, tt.want)
		}
	}
}
