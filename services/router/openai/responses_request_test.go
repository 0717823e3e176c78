package openai

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/conch-sh/conch/services/router/completion"
	"github.com/conch-sh/conch/services/router/upstream"
)

// Input items become the conversation the upstream sees: calls join the
// assistant message before them, results follow as tool messages.
func TestResponsesInputToMessages(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		input string
		want  []upstream.Message
	}{
		{"a string is one user message", `"hi"`, []upstream.Message{{Role: "user", Content: "hi"}}},
		{"messages with text parts", `[{"role": "developer", "content": "be brief"}, {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]}]`,
			[]upstream.Message{{Role: "developer", Content: "be brief"}, {Role: "user", Content: "ab"}}},
		{"a call joins the assistant text before it", `[{"role": "assistant", "content": [{"type": "output_text", "text": "checking"}]}, {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}, {"type": "function_call_output", "call_id": "c1", "output": "ok"}]`,
			[]upstream.Message{{Role: "assistant", Content: "checking", ToolCalls: []upstream.ToolCall{{ID: "c1", Name: "f", Arguments: "{}"}}}, {Role: "tool", ToolCallID: "c1", Content: "ok"}}},
		{"parallel calls share one assistant message", `[{"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}, {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{}"}]`,
			[]upstream.Message{{Role: "assistant", ToolCalls: []upstream.ToolCall{{ID: "c1", Name: "f", Arguments: "{}"}, {ID: "c2", Name: "g", Arguments: "{}"}}}}},
		{"shell items are the shell tool", `[{"type": "shell_call", "call_id": "s1", "action": {"commands": ["ls", "pwd"]}}, {"type": "shell_call_output", "call_id": "s1", "output": [{"stdout": "a\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}, {"stdout": "/\n", "stderr": "e", "outcome": {"type": "exit", "exit_code": 2}}]}]`,
			[]upstream.Message{{Role: "assistant", ToolCalls: []upstream.ToolCall{{ID: "s1", Name: "shell", Arguments: `{"command":"ls\npwd"}`}}},
				{Role: "tool", ToolCallID: "s1", Content: `{"stdout":"a\n/\n","stderr":"e","outcome":{"exit_code":2,"type":"exit"}}`}}},
		{"conch's echoed server call", `[{"type": "mcp_call", "id": "m1", "server_label": "conch", "name": "get_users", "arguments": "{}", "output": "1,John"}]`,
			[]upstream.Message{{Role: "assistant", ToolCalls: []upstream.ToolCall{{ID: "m1", Name: "get_users", Arguments: "{}"}}}, {Role: "tool", ToolCallID: "m1", Content: "1,John"}}},
		{"reasoning is dropped", `[{"type": "reasoning", "id": "r1", "summary": []}, {"role": "user", "content": "go"}]`, []upstream.Message{{Role: "user", Content: "go"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, err := parseResponsesRequest([]byte(`{"model": "m", "input": ` + tc.input + `}`))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, req.Messages); diff != "" {
				t.Errorf("messages (-want +got):\n%s", diff)
			}
		})
	}
}

// Bad input is a 400 naming the field.
func TestResponsesRequestErrors(t *testing.T) {
	t.Parallel()
	tests := []struct{ body, param, msg string }{
		{`[]`, "", "not a JSON object"},
		{`{"input": "x"}`, "model", "is required"},
		{`{"model": "m"}`, "input", "is required"},
		{`{"model": "m", "input": 3}`, "input", "string or an array"},
		{`{"model": "m", "input": [{"type": "computer_call"}]}`, "input[0].type", "computer_call"},
		{`{"model": "m", "input": [{"role": "robot", "content": "x"}]}`, "input[0].role", "robot"},
		{`{"model": "m", "input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}`, "input[0].content[0].type", "text only"},
		{`{"model": "m", "input": [{"type": "function_call_output", "output": "x"}]}`, "input[0].call_id", "required"},
		{`{"model": "m", "input": [{"type": "shell_call", "call_id": "s"}]}`, "input[0]", "action.commands"},
		{`{"model": "m", "input": [{"type": "shell_call_output", "call_id": "s", "output": [{"outcome": {"type": "crash"}}]}]}`, "input[0].output", "exit or timeout"},
		{`{"model": "m", "input": "x", "temperature": "hot"}`, "temperature", "must be a number"},
		{`{"model": "m", "input": "x", "store": "yes"}`, "store", "must be a boolean"},
		{`{"model": "m", "input": "x", "background": true}`, "background", "without background"},
		{`{"model": "m", "input": "x", "tools": [{"type": "function", "name": "shell"}]}`, "tools[0].name", "reserved"},
		{`{"model": "m", "input": "x", "tools": [{"type": "function", "name": "a b"}]}`, "tools[0].name", "A-Za-z0-9"},
		{`{"model": "m", "input": "x", "tools": [{"type": "shell"}, {"type": "shell"}]}`, "tools[1]", "twice"},
		{`{"model": "m", "input": "x", "tools": [{"type": "shell", "timeout_seconds": 900}]}`, "tools[0].timeout_seconds", "1 to 300"},
		{`{"model": "m", "input": "x", "tools": [{"type": "shell", "environment": {"type": "container_reference"}}]}`, "tools[0].environment.container_id", "required"},
		{`{"model": "m", "input": "x", "tools": [{"type": "shell", "environment": {"type": "container_auto", "skills": [{"type": "inline"}]}}]}`, "tools[0].environment.skills[0].type", "inline"},
		{`{"model": "m", "input": "x", "tools": [{"type": "shell", "environment": {"type": "container_auto", "skills": [{"type": "skill_reference", "version": "1"}]}}]}`, "tools[0].environment.skills[0].skill_id", "required"},
		{`{"model": "m", "input": "x", "tool_choice": {"type": "file_search"}}`, "tool_choice.type", "function or shell"},
		{`{"model": "m", "input": "x", "text": {"format": {"type": "xml"}}}`, "text.format.type", "json_schema"},
	}
	for _, tc := range tests {
		_, err := parseResponsesRequest([]byte(tc.body))
		var fe *completion.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.param || !strings.Contains(fe.Error(), tc.msg) {
			t.Errorf("%s: %v, want param %q with %q", tc.body, err, tc.param, tc.msg)
		}
	}
}

// The Responses API's settings become chat completions' for the upstream;
// conch's own stay with conch.
func TestResponsesRequestUpstreamFields(t *testing.T) {
	t.Parallel()
	req, err := parseResponsesRequest([]byte(`{"model": "m", "input": "x", "max_output_tokens": 50, "temperature": 0.2,
		"tool_choice": {"type": "function", "name": "f"}, "text": {"format": {"type": "json_schema", "name": "s", "schema": {"type": "object"}, "strict": true}},
		"reasoning": {"effort": "low"}, "metadata": {"k": "v"}, "store": false, "x_vendor": 1,
		"tools": [{"type": "shell", "environment": {"type": "local"}, "max_uses": 2}]}`))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for k, v := range req.Extra {
		got[k] = string(v)
	}
	want := map[string]string{
		"max_completion_tokens": "50", "temperature": "0.2", "x_vendor": "1", "reasoning_effort": `"low"`,
		"tool_choice":     `{"function":{"name":"f"},"type":"function"}`,
		"response_format": `{"json_schema":{"name":"s","schema":{"type":"object"},"strict":true},"type":"json_schema"}`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("upstream fields (-want +got):\n%s", diff)
	}
	if req.Store || !req.ShellLocal || req.Shell == nil || *req.Shell.MaxUses != 2 {
		t.Errorf("request %+v", req)
	}
	var echoed map[string]any
	if err := json.Unmarshal(req.Top["metadata"], &echoed); err != nil || echoed["k"] != "v" {
		t.Errorf("metadata not kept for the response: %s", req.Top["metadata"])
	}
}

// A container_auto environment's skills are mounted in the container
// made for the request.
func TestResponsesRequestSkills(t *testing.T) {
	t.Parallel()
	req, err := parseResponsesRequest([]byte(`{"model": "m", "input": "x", "tools": [{"type": "shell",
		"environment": {"type": "container_auto", "skills": [{"type": "skill_reference", "skill_id": "skill_a", "version": "latest"}]}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []completion.SkillRef{{ID: "skill_a", Version: "latest", Field: "tools[0].environment.skills[0]"}}
	if diff := cmp.Diff(want, req.Skills); diff != "" || req.SkillsField != "tools[0].environment.skills" {
		t.Errorf("skills in %q (-want +got):\n%s", req.SkillsField, diff)
	}
}

func TestCheckCallIDs(t *testing.T) {
	t.Parallel()
	call := upstream.Message{Role: "assistant", ToolCalls: []upstream.ToolCall{{ID: "c1"}}}
	if err := checkCallIDs([]upstream.Message{call, {Role: "tool", ToolCallID: "c1"}}); err != nil {
		t.Error(err)
	}
	// A result before its call answers nothing yet.
	if err := checkCallIDs([]upstream.Message{{Role: "tool", ToolCallID: "c1"}, call}); err == nil {
		t.Error("a result before its call was taken")
	}
}
